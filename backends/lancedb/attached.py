"""A LanceDB table RACE did not build, attached through a field mapping.

The table keeps its own column names (``body``, ``doc_key``, ``team``, ...); a
``FieldMapping`` says which column holds each custody field, and the query vectors come from
the embedder the catalog names, compared against the table's own vector column. The one
contract is generated from the table as it is, at attach time:

* the vector index, if the table has one, is never used: an approximate contract would need
  recall measured on this table, which attaching does not do. Every scan compares every row
  that passes the filter (``bypass_vector_index``), so the top-k is exact;
* a metadata column of a scalar type is filtered before the top-k. A column with a scalar
  index is filtered through it; one without is filtered by scanning every row: exact all the
  same, and the description says which is which. A column of another type is not a filter
  field at all;
* custody fields the table lacks are ``null`` with the reason (``backends.mapping``).

The generation is the table's version with its row count and schema, read through LanceDB
itself (no local ``_versions/`` folder), so a table on object storage works the same way.
A run pins that version by checking it out.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa

from backends.base import UNKNOWN_GENERATION, Adapter, RefusedSnapshot, blocking
from backends.ingest.schema import FieldType
from backends.lancedb.query import _sql_string
from backends.mapping import (
    AttachedAdapter,
    FieldMapping,
    absent_reasons,
    identity_operand,
    mapped_hits,
    metadata_columns,
)
from backends.models.embedding import Embedder
from backends.models.folder import CallerVectorsOnly, caller_vectors_only
from backends.models.queries import QueryVectors
from rsc import (
    BackendStatistics,
    BackendUnavailable,
    Contract,
    Filter,
    FilterOp,
    Gap,
    GapKind,
    IndexMissingError,
    ScanRequest,
    ScanResult,
    ScoreKind,
    fingerprint,
)

MODE = "vector_flat"
_CHECKED_ROWS = 3
_SAME_VECTOR = 0.999
"""Cosine at or above which a stored vector is the embedding of its row's text (float32 storage)."""
_ORDERED = frozenset({FieldType.INTEGER, FieldType.FLOAT, FieldType.DATE})
_IDENTITY = ("chunk_id", "doc_id")


def column_type(dtype: pa.DataType) -> FieldType | None:
    """The metadata type of an Arrow column, or ``None`` where it cannot be a filter field."""
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return FieldType.KEYWORD
    if pa.types.is_boolean(dtype):
        return FieldType.BOOLEAN
    if pa.types.is_integer(dtype):
        return FieldType.INTEGER
    if pa.types.is_floating(dtype):
        return FieldType.FLOAT
    if pa.types.is_date32(dtype):
        return FieldType.DATE
    if pa.types.is_list(dtype) and (pa.types.is_string(dtype.value_type) or pa.types.is_large_string(dtype.value_type)):
        return FieldType.KEYWORDS
    return None


def _vector_column(schema: pa.Schema, named: str | None, *, where: str) -> tuple[str, int]:
    vectors = [f for f in schema if pa.types.is_fixed_size_list(f.type) and pa.types.is_floating(f.type.value_type)]
    if named is not None:
        found = [f for f in vectors if f.name == named]
        if not found:
            raise IndexMissingError(f"field 'vector': {named!r} is not a fixed-size float list column", where=where)
        return named, int(found[0].type.list_size)
    if len(vectors) != 1:
        names = [f.name for f in vectors]
        raise IndexMissingError(f"field 'vector': the table has vector columns {names}; name one", where=where)
    return vectors[0].name, int(vectors[0].type.list_size)


def _literal(kind: FieldType, value: object) -> str | None:
    """An operand as an SQL literal of the column's type; ``None`` if no value can equal it."""
    if kind in (FieldType.KEYWORD, FieldType.KEYWORDS):
        return _sql_string(value) if isinstance(value, str) else None
    if kind is FieldType.DATE:
        return f"date {_sql_string(value)}" if isinstance(value, str) else None
    if kind is FieldType.BOOLEAN:
        return ("TRUE" if value else "FALSE") if isinstance(value, bool) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if kind is FieldType.INTEGER and isinstance(value, float) and not value.is_integer():
        return None
    return str(int(value)) if kind is FieldType.INTEGER else repr(float(value))


