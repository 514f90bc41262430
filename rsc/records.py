"""Records that cross a boundary between planner, backends and runtime.

All are frozen pydantic models that reject unknown fields. A ``ScanRequest`` is what the
planner translated an obligation into for one contract; a ``ScanResult`` is what an
adapter answers, hits with full custody and the gaps the adapter itself observed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rsc.canonical import CanonicalFloat
from rsc.vocab import FilterOp, GapKind, GapSeverity, ScoreKind

Scalar = bool | str | int | CanonicalFloat
"""A filter operand or metadata scalar. ``bool`` comes first: serializing the union tries its
members in order, and a bool is also an int (and a float to ``CanonicalFloat``), so True
would otherwise be written as 1."""
MetadataValue = Scalar | tuple[str, ...]
"""A document's metadata value: a scalar, or the sorted values of a multi-valued keyword."""


class Record(BaseModel):
    """Base of every boundary record: frozen, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


def _comparable(value: Scalar) -> tuple[int, Any]:
    # Booleans, numbers and strings never compare equal across types here.
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, int | float):
        return (1, value)
    return (2, str(value))


class Filter(Record):
    """A typed filter on one metadata field. Text can never produce one (I14)."""

    field: Annotated[str, Field(min_length=1)]
    op: FilterOp = FilterOp.EQ
    value: Scalar | None = None
    values: tuple[Scalar, ...] = ()
    gte: Scalar | None = None
    lte: Scalar | None = None

    @model_validator(mode="after")
    def _shape(self) -> Filter:
        if self.op is FilterOp.EQ and self.value is None:
            raise ValueError(f"filter on {self.field!r}: op 'eq' needs 'value'")
        if self.op is FilterOp.IN and not self.values:
            raise ValueError(f"filter on {self.field!r}: op 'in' needs non-empty 'values'")
        if self.op is FilterOp.RANGE and self.gte is None and self.lte is None:
            raise ValueError(f"filter on {self.field!r}: op 'range' needs 'gte' and/or 'lte'")
        return self

    def matches(self, metadata: Mapping[str, MetadataValue]) -> bool:
        if self.field not in metadata:
            return False
        value = metadata[self.field]
        if isinstance(value, tuple | list):
            # A multi-valued keyword matches when any of its values does.
            return any(self.matches({self.field: item}) for item in value)
        actual = _comparable(value)
        if self.op is FilterOp.EQ:
            assert self.value is not None
            return actual == _comparable(self.value)
        if self.op is FilterOp.IN:
            return actual in {_comparable(v) for v in self.values}
        low_ok = self.gte is None or (actual[0] == _comparable(self.gte)[0] and actual >= _comparable(self.gte))
        high_ok = self.lte is None or (actual[0] == _comparable(self.lte)[0] and actual <= _comparable(self.lte))
        return low_ok and high_ok

    def describe(self) -> str:
        if self.op is FilterOp.EQ:
            return f"{self.field} = {self.value!r}"
        if self.op is FilterOp.IN:
            return f"{self.field} in {list(self.values)!r}"
        low = "" if self.gte is None else f"{self.gte!r} <= "
        high = "" if self.lte is None else f" <= {self.lte!r}"
        return f"{low}{self.field}{high}"


class GraphPattern(Record):
    """A structural query: neighbours or a bounded traversal from the query's entities."""

    relations: tuple[str, ...] = ()
    direction: Literal["out", "in", "both"] = "out"
    depth: Annotated[int, Field(ge=1, le=8)] = 1
    node_budget: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000


class Query(Record):
    text: str | None = None
    ids: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    pattern: GraphPattern | None = None

    @model_validator(mode="after")
    def _non_empty(self) -> Query:
        if not (self.text and self.text.strip()) and not self.ids and not self.entities:
            raise ValueError("query needs 'text', 'ids' or 'entities'")
        return self

    def parts(self) -> tuple[str, ...]:
        present = []
        if self.text and self.text.strip():
            present.append("text")
        if self.ids:
            present.append("ids")
        if self.entities:
            present.append("entities")
        return tuple(present)


class ScanRequest(Record):
    """One obligation translated for one contract: what the adapter is asked to do."""

    obligation: str
    rsc_id: str
    rsc_version: str
    backend: str
    mode: str
    query: Query
    k: Annotated[int, Field(ge=1, le=100_000_000)]
    pushed: tuple[Filter, ...] = ()
    residual: tuple[Filter, ...] = ()
    params: dict[str, Scalar] = Field(default_factory=dict)


class ExpectedRecall(Record):
    """The recall an approximate contract promises for one request (SPEC §7): a lower confidence
    bound measured on the index it describes, for the request's selectivity bucket."""

    recall: Annotated[CanonicalFloat, Field(ge=0.0, le=1.0)] | None
    """``None``: the bucket was not measured, so nothing is promised."""
    bucket: str
    queries: Annotated[int, Field(ge=0)]
    k: Annotated[int, Field(ge=1)]
    calibration: str


class Custody(Record):
    """Where a hit came from, precisely enough to check it by hand."""

    source_path: str
    line_start: int
    line_end: int
    char_start: int | None = None
    char_end: int | None = None
    source_hash: str
    chunk_id: str
    corpus_revision: str
    index_identity: str
    index_generation: str
    backend: str
    rsc: str
    request: str
    filters_pushed: tuple[str, ...] = ()
    filters_residual: tuple[str, ...] = ()
    rank: Annotated[int, Field(ge=1)]
    score: CanonicalFloat
    score_kind: ScoreKind
    access: Literal["sorted", "random"] = "sorted"
    """``random``: the hit answers a random access (the request named its rows by identity), so
    ``rank`` orders that answer only, not the input's ranking; the score is exact all the same."""
    expected_recall: ExpectedRecall | None = None
    """The recall its contract promised for the request, on hits of an approximate scan."""


class Hit(Record):
    """One backend's answer about one evidence unit. Score is not warrant (I11)."""

    key: str
    doc_id: str
    chunk_id: str
    title: str = ""
    text: str = ""
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    custody: Custody


class Gap(Record):
    kind: GapKind
    obligation: str
    backend: str | None = None
    detail: str
    severity: GapSeverity = GapSeverity.SHORTFALL
    covered_fraction: Annotated[CanonicalFloat, Field(ge=0.0, le=1.0)] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="shard_unavailable: the fraction of the sharded instance's documents (chunks) the answer "
        "searched, documents in the shards that answered / documents in the instance; absent on other gaps.",
    )
    """Left out of a gap's JSON when unset, so gaps without it keep their bytes and fingerprints."""


class ScanResult(Record):
    hits: tuple[Hit, ...] = ()
    gaps: tuple[Gap, ...] = ()
    model_calls: Annotated[int, Field(ge=0)] = 0
    generation: str
    total_matches: int | None = None
    exhausted: bool = False


def parse_iso_date(text: str, *, where: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        from rsc.errors import InputError

        raise InputError(f"{text!r} is not an ISO date YYYY-MM-DD", where=where) from exc


GAP_SEVERITY: dict[GapKind, GapSeverity] = {
    GapKind.EARLY_STOP: GapSeverity.CAVEAT,
    GapKind.NOT_NEEDED: GapSeverity.CAVEAT,
}


class BackendStatistics(Record):
    """Operational statistics one backend offers the cost model. They only choose (I2)."""

    backend: str
    rows: Annotated[int, Field(ge=0)]
    value_counts: dict[str, dict[str, int]] = Field(default_factory=dict)
    latency_ms: dict[str, CanonicalFloat] = Field(default_factory=dict)
