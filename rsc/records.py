"""Records that cross a boundary between planner, backends and runtime.

All are frozen pydantic models that reject unknown fields. A ``ScanRequest`` is what the
planner translated an obligation into for one contract; what an adapter answers (hits with
custody, gaps, the ``ScanResult``) is in ``rsc.answers``.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rsc.canonical import CanonicalFloat, canonical_json
from rsc.vocab import FilterOp, GapKind, GapSeverity

Scalar = bool | str | int | CanonicalFloat
"""A filter operand or metadata scalar. ``bool`` comes first: serializing the union tries its
members in order, and a bool is also an int (and a float to ``CanonicalFloat``), so True
would otherwise be written as 1."""
MetadataValue = Scalar | tuple[str, ...]
"""A document's metadata value: a scalar, or the sorted values of a multi-valued keyword."""


class Record(BaseModel):
    """Base of every boundary record: frozen, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


_R = TypeVar("_R", bound=BaseModel)
_set = object.__setattr__


def trusted(cls: type[_R], values: dict[str, Any], fields_set: frozenset[str]) -> _R:
    """A ``cls`` over ``values`` that are already valid: every field, in declaration order, each
    value what validation would have made of it, and ``fields_set`` the fields the equivalent
    constructor call names. What ``model_construct`` does, without its walk over the fields (a
    scan builds thousands of hits from rows it has checked, at a fifth of validation's cost)."""
    record = cls.__new__(cls)
    _set(record, "__dict__", values)
    _set(record, "__pydantic_fields_set__", set(fields_set))
    _set(record, "__pydantic_extra__", None)
    _set(record, "__pydantic_private__", None)
    return record


def _comparable(value: Scalar) -> tuple[int, Any]:
    # Booleans, numbers and strings never compare equal across types here.
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, int | float):
        return (1, value)
    return (2, str(value))


_OPERANDS: dict[FilterOp, frozenset[str]] = {
    FilterOp.EQ: frozenset({"value"}),
    FilterOp.NE: frozenset({"value"}),
    FilterOp.PREFIX: frozenset({"value"}),
    FilterOp.IN: frozenset({"values"}),
    FilterOp.NOT_IN: frozenset({"values"}),
    FilterOp.RANGE: frozenset({"gte", "lte"}),
    FilterOp.EXISTS: frozenset(),
    FilterOp.ANY_OF: frozenset({"any_of"}),
}
_NEW_OPS = frozenset({FilterOp.NE, FilterOp.NOT_IN, FilterOp.PREFIX, FilterOp.EXISTS, FilterOp.ANY_OF})