def _meta_value(kind: FieldType, value: Any) -> Any:
    if kind is FieldType.DATE and isinstance(value, dt.date):
        return value.isoformat()
    if kind is FieldType.KEYWORDS:
        return tuple(sorted(str(v) for v in value))
    return value


class AttachedLanceAdapter(AttachedAdapter):
    """One LanceDB table under an instance name, served through its field mapping."""

    source = "table"

    def __init__(
        self,
        *,
        name: str,
        uri: str,
        table: str,
        mapping: FieldMapping,
        embedder: Embedder,
        vector: str | None = None,
        key_domain: str | None = None,
        check_vectors: bool = True,
    ) -> None:
        self.backend = name  # type: ignore[misc]
        where = f"instance {name}"
        self._uri, self._table_name, self._mapping = uri, table, mapping
        self._key_domain = key_domain or name
        try:
            self._db = lancedb.connect(uri)
            handle = self._db.open_table(table)
        except (ValueError, OSError, RuntimeError, FileNotFoundError) as exc:
            raise IndexMissingError(f"cannot open LanceDB table {table!r} at {uri}: {exc}", where=where) from exc
        schema = handle.schema
        columns = {f.name: f.type for f in schema}
        for field, column in mapping.columns().items():
            if column not in columns:
                raise IndexMissingError(f"field mapping {field!r}: the table has no column {column!r}", where=where)
        self._vector, dims = _vector_column(schema, vector, where=where)
        identity = embedder.identity
        if identity.dims != dims:
            raise IndexMissingError(
                f"embedder {identity.name} gives {identity.dims} dimensions; column {self._vector!r} holds {dims}",
                where=where,
            )
        self._embedder, self._queries = embedder, QueryVectors(embedder)
        # A model RACE cannot run is known by its identity alone: nothing to embed the check with.
        self._caller_vectors_only = isinstance(embedder, CallerVectorsOnly)
        if check_vectors and not self._caller_vectors_only:
            self._check_vectors(handle, where)
        typed = {c: column_type(t) for c, t in columns.items() if c != self._vector}
        chosen = metadata_columns(mapping, sorted(c for c, t in typed.items() if t is not None))
        for column in chosen:
            if column not in typed or typed[column] is None:
                raise IndexMissingError(f"metadata column {column!r} is missing or not of a scalar type", where=where)
        self._meta: dict[str, FieldType] = {c: t for c in chosen if (t := typed[c]) is not None}
        self._id_type = typed.get(mapping.id) or FieldType.KEYWORD
        indexed = sorted({c for i in handle.list_indices() for c in i.columns if c in self._meta or c == mapping.id})
        self._indexed = tuple(indexed)
        self._absent = absent_reasons(mapping, name)
        self._read = [*dict.fromkeys([*mapping.columns().values(), *self._meta])]
        self._pin: tuple[Any, str] | None = None
        self._stats: tuple[str, BackendStatistics] | None = None
        self.generated_contracts = (self._contract(),)

    def _check_vectors(self, handle: Any, where: str) -> None:
        """The embedder named for the table must be the one its vectors came from: the text of a
        few rows (the first ``_CHECKED_ROWS`` the table holds), embedded now, must give their
        stored vectors. Reading a few rows keeps attaching a large table cheap."""
        rows = handle.search().select([self._mapping.id, self._mapping.text, self._vector]).limit(_CHECKED_ROWS)
        ordered = rows.to_arrow().to_pylist()
        if not ordered:
            return
        fresh = self._embedder.embed([str(r[self._mapping.text] or "") for r in ordered])
        for row, vector in zip(ordered, fresh, strict=True):
            stored = np.asarray(row[self._vector], dtype=np.float64)
            cosine = float(stored @ vector / max(np.linalg.norm(stored) * np.linalg.norm(vector), 1e-12))
            if cosine < _SAME_VECTOR:
                raise IndexMissingError(
                    f"column {self._vector!r} of row {row[self._mapping.id]!r} is not {self._embedder.identity.name}'s "
                    f"embedding of column {self._mapping.text!r} (cosine {cosine:.3f}); name the embedder the vectors "
                    "came from, or set check_vectors = false if they embed other text",
                    where=where,
                )

    # -- contract ------------------------------------------------------------------------------

    def _contract(self) -> Contract:
        from backends.lancedb import LanceAdapter

        template = next(c for c in LanceAdapter.contracts() if c.mode == MODE)
        filters: dict[str, Any] = {}
        for field in _IDENTITY:
            filters[field] = {"support": "native_prefilter_exact", "ops": ["eq", "in"]}
        for column, kind in self._meta.items():
            ops = ["eq", "in", "range"] if kind in _ORDERED else ["eq", "in"]
            filters[column] = {"support": "native_prefilter_exact", "ops": ops}
        unindexed = [c for c in self._meta if c not in self._indexed]
        data = template.model_dump(mode="json")
        data.update(
            rsc_id=f"{self.backend}.lancedb.flat_prefilter",
            version="1.0.0",
            backend=self.backend,
            description=(
                f"Exact cosine top-k over LanceDB table {self._table_name!r} (column {self._vector!r}); any vector "
                "index is bypassed and every row that passes the filter is compared. Filters apply before the top-k: "
                f"through a scalar index on {list(self._indexed) or 'no column'}, by scanning every row on "
                f"{unindexed or 'no column'} (exact either way)."
            ),
            filters=dict(sorted(filters.items())),
            score_calibration=None,
            early_stop={"sorted_access": True, "random_access": False},
            provenance_fields=[f for f in template.provenance_fields if f not in self._absent],
            source_domain=f"LanceDB table {self._table_name!r} at {self._uri}, attached (not built by RACE)",
            snapshot={
                "semantics": "generation",
                "generation_fields": ["table_version", "rows", "schema"],
                "freshness": "as of the latest table version when the run started",
            },
        )
        return caller_vectors_only(Contract.model_validate(data), self._embedder)

    # -- snapshots -----------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return f"lancedb:{self._uri}#{self._table_name}"

    def _latest(self) -> tuple[Any, str]:
        pin = self._pin
        if pin is not None:
            return pin
        table = self._db.open_table(self._table_name)
        version = int(table.version)
        table.checkout(version)
        facts = {"table": self.identity, "version": version, "rows": table.count_rows(), "schema": str(table.schema)}
        return table, f"{self.backend}:" + fingerprint(facts)

    def generation(self) -> str:
        return self._latest()[1]

    def pinned(self, generation: str) -> Adapter:
        try:
            held = self._latest()
        except (OSError, ValueError, RuntimeError) as exc:
            reason = f"cannot be read ({type(exc).__name__}: {exc})"
            return RefusedSnapshot(self, planned=generation, current=UNKNOWN_GENERATION, reason=reason)
        if held[1] != generation:
            return RefusedSnapshot(self, planned=generation, current=held[1], reason="is no longer the table's state")
        pinned = copy.copy(self)
        pinned._pin = held
        return pinned

    def models(self) -> tuple[dict[str, str | int], ...]:
        return (dict(self._embedder.identity.model_dump(mode="json")),)

    def statistics(self) -> BackendStatistics:
        """Row and value counts for the cost model; a table that cannot be read now keeps the
        last counts (statistics only choose among plans, and the leg reports the failure)."""
        try:
            table, generation = self._latest()
        except (OSError, ValueError, RuntimeError):
            return self._stats[1] if self._stats is not None else BackendStatistics(backend=self.backend, rows=0)
        if self._stats is not None and self._stats[0] == generation:
            return self._stats[1]
        counted = [c for c, t in self._meta.items() if t in (FieldType.KEYWORD, FieldType.BOOLEAN, FieldType.INTEGER)]
        counts: dict[str, dict[str, int]] = {}
        if counted:
            data = table.search().select(counted).limit(None).to_arrow()
            for column in counted:
                pairs = data.column(column).drop_null().value_counts().to_pylist()
                counts[column] = {
                    str(p["values"]): int(p["counts"]) for p in sorted(pairs, key=lambda p: str(p["values"]))
                }
        stats = BackendStatistics(backend=self.backend, rows=table.count_rows(), value_counts=counts)
        self._stats = (generation, stats)
        return stats

    # -- scans ---------------------------------------------------------------------------------

    def _sql(self, filters: tuple[Filter, ...]) -> str | None:
        parts: list[str] = []
        for flt in filters:
            column = self._mapping.id if flt.field in _IDENTITY else flt.field
            kind = self._id_type if flt.field in _IDENTITY else self._meta.get(flt.field)
            if flt.field == "doc_id" and self._mapping.doc_id is not None:
                column, kind = self._mapping.doc_id, FieldType.KEYWORD
            if kind is None:
                raise BackendUnavailable(f"{self.backend} cannot filter on field {flt.field!r}", where=self.backend)
            quoted = f"`{column}`"
            if flt.op is FilterOp.RANGE:
                if kind not in _ORDERED:
                    raise BackendUnavailable(
                        f"range filter on field {flt.field!r} is not supported", where=self.backend
                    )
                for op, bound in ((">=", flt.gte), ("<=", flt.lte)):
                    if bound is not None:
                        literal = _literal(kind, bound)
                        parts.append(f"{quoted} {op} {literal}" if literal is not None else "FALSE")
                continue
            operands: list[object] = [flt.value] if flt.op is FilterOp.EQ else list(flt.values)
            if flt.field in _IDENTITY:
                numeric = kind is FieldType.INTEGER
                operands = [identity_operand(v, numeric=numeric) for v in operands]
            literals = [lit for lit in (_literal(kind, v) for v in operands) if lit is not None]
            if not literals:
                parts.append("FALSE")
            elif kind is FieldType.KEYWORDS:
                parts.append(f"array_has_any({quoted}, [{', '.join(literals)}])")
            else:
                parts.append(f"{quoted} IN ({', '.join(literals)})")
        return " AND ".join(f"({p})" for p in parts) if parts else None

    async def scan(self, request: ScanRequest) -> ScanResult:
        return await blocking(self._scan, request)

    def forget_query_vectors(self) -> None:
        self._queries.clear()

    def _scan(self, request: ScanRequest) -> ScanResult:
        if request.mode != MODE:
            raise BackendUnavailable(f"{self.backend} has no mode {request.mode!r}", where=request.rsc_id)
        table, generation = self._latest()
        where = self._sql(request.pushed)
        vector, embedded = self._queries.for_query(request.query, self._embedder.identity, where=request.rsc_id)
        # Read past k so that ties at the cut are broken by id, not by storage order.
        depth = 2 * request.k + 8
        builder = table.search(np.ascontiguousarray(vector, dtype=np.float32), vector_column_name=self._vector)
        builder = builder.distance_type("cosine").bypass_vector_index().limit(depth)
        builder = builder.select([*self._read, "_distance"])
        if where is not None:
            builder = builder.where(where, prefilter=True)
        try:
            found = builder.to_arrow().to_pylist()
            matching = table.count_rows(where) if where is not None else table.count_rows()
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendUnavailable(f"lancedb search failed: {exc}", where=request.rsc_id) from exc
        found.sort(key=lambda r: (float(r["_distance"]), str(r[self._mapping.id])))
        metas = [self._metadata(r) for r in found]
        kept = [(r, m) for r, m in zip(found, metas, strict=True) if all(f.matches(m) for f in request.residual)]
        candidates = min(len(found), request.k)
        kept = kept[: request.k]
        hits = mapped_hits(
            request=request,
            mapping=self._mapping,
            rows=[(r, max(float(r["_distance"]), 0.0)) for r, _ in kept],
            metadata=[m for _, m in kept],
            absent=self._absent,
            key_domain=self._key_domain,
            score_kind=ScoreKind.COSINE_DISTANCE,
            index_identity=self.identity,
            generation=generation,
            corpus_revision=generation,
        )
        gaps: list[Gap] = []
        if request.residual and len(hits) < min(request.k, candidates):
            detail = (
                f"filter applied after the search, to its {depth} best rows: {len(hits)} of k={request.k} survived "
                f"({'; '.join(f.describe() for f in request.residual)})"
            )
            gaps.append(self.gap(request, GapKind.POSTFILTER_ONLY_FILTER, detail))
        return ScanResult(
            hits=tuple(hits),
            gaps=tuple(gaps),
            model_calls=int(embedded),
            generation=generation,
            total_matches=matching,
            exhausted=len(hits) >= matching and not gaps,
        )

    def _metadata(self, row: dict[str, Any]) -> dict[str, Any]:
        return {c: _meta_value(t, row[c]) for c, t in self._meta.items() if row.get(c) is not None}
