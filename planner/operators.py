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
    """The date evidence must be current at (``YYYY-MM-DD``, a real calendar date)."""
    max_age_days: Annotated[int, Field(ge=0)] | None = None
    """Evidence dated more than this many days before ``as_of`` is stale; unset, only supersession makes it stale."""


class Obligation(Record):
    id: NodeId
    """The obligation's id, unique in the plan; operators name it in their inputs."""
    kind: ObligationKind
    """What is sought: support, a refutation, an exception or defeater, a fresher state, an identity counterexample, an
    independent origin."""
    query: Query
    """What to search for: text, ids, entities or a graph pattern."""
    query_class: QueryClass
    """The kind of query, which sets the default strategy: identifier -> exact, lexical -> BM25, symbol_relation ->
    structural, dependency -> graph, conceptual -> vector, broad_question -> hybrid."""
    hard_filters: tuple[Filter, ...] = ()
    """Filters every hit must satisfy; how each contract applies them is explained, and a filter only applied after
    ranking is a gap."""
    soft_filters: tuple[Filter, ...] = ()
    """Filters that only reorder: hits that satisfy them come first."""
    k: Annotated[int, Field(ge=1, le=1000)] = 10
    """How many hits the obligation asks for (1 to 1000)."""
    freshness: Freshness | None = None
    """A current-evidence requirement: older or superseded evidence is stale."""
    egress: Egress = Egress.LOCAL
    """``local``: only contracts that keep the query on this machine may serve it; ``remote_ok``: remote ones too."""
    mandatory: bool = True
    """Whether the answer needs this obligation: a mandatory obligation not satisfied makes ``race run`` exit 3."""
    required_coverage: SearchCoverage = SearchCoverage.HEURISTIC
    """The least search coverage an alternative must reach to be chosen."""
    strategy: Strategy | None = None
    """Overrides the query class's default strategy (explained in the plan)."""
    allow_contracts: tuple[str, ...] = ()
    """Restricts the obligation to these contract ids."""
    deadline_ms: Annotated[int, Field(ge=1, le=600_000)] | None = None
    """This obligation's legs' deadline, in milliseconds, instead of ``budget.leg_timeout_ms``."""
    min_recall: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Approximate legs only where their calibrated recall bound reaches this; exact otherwise."""
    collapse: Collapse | None = Field(default=None, exclude_if=_unset)
    """One item per identical text (``content``) or per origin component of the graph's source
    dependence (``origin``); the others are listed in the kept item, never dropped. Left out of
    the plan's canonical form when unset, so plans without it keep their fingerprints."""


class _Op(Record):
    id: NodeId
    """The operator's id, unique in the plan."""

    def inputs_of(self) -> tuple[str, ...]:
        raise NotImplementedError


class _Inputs(_Op):
    inputs: Annotated[tuple[NodeId, ...], Field(min_length=1)]
    """The ids of the nodes it combines, in order (stages, for cascade and fallback)."""

    def inputs_of(self) -> tuple[str, ...]:
        return self.inputs


class UnionOp(_Inputs):
    """Everything its inputs found; with ``k``, only the best ``k`` of the fused ranking.

    Inputs whose contracts share a score calibration fuse by the sum of their calibrated
    similarities, the others by RRF (I11); only a ``k`` makes early stop possible (I9).
    """

    op: Literal["union"]
    """Always ``union``: everything its inputs found, fused into one ranking."""
    k: Annotated[int, Field(ge=1, le=1000)] | None = None
    """Keep only the best ``k`` of the fused ranking (and allow early stop)."""


class CascadeOp(_Inputs):
    """Run stages in order; the next only if the previous was insufficient."""

    op: Literal["cascade"]
    """Always ``cascade``: run stages in order, the next only if the previous was insufficient."""
    min_hits: Annotated[int, Field(ge=1)] = 1
    """A stage is sufficient with at least this many current hits at its required coverage."""


class FallbackOp(_Inputs):
    """Run stages in order; the next only on error, timeout or ineligibility."""

    op: Literal["fallback"]
    """Always ``fallback``: run stages in order, the next only on error, timeout or ineligibility."""


class IntersectOp(_Inputs):
    op: Literal["intersect"]
    """Always ``intersect``: only evidence every input found."""


class JoinOp(_Op):
    """Left evidence whose document has a ``via`` edge to a document in the right input."""

    op: Literal["join"]
    """Always ``join``: left evidence related through the graph to right evidence."""
    left: NodeId
    """The node whose evidence is kept."""
    right: NodeId
    """The node whose documents the left ones must be related to."""
    via: Annotated[str, Field(min_length=1)]
    """The graph relation to follow (e.g. ``cites``)."""
    direction: Literal["out", "in"] = "out"
    """``out``: a left document's edge points at a right one; ``in``: the reverse."""

    def inputs_of(self) -> tuple[str, ...]:
        return (self.left, self.right)


class RefineOp(_Op):
    """A residual filter or reorder over one input."""

    op: Literal["refine"]
    """Always ``refine``: a residual filter or reorder over one input."""
    input: NodeId
    """The node refined."""
    filters: tuple[Filter, ...] = ()
    """Filters the input's evidence must satisfy (pushed into its scans where the planner can)."""
    order_by: Literal["date_desc", "date_asc"] | None = None
    """Reorder by document date, newest (``date_desc``) or oldest (``date_asc``) first."""

    def inputs_of(self) -> tuple[str, ...]:
        return (self.input,)


class RelevanceFloor(Record):
    """Which hits of one input are relevant enough for their origin to count: the best
    ``top_n`` of the input's ranking, and/or those at least as relevant as ``native_score``
    in the hit's own score kind (a BM25 score at least it, a distance at most it)."""

    input: NodeId
    """The input the floor applies to."""
    top_n: Annotated[int, Field(ge=1)] | None = None
    """Only the best ``top_n`` hits of that input count."""
    native_score: float | None = None
    """Only hits at least this relevant in their own score kind count (a BM25 score at least it, a distance at most it).
    """

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
    """Always ``corroborate``: needs independent origins, not retrievers (I13)."""
    min_independent: Annotated[int, Field(ge=1)] = 2
    """How many distinct current origin components must support the claim."""
    floors: tuple[RelevanceFloor, ...] = ()
    """Relevance floors per input: only origins of hits that clear them count."""

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
    """Always ``oppose``: support and refutation kept side by side."""
    support: NodeId
    """The node that seeks support."""
    refutation: NodeId
    """The node that seeks refutation; items found by both become conflicting evidence."""

    def inputs_of(self) -> tuple[str, ...]:
        return (self.support, self.refutation)


class FreshenOp(_Op):
    op: Literal["freshen"]
    """Always ``freshen``: drop or mark stale evidence."""
    input: NodeId
    """The node freshened."""
    as_of: IsoDate
    """The date evidence must be current at (``YYYY-MM-DD``)."""
    max_age_days: Annotated[int, Field(ge=0)] | None = None
    """Evidence dated more than this many days before ``as_of`` is stale."""
    mode: Literal["drop", "mark"] = "mark"
    """``mark`` keeps stale evidence, marked and ranked after current evidence; ``drop`` removes it."""

    def inputs_of(self) -> tuple[str, ...]:
        return (self.input,)


LogicalOperator = (
    UnionOp | CascadeOp | FallbackOp | IntersectOp | JoinOp | RefineOp | CorroborateOp | OpposeOp | FreshenOp
)
Operator = Annotated[LogicalOperator, Field(discriminator="op")]

COMMUTATIVE = frozenset({"union", "intersect", "corroborate"})