class Filter(Record):
    """A typed filter on one metadata field, or an ``any_of`` group of them. Text can never
    produce one (I14).

    A row whose field is absent (or null) passes no single-field filter, ``ne`` and ``not_in``
    included: SQL's (and LanceDB's and Milvus's) null semantics. A multi-valued keyword passes
    ``eq``, ``in``, ``prefix`` and ``range`` when any of its values does, and ``ne``/``not_in``
    when none of its values equals an operand."""

    field: str = ""
    """The metadata field filtered on, as the corpus schema names it (empty for ``any_of``)."""
    op: FilterOp = FilterOp.EQ
    """``eq``/``ne`` (need ``value``), ``in``/``not_in`` (need non-empty ``values``), ``range`` (needs ``gte``
    and/or ``lte``), ``prefix`` (a string ``value`` the field's string starts with), ``exists`` (no operand: the
    field has a value) or ``any_of`` (non-empty ``any_of``, no ``field``: at least one of those filters passes)."""
    value: Scalar | None = None
    """The value an ``eq`` or ``ne`` filter compares with, or the string a ``prefix`` filter starts with."""
    values: tuple[Scalar, ...] = ()
    """The values an ``in`` filter matches (any one of them) or a ``not_in`` filter excludes (every one)."""
    gte: Scalar | None = None
    """``range``: the inclusive lower bound (a date as ``YYYY-MM-DD``, a number), if any."""
    lte: Scalar | None = None
    """``range``: the inclusive upper bound, if any."""
    any_of: tuple[Filter, ...] = Field(default=(), exclude_if=lambda group: not group)
    """``any_of``: the single-field filters of the group, at least one of which a row passes (OR); kept in
    canonical order, so that a group's members in any order are one filter (one fingerprint)."""

    @field_validator("any_of", mode="after")
    @classmethod
    def _canonical_order(cls, members: tuple[Filter, ...]) -> tuple[Filter, ...]:
        return tuple(sorted(members, key=canonical_json))

    @model_validator(mode="after")
    def _shape(self) -> Filter:
        op, where = self.op, f"filter on {self.field!r}" if self.field else "filter"
        if op is FilterOp.ANY_OF:
            if self.field:
                raise ValueError(f"{where}: op 'any_of' takes no 'field' (each filter of the group names its own)")
            if not self.any_of:
                raise ValueError("filter: op 'any_of' needs a non-empty 'any_of' list of filters")
            if any(f.op is FilterOp.ANY_OF for f in self.any_of):
                raise ValueError("filter: an 'any_of' group holds single-field filters, not another group")
        elif not self.field:
            raise ValueError(f"filter: op {op.value!r} needs 'field'")
        if op in (FilterOp.EQ, FilterOp.NE) and self.value is None:
            raise ValueError(f"{where}: op {op.value!r} needs 'value'")
        if op in (FilterOp.IN, FilterOp.NOT_IN) and not self.values:
            raise ValueError(f"{where}: op {op.value!r} needs non-empty 'values'")
        if op is FilterOp.RANGE and self.gte is None and self.lte is None:
            raise ValueError(f"{where}: op 'range' needs 'gte' and/or 'lte'")
        if op is FilterOp.PREFIX and not (isinstance(self.value, str) and self.value):
            raise ValueError(f"{where}: op 'prefix' needs a non-empty string 'value'")
        if op in _NEW_OPS:
            given = {"value", "values", "gte", "lte", "any_of"} & self.model_fields_set
            stray = sorted(name for name in given - _OPERANDS[op] if getattr(self, name) not in (None, ()))
            if stray:
                raise ValueError(f"{where}: op {op.value!r} takes no {', '.join(repr(s) for s in stray)}")
        if op is not FilterOp.ANY_OF and self.any_of:
            raise ValueError(f"{where}: 'any_of' belongs to op 'any_of' only")
        return self

    def leaves(self) -> tuple[Filter, ...]:
        """The single-field filters this filter is made of: itself, or its group's members."""
        return self.any_of if self.op is FilterOp.ANY_OF else (self,)

    def matches(self, metadata: Mapping[str, MetadataValue]) -> bool:
        if self.op is FilterOp.ANY_OF:
            return any(f.matches(metadata) for f in self.any_of)
        value = metadata.get(self.field)
        if value is None:
            return False
        if self.op is FilterOp.EXISTS:
            return True
        if isinstance(value, tuple | list):
            if self.op in (FilterOp.NE, FilterOp.NOT_IN):
                # A multi-valued keyword is "not equal" when none of its values is equal.
                return not any(self._positive({self.field: item}) for item in value)
            # It matches the other operators when any of its values does.
            return any(self.matches({self.field: item}) for item in value)
        if self.op in (FilterOp.NE, FilterOp.NOT_IN):
            return not self._positive(metadata)
        return self._positive(metadata)

    def _positive(self, metadata: Mapping[str, MetadataValue]) -> bool:
        """``eq``, ``in``, ``prefix`` and ``range`` on one scalar; ``ne``/``not_in`` as their ``eq``/``in``."""
        value = metadata[self.field]
        assert not isinstance(value, tuple | list)
        actual = _comparable(value)
        if self.op in (FilterOp.EQ, FilterOp.NE):
            assert self.value is not None
            return actual == _comparable(self.value)
        if self.op in (FilterOp.IN, FilterOp.NOT_IN):
            return actual in {_comparable(v) for v in self.values}
        if self.op is FilterOp.PREFIX:
            return isinstance(value, str) and value.startswith(str(self.value))
        low_ok = self.gte is None or (actual[0] == _comparable(self.gte)[0] and actual >= _comparable(self.gte))
        high_ok = self.lte is None or (actual[0] == _comparable(self.lte)[0] and actual <= _comparable(self.lte))
        return low_ok and high_ok

    def describe(self) -> str:
        op = self.op
        if op is FilterOp.ANY_OF:
            return "(" + " or ".join(f.describe() for f in self.any_of) + ")"
        if op in (FilterOp.EQ, FilterOp.NE):
            return f"{self.field} {'=' if op is FilterOp.EQ else '!='} {self.value!r}"
        if op in (FilterOp.IN, FilterOp.NOT_IN):
            return f"{self.field} {'in' if op is FilterOp.IN else 'not in'} {list(self.values)!r}"
        if op is FilterOp.PREFIX:
            return f"{self.field} starts with {self.value!r}"
        if op is FilterOp.EXISTS:
            return f"{self.field} exists"
        low = "" if self.gte is None else f"{self.gte!r} <= "
        high = "" if self.lte is None else f" <= {self.lte!r}"
        return f"{low}{self.field}{high}"


class GraphPattern(Record):
    """A structural query: neighbours or a bounded traversal from the query's entities."""

    relations: tuple[str, ...] = ()
    """The edge relations to follow (e.g. ``mentions``, ``cites``); empty follows every relation."""
    direction: Literal["out", "in", "both"] = "out"
    """Which edges to follow from a node: outgoing (``out``), incoming (``in``) or ``both``."""
    depth: Annotated[int, Field(ge=1, le=8)] = 1
    """How many hops the traversal goes from the query's entities (1 to 8)."""
    node_budget: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    """The most nodes the traversal may visit; reaching it ends the traversal with a ``resource_limited`` gap."""


