"""The logical plan's node records: typed retrieval obligations (leaves) and the typed
operators that join them. Their field names and order are part of every plan fingerprint."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from rsc import Egress, Filter, ObligationKind, Query, QueryClass, Record, SearchCoverage, Strategy

NodeId = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")]


def _calendar_date(text: str) -> str:
    # The pattern admits 2026-02-30; a date the calendar lacks is bad input, not a crash later.
    try:
        dt.date.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a calendar date: {exc}") from None
    return text


IsoDate = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$"), AfterValidator(_calendar_date)]

Collapse = Literal["content", "origin"]
"""How an obligation collapses copies: by identical text, or by origin component."""


def _unset(value: object) -> bool:
    return value is None


class Freshness(Record):
    """A current-evidence requirement: evidence older than this, or superseded, is stale (I16)."""

    as_of: IsoDate
    max_age_days: Annotated[int, Field(ge=0)] | None = None


class Obligation(Record):
    id: NodeId
    kind: ObligationKind
    query: Query
    query_class: QueryClass
    hard_filters: tuple[Filter, ...] = ()
    soft_filters: tuple[Filter, ...] = ()
    k: Annotated[int, Field(ge=1, le=1000)] = 10
    freshness: Freshness | None = None
    egress: Egress = Egress.LOCAL
    mandatory: bool = True
    required_coverage: SearchCoverage = SearchCoverage.HEURISTIC
    strategy: Strategy | None = None
    allow_contracts: tuple[str, ...] = ()
    deadline_ms: Annotated[int, Field(ge=1, le=600_000)] | None = None
    min_recall: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Approximate legs only where their calibrated recall bound reaches this; exact otherwise."""
    collapse: Collapse | None = Field(default=None, exclude_if=_unset)
    """One item per identical text (``content``) or per origin component of the graph's source
    dependence (``origin``); the others are listed in the kept item, never dropped. Left out of
    the plan's canonical form when unset, so plans without it keep their fingerprints."""


class _Op(Record):
    id: NodeId

    def inputs_of(self) -> tuple[str, ...]:
        raise NotImplementedError


class _Inputs(_Op):
    inputs: Annotated[tuple[NodeId, ...], Field(min_length=1)]

    def inputs_of(self) -> tuple[str, ...]:
        return self.inputs


class UnionOp(_Inputs):
    """Everything its inputs found; with ``k``, only the best ``k`` of the fused ranking.

    Inputs whose contracts share a score calibration fuse by the sum of their calibrated
    similarities, the others by RRF (I11); only a ``k`` makes early stop possible (I9).
    """

    op: Literal["union"]
    k: Annotated[int, Field(ge=1, le=1000)] | None = None


class CascadeOp(_Inputs):
    """Run stages in order; the next only if the previous was insufficient."""

    op: Literal["cascade"]
    min_hits: Annotated[int, Field(ge=1)] = 1


class FallbackOp(_Inputs):
    """Run stages in order; the next only on error, timeout or ineligibility."""

    op: Literal["fallback"]


class IntersectOp(_Inputs):
    op: Literal["intersect"]


class JoinOp(_Op):
    """Left evidence whose document has a ``via`` edge to a document in the right input."""

    op: Literal["join"]
    left: NodeId
    right: NodeId
    via: Annotated[str, Field(min_length=1)]
    direction: Literal["out", "in"] = "out"

    def inputs_of(self) -> tuple[str, ...]:
        return (self.left, self.right)


class RefineOp(_Op):
    """A residual filter or reorder over one input."""

    op: Literal["refine"]
    input: NodeId
    filters: tuple[Filter, ...] = ()
    order_by: Literal["date_desc", "date_asc"] | None = None

    def inputs_of(self) -> tuple[str, ...]:
        return (self.input,)


class RelevanceFloor(Record):
    """Which hits of one input are relevant enough for their origin to count: the best
    ``top_n`` of the input's ranking, and/or those at least as relevant as ``native_score``
    in the hit's own score kind (a BM25 score at least it, a distance at most it)."""

    input: NodeId
    top_n: Annotated[int, Field(ge=1)] | None = None
    native_score: float | None = None

    @model_validator(mode="after")
    def _some_floor(self) -> RelevanceFloor:
        if self.top_n is None and self.native_score is None:
            raise ValueError(f"relevance floor for {self.input!r} needs 'top_n' and/or 'native_score'")
        return self


class CorroborateOp(_Inputs):
    """Needs ``min_independent`` distinct current origin components, not retrievers (I13).

    Only origins of current (not stale) evidence count; with ``floors``, only origins of
    hits that clear their input's relevance floor."""

    op: Literal["corroborate"]
    min_independent: Annotated[int, Field(ge=1)] = 2
    floors: tuple[RelevanceFloor, ...] = ()

    @model_validator(mode="after")
    def _floors_name_inputs(self) -> CorroborateOp:
        for floor in self.floors:
            if floor.input not in self.inputs:
                raise ValueError(f"relevance floor names {floor.input!r}, which is not an input of {self.id!r}")
        if len({f.input for f in self.floors}) != len(self.floors):
            raise ValueError(f"corroborate {self.id!r} gives one input two relevance floors")
        return self


class OpposeOp(_Op):
    op: Literal["oppose"]
    support: NodeId
    refutation: NodeId

    def inputs_of(self) -> tuple[str, ...]:
        return (self.support, self.refutation)


class FreshenOp(_Op):
    op: Literal["freshen"]
    input: NodeId
    as_of: IsoDate
    max_age_days: Annotated[int, Field(ge=0)] | None = None
    mode: Literal["drop", "mark"] = "mark"

    def inputs_of(self) -> tuple[str, ...]:
        return (self.input,)


LogicalOperator = (
    UnionOp | CascadeOp | FallbackOp | IntersectOp | JoinOp | RefineOp | CorroborateOp | OpposeOp | FreshenOp
)
Operator = Annotated[LogicalOperator, Field(discriminator="op")]

COMMUTATIVE = frozenset({"union", "intersect", "corroborate"})
