"""A Milvus collection RACE did not load, attached through a field mapping.

The collection keeps its own field names; a ``FieldMapping`` says which field holds each
custody field, and the query vectors come from the embedder the catalog names (its dimensions
must be the vector field's). The contract is generated from the collection as it is, at attach
time (``describe_collection`` and the vector field's ``describe_index``):

* a FLAT index with the COSINE metric: the boolean filter expression is evaluated before the
  top-k and every passing row is compared, so the answer is exact and every scalar metadata
  field is ``native_prefilter_exact``;
* an HNSW index answers approximately: its recall is measured on the collection when it is
  attached (``measure_recall_rows``: unfiltered and under each keyword field's most and least
  frequent value, against the exact float64 answer over the collection's rows), and the
  contract states that bound, never an assumed one; any other index type is refused;
* custody fields the collection lacks are ``null`` with the reason (``backends.mapping``).

Reads use the instance's consistency level (``backends.milvus.consistency``). The generation
is a digest of the collection's schema, index and every row's mapped fields and vector, read
now; a scan reads it again afterwards and is refused (``SnapshotMoved``) if it moved.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from pymilvus import DataType

from backends.base import UNKNOWN_GENERATION, Adapter, RefusedSnapshot, blocking
from backends.ingest.schema import FieldSpec, FieldType
from backends.mapping import (
    AttachedAdapter,
    FieldMapping,
    absent_reasons,
    identity_operand,
    mapped_hits,
    metadata_columns,
)
from backends.milvus.attached_contract import IDENTITY as _IDENTITY
from backends.milvus.attached_contract import attached_contract
from backends.milvus.client import _READ_BATCH, INDEX_TYPES, MAX_TOPK, MODE_ANN, MODE_FLAT, connect, milvus_errors
from backends.milvus.consistency import STRONG, caveat_detail, level_of
from backends.milvus.expr import NOTHING, filter_expr
from backends.milvus.search import measure_recall_rows, search_params, top_k
from backends.models.embedding import Embedder
from backends.models.folder import caller_vectors_only
from backends.models.queries import QueryVectors
from rsc import (
    BackendStatistics,
    BackendTimeout,
    BackendUnavailable,
    Contract,
    Filter,
    FilterOp,
    Gap,
    GapKind,
    GapSeverity,
    IndexMissingError,
    ScanRequest,
    ScanResult,
    ScoreKind,
    SnapshotMoved,
    fingerprint,
)

_SCALAR = {
    DataType.VARCHAR: FieldType.KEYWORD,
    DataType.BOOL: FieldType.BOOLEAN,
    DataType.INT8: FieldType.INTEGER,
    DataType.INT16: FieldType.INTEGER,
    DataType.INT32: FieldType.INTEGER,
    DataType.INT64: FieldType.INTEGER,
    DataType.FLOAT: FieldType.FLOAT,
    DataType.DOUBLE: FieldType.FLOAT,
}
"""Milvus scalar types a metadata field may have, as schema types (an ARRAY of VARCHAR is ``keyword[]``)."""


def field_type(field: dict[str, Any]) -> FieldType | None:
    """The metadata type of a described Milvus field, or ``None`` where it cannot be a filter field."""
    kind = field.get("type")
    if kind is DataType.ARRAY and field.get("element_type") is DataType.VARCHAR:
        return FieldType.KEYWORDS
    return _SCALAR.get(kind) if isinstance(kind, DataType) else None


class AttachedMilvusAdapter(AttachedAdapter):
    """One Milvus collection under an instance name, served through its field mapping."""

    source = "collection"

    def __init__(
        self,
        *,
        name: str,
        uri: str,
        collection: str,
        mapping: FieldMapping,
        embedder: Embedder,
        vector: str | None = None,
        key_domain: str | None = None,
        timeout: float = 10.0,
        consistency: str | None = None,
    ) -> None:
        self.backend = name  # type: ignore[misc]
        where = f"instance {name}"
        self._uri, self._collection, self._mapping, self._timeout = uri, collection, mapping, timeout
        self._key_domain = key_domain or name
        self._consistency = level_of(consistency or STRONG, where=where)
        with milvus_errors(where):
            self._client = connect(uri, timeout=timeout)
        try:
            self._describe(where, vector, embedder)
        except BaseException:
            self._client.close()
            raise
        self._embedder, self._queries = embedder, QueryVectors(embedder)
        self._absent = absent_reasons(mapping, name)
        self._read = [*dict.fromkeys([*mapping.columns().values(), *self._meta])]
        self._pin: str | None = None
        self.generated_contracts = (self._contract(),)

    def _describe(self, where: str, vector: str | None, embedder: Embedder) -> None:
        if not self._call(self._client.has_collection, self._collection):
            raise IndexMissingError(f"no Milvus collection {self._collection!r} at {self._uri}", where=where)
        described = self._call(self._client.describe_collection, self._collection)
        fields = {str(f["name"]): f for f in described["fields"]}
        for custody, column in self._mapping.columns().items():
            if column not in fields:
                raise IndexMissingError(
                    f"field mapping {custody!r}: the collection has no field {column!r}", where=where
                )
        vectors = {n: f for n, f in fields.items() if f.get("type") is DataType.FLOAT_VECTOR}
        if vector is None and len(vectors) != 1:
            raise IndexMissingError(
                f"field 'vector': the collection has vector fields {sorted(vectors)}; name one", where=where
            )
        self._vector = vector if vector is not None else next(iter(vectors))
        if self._vector not in vectors:
            raise IndexMissingError(f"field 'vector': {self._vector!r} is not a FLOAT_VECTOR field", where=where)
        dims = int(vectors[self._vector].get("params", {}).get("dim", 0))
        if embedder.identity.dims != dims:
            raise IndexMissingError(
                f"embedder {embedder.identity.name} gives {embedder.identity.dims} dimensions; field "
                f"{self._vector!r} holds {dims}",
                where=where,
            )
        self._index = dict(self._call(self._client.describe_index, self._collection, self._vector) or {})
        index_type, metric = str(self._index.get("index_type", "none")), str(self._index.get("metric_type", "none"))
        if metric != "COSINE":
            raise IndexMissingError(f"field {self._vector!r} is indexed with metric {metric}, not COSINE", where=where)
        if index_type not in INDEX_TYPES:
            raise IndexMissingError(
                f"field {self._vector!r} has a {index_type} index: only {list(INDEX_TYPES)} are served (a FLAT index "
                "exactly, an HNSW index with the recall measured on the collection at attach)",
                where=where,
            )
        typed = {n: field_type(f) for n, f in fields.items() if n != self._vector}
        chosen = metadata_columns(self._mapping, sorted(n for n, t in typed.items() if t is not None))
        for column in chosen:
            if typed.get(column) is None:
                raise IndexMissingError(f"metadata field {column!r} is missing or not of a scalar type", where=where)
        self._meta: dict[str, FieldType] = {c: t for c in chosen if (t := typed[c]) is not None}
        self._id_type = typed.get(self._mapping.id) or FieldType.KEYWORD
        self._partition_keys = sorted(n for n, f in fields.items() if f.get("is_partition_key"))
        self._schema_digest = fingerprint(
            [[n, str(f.get("type")), bool(f.get("is_partition_key"))] for n, f in sorted(fields.items())]
        )

    # -- contract ------------------------------------------------------------------------------

    def _contract(self) -> Contract:
        measured = None
        if self._index.get("index_type") != "FLAT":
            rows = self.read_rows([*self._read, self._vector])
            ids = [str(r[self._mapping.id]) for r in rows]
            vectors = np.asarray([r[self._vector] for r in rows], dtype=np.float32).reshape(len(rows), -1)
            fields = {c: FieldSpec(type=t) for c, t in self._meta.items()}
            measured = measure_recall_rows(
                self.search, fields, vectors, ids, [self._metadata(r) for r in rows], key=self._mapping.id
            )
        contract = attached_contract(
            name=self.backend, collection=self._collection, uri=self._uri, vector=self._vector, index=self._index,
            meta=self._meta, partition_keys=self._partition_keys, absent=self._absent,
            consistency=self._consistency, measured=measured,
        )  # fmt: skip
        return caller_vectors_only(contract, self._embedder)

    @property
    def identity(self) -> str:
        return f"milvus:{self._uri}/{self._collection}"

    @property
    def consistency(self) -> str:
        return self._consistency

    def models(self) -> tuple[dict[str, str | int], ...]:
        return (dict(self._embedder.identity.model_dump(mode="json")),)

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        await blocking(self.close)

    # -- generations ---------------------------------------------------------------------------

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with milvus_errors(f"{self.backend}:{self._collection}"):
            return fn(*args, timeout=self._timeout, **kwargs)

    def read_rows(self, fields: list[str]) -> list[dict[str, Any]]:
        """Every row's ``fields``, in id order, at the instance's consistency level."""
        rows: list[dict[str, Any]] = []
        with milvus_errors(f"{self.backend}:{self._collection}"):
            iterator = self._client.query_iterator(
                self._collection, batch_size=_READ_BATCH, output_fields=fields,
                consistency_level=self._consistency, timeout=self._timeout,
            )  # fmt: skip
            try:
                while batch := iterator.next():
                    rows.extend(dict(r) for r in batch)
            finally:
                iterator.close()
        return sorted(rows, key=lambda r: str(r[self._mapping.id]))

    def _current(self) -> str:
        rows = self.read_rows([*self._read, self._vector])
        digest = fingerprint(
            [
                [*(r.get(c) for c in self._read), np.asarray(r[self._vector], dtype=np.float32).tobytes().hex()]
                for r in rows
            ]
        )
        index = f"{self._index.get('index_type')}/{self._index.get('metric_type')}"
        facts = f"index={index}:rows={len(rows)}:schema={self._schema_digest}:content={digest}"
        return f"{self.backend}:milvus:{self._collection}:{facts}"

    def generation(self) -> str:
        return self._pin if self._pin is not None else self._current()

    def pinned(self, generation: str) -> Adapter:
        try:
            current = self._current()
        except (BackendUnavailable, BackendTimeout):
            current = UNKNOWN_GENERATION
        if generation == UNKNOWN_GENERATION or current != generation:
            return RefusedSnapshot(self, planned=generation, current=current, reason="is not the collection's content")
        held = copy.copy(self)
        held._pin = generation
        return held

    def statistics(self) -> BackendStatistics:
        """Row and value counts for the cost model (none if the collection cannot be read now)."""
        counted = [c for c, t in self._meta.items() if t in (FieldType.KEYWORD, FieldType.BOOLEAN, FieldType.INTEGER)]
        try:
            rows = self.read_rows([self._mapping.id, *counted])
        except (BackendUnavailable, BackendTimeout):
            return BackendStatistics(backend=self.backend, rows=0)
        counts: dict[str, dict[str, int]] = {}
        for column in counted:
            tally: dict[str, int] = {}
            for row in rows:
                if row.get(column) is not None:
                    tally[str(row[column])] = tally.get(str(row[column]), 0) + 1
            counts[column] = dict(sorted(tally.items()))
        return BackendStatistics(backend=self.backend, rows=len(rows), value_counts=counts)

    # -- scans ---------------------------------------------------------------------------------

    def _expr(self, filters: tuple[Filter, ...]) -> str | None:
        """The filters as one expression over the collection's own field names."""
        fields = {c: FieldSpec(type=t) for c, t in self._meta.items()}
        renamed: list[Filter] = []
        for flt in filters:
            if flt.field not in _IDENTITY:
                renamed.append(flt)
                continue
            column = self._mapping.doc_id if flt.field == "doc_id" and self._mapping.doc_id else self._mapping.id
            kind = self._id_type if column == self._mapping.id else FieldType.KEYWORD
            fields[column] = FieldSpec(type=kind)
            values = [flt.value] if flt.op is FilterOp.EQ else list(flt.values)
            operands = tuple(identity_operand(v, numeric=kind is FieldType.INTEGER) for v in values)
            renamed.append(Filter.model_validate({"field": column, "op": "in", "values": operands}))
        return filter_expr(tuple(renamed), fields)

    def search(self, vector: Any, expr: str | None, limit: int) -> list[tuple[dict[str, Any], float]]:
        params = search_params(str(self._index.get("index_type")), limit)
        answer = self._call(
            self._client.search, self._collection, data=[np.asarray(vector, dtype=np.float32).tolist()],
            limit=limit, filter=expr or "", output_fields=self._read, search_params=params,
            anns_field=self._vector, consistency_level=self._consistency,
        )  # fmt: skip
        key = self._mapping.id
        rows = [(dict(h["entity"]) | {key: h[key]}, 1.0 - float(h["distance"])) for h in answer[0]]
        return sorted(rows, key=lambda pair: (pair[1], str(pair[0][self._mapping.id])))

    async def scan(self, request: ScanRequest) -> ScanResult:
        return await blocking(self._scan, request)

    def forget_query_vectors(self) -> None:
        self._queries.clear()

    def _scan(self, request: ScanRequest) -> ScanResult:
        if request.mode != (MODE_FLAT if self._index.get("index_type") == "FLAT" else MODE_ANN):
            raise BackendUnavailable(f"{self.backend} has no mode {request.mode!r}", where=request.rsc_id)
        if request.k > MAX_TOPK:
            raise BackendUnavailable(f"milvus answers at most {MAX_TOPK} rows per search", where=request.rsc_id)
        expr = self._expr((*request.pushed, *request.residual))
        before = self.generation()
        vector, embedded = self._queries.for_query(request.query, self._embedder.identity, where=request.rsc_id)
        rows: list[tuple[dict[str, Any], float]] = []
        matching = 0
        if expr != NOTHING:
            rows = top_k(self.search, vector, expr, request.k)
            counted = self._call(
                self._client.query, self._collection, filter=expr or "", output_fields=["count(*)"],
                consistency_level=self._consistency,
            )  # fmt: skip
            matching = int(counted[0]["count(*)"])
        after = self._current()
        if after != before:
            raise SnapshotMoved(
                f"collection {self._collection!r} changed while it was searched",
                where=request.rsc_id,
                planned=before,
                current=after,
            )
        hits = mapped_hits(
            request=request,
            mapping=self._mapping,
            rows=[(r, max(d, 0.0)) for r, d in rows],
            metadata=[self._metadata(r) for r, _ in rows],
            absent=self._absent,
            key_domain=self._key_domain,
            score_kind=ScoreKind.COSINE_DISTANCE,
            index_identity=self.identity,
            generation=before,
            corpus_revision=before,
        )
        gaps: tuple[Gap, ...] = ()
        if self._consistency != STRONG:
            detail = caveat_detail(self._consistency, self._collection)
            gaps = (self.gap(request, GapKind.WEAK_CONSISTENCY, detail, GapSeverity.CAVEAT),)
        return ScanResult(
            hits=tuple(hits), gaps=gaps, model_calls=int(embedded), generation=before,
            total_matches=matching, exhausted=len(hits) >= matching,
        )  # fmt: skip

    def _metadata(self, row: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for column, kind in self._meta.items():
            value = row.get(column)
            if value is not None:
                out[column] = tuple(sorted(str(v) for v in value)) if kind is FieldType.KEYWORDS else value
        return out