class EmbedderIdentity(Record):
    """What makes two embedders interchangeable: the same name, dimensions, weight bytes and, for
    a model read from a folder, the same configuration of everything else that changes its
    output (tokenizer, pooling, normalisation, maximum length, prefixes)."""

    name: Annotated[str, Field(min_length=1)]
    """The model's name (``sentence-transformers/all-MiniLM-L6-v2``, or the name a folder is given)."""
    dims: Annotated[int, Field(ge=1)]
    """The dimensions of its vectors."""
    weights_sha256: Annotated[str, Field(min_length=1)]
    """``sha256:<hex>`` of its weight file."""
    config_sha256: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """``sha256:<hex>`` of the canonical JSON of what else changes its output (architecture,
    tokenizer file, pooling, normalisation, maximum length, prefixes); absent for the bundled
    all-MiniLM-L6-v2, whose configuration is the package's own."""

    def describe(self) -> str:
        config = f", config {self.config_sha256}" if self.config_sha256 else ""
        return f"{self.name} ({self.dims}-d, weights {self.weights_sha256}{config})"


class Query(Record):
    text: str | None = None
    """The query text; data only, it never becomes a filter, boost or pin (I14)."""
    vector: tuple[CanonicalFloat, ...] | None = Field(default=None, exclude_if=lambda value: value is None)
    """A query vector the caller computed (``embedder`` says with which model). A vector leg whose
    index was built with that same embedder uses it instead of embedding ``text`` (no model
    call); a leg of another embedder refuses it."""
    embedder: EmbedderIdentity | None = Field(default=None, exclude_if=lambda value: value is None)
    """The identity of the embedder ``vector`` came from, exactly as a receipt's ``models`` names it."""
    ids: tuple[str, ...] = ()
    """Chunk or document ids looked up exactly (identifier legs)."""
    entities: tuple[str, ...] = ()
    """Graph node ids a structural or dependency leg starts from."""
    pattern: GraphPattern | None = None
    """The traversal a graph leg runs from ``entities``."""

    @model_validator(mode="after")
    def _non_empty(self) -> Query:
        if not (self.text and self.text.strip()) and not self.ids and not self.entities and self.vector is None:
            raise ValueError("query needs 'text', 'ids', 'entities' or 'vector'")
        if (self.vector is None) != (self.embedder is None):
            raise ValueError("query 'vector' and 'embedder' go together: a vector names the embedder it came from")
        if self.vector is not None:
            assert self.embedder is not None
            if len(self.vector) != self.embedder.dims:
                raise ValueError(
                    f"query 'vector' has {len(self.vector)} values; its embedder gives {self.embedder.dims}"
                )
            if not all(math.isfinite(v) for v in self.vector):
                raise ValueError("query 'vector' holds a value that is not a finite number")
        return self

    def parts(self) -> tuple[str, ...]:
        present = []
        if self.text and self.text.strip():
            present.append("text")
        if self.ids:
            present.append("ids")
        if self.entities:
            present.append("entities")
        if self.vector is not None:
            present.append("vector")
        return tuple(present)


class ScanRequest(Record):
    """One obligation translated for one contract: what the adapter is asked to do."""

    obligation: str
    """The id of the obligation this request serves."""
    rsc_id: str
    """The contract the request was translated for."""
    rsc_version: str
    """That contract's version."""
    backend: str
    """The backend that answers it."""
    mode: str
    """The contract's access mode on that backend (e.g. ``bm25``, ``vector_ann_prefilter``)."""
    query: Query
    """The obligation's query, as the backend receives it."""
    k: Annotated[int, Field(ge=1, le=100_000_000)]
    """How many hits are asked for."""
    pushed: tuple[Filter, ...] = ()
    """The hard filters the backend applies natively, before ranking."""
    residual: tuple[Filter, ...] = ()
    """The filters the runtime applies to the backend's hits afterwards (post-filters)."""
    params: dict[str, Scalar] = Field(default_factory=dict)
    """Mode parameters the translation chose (e.g. ``nprobes``, the rows a random access asks for)."""


class ExpectedRecall(Record):
    """The recall an approximate contract promises for one request
    (docs/invariants.md#calibrated-approximation): a lower confidence bound measured on the
    index it describes, for the request's selectivity bucket."""

    recall: Annotated[CanonicalFloat, Field(ge=0.0, le=1.0)] | None
    """``None``: the bucket was not measured, so nothing is promised."""
    bucket: str
    """The selectivity bucket the request's filters fell in (``unfiltered``, ``<0.1%``, ... ``>50%``)."""
    queries: Annotated[int, Field(ge=0)]
    """How many sampled queries the bucket's recall was measured with (0: not measured)."""
    k: Annotated[int, Field(ge=1)]
    """The k the recall was measured at."""
    calibration: str
    """The fingerprint of the calibration the figure comes from; ``none`` where no calibration of
    this index generation stands behind the contract (``recall`` is then ``null``)."""


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
    price_scale: dict[str, CanonicalFloat] = Field(default_factory=dict, exclude_if=lambda value: not value)
    """Per contract, what learned statistics multiply its prior price per candidate by (runs
    that took less than their candidates were priced at)."""
    access: dict[str, CanonicalFloat] = Field(default_factory=dict, exclude_if=lambda value: not value)
    """Index facts the cost model counts candidates with: ``ann_partitions``, ``ann_probes``
    (IVF), ``mean_degree`` (graph edges per node, one direction)."""
