"""The Milvus adapter: cosine vector search over one collection, through pymilvus.

The same client code talks to a Milvus cluster (``http://host:19530``) and to milvus-lite
(a local ``*.db`` path, served in-process by the ``milvus-lite`` package). One adapter owns one
collection, built by ``MilvusAdapter.build`` from a corpus, and serves the one contract its
vector index supports:

* ``milvus.flat_prefilter`` — a FLAT (brute-force) index: the boolean filter expression is
  evaluated before the top-k, every passing row is compared, so the answer is exact.
* ``milvus.ann_filtered`` — an HNSW index: the filter is evaluated inside the graph search
  (``native_filtered_ann``); the recall its contract states is the lower bound measured on
  this collection at build time against the exact float64 answer (``measure_recall``).
  IVF_FLAT is not offered: under milvus-lite its filtered search measured a mean recall@10 of
  0.0 for some filters on the bundled corpus (the filter acts after the probe, not inside it).

Milvus reports COSINE as a similarity; hits carry ``1 - similarity`` as their
``cosine_distance``. Every read uses consistency level Strong.

The generation names the collection and its content: URI, collection name, index
description, row count and a digest over every row (ids, custody fields, metadata and vector
bytes). Milvus cannot pin a snapshot, so a scan reads the generation again after searching:
if it moved, the scan is refused with ``SnapshotMoved`` instead of reporting hits of one
content under the generation of another. Errors and deadlines of the client become
``BackendUnavailable`` / ``BackendTimeout`` here, at the adapter edge.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Self

import grpc
import numpy as np
import numpy.typing as npt
import orjson
from pymilvus import DataType, MilvusClient, MilvusException

from backends.base import (
    UNKNOWN_GENERATION,
    Adapter,
    Progress,
    RefusedSnapshot,
    blocking,
    custody_hits,
    load_contracts_beside,
)
from backends.calibration import wilson_lower
from backends.corpus import Chunk, Corpus
from backends.embedding import Embedder, EmbedderIdentity, MiniLMEmbedder
from backends.generated import generate_contract, read_contracts, schema_json, schema_of, write_contracts
from backends.lancedb.adapter import chunk_text
from backends.milvus.expr import NOTHING, filter_expr
from backends.schema import CorpusSchema, FieldSpec, FieldType, datetime_micros
from rsc import (
    BackendStatistics,
    BackendTimeout,
    BackendUnavailable,
    Calibration,
    Contract,
    CoverageClaim,
    Filter,
    FilterSupportClass,
    Hit,
    IndexMissingError,
    ScanRequest,
    ScanResult,
    ScoreKind,
    SnapshotMoved,
    fingerprint,
)

MANIFEST: Final = "race.json"
DEFAULT_COLLECTION: Final = "race_chunks"
LITE_FILE: Final = "milvus.db"
VECTOR: Final = "vector"
CONSISTENCY: Final = "Strong"

MODE_FLAT: Final = "milvus_flat"
MODE_ANN: Final = "milvus_ann"
FLAT_CONTRACT: Final = "milvus.flat_prefilter"
ANN_CONTRACT: Final = "milvus.ann_filtered"
INDEX_TYPES: Final = ("FLAT", "HNSW")

HNSW_BUILD: Final = {"M": 16, "efConstruction": 200}
HNSW_MIN_EF: Final = 64
MAX_TOPK: Final = 16_384
"""Milvus's own bound on a search's limit (and on a query's offset + limit)."""
TIE_MARGIN: Final = 8
"""Rows read past k so that ties at the k-th distance are broken by chunk id, not by Milvus."""
DEFAULT_TIMEOUT_S: Final = 10.0

_VARCHAR_MAX: Final = 65_535
_INSERT_BATCH: Final = 256
_EMBED_BATCH: Final = 64
_QUERY_VECTORS: Final = 256
_READ_BATCH: Final = 1_000
_TEXT_FIELDS: Final = (
    "doc_id",
    "title",
    "section",
    "text",
    "source_path",
    "source_hash",
    "corpus_revision",
    "metadata_json",
)
_INT_FIELDS: Final = ("line_start", "line_end")
_NULLABLE_INT_FIELDS: Final = ("char_start", "char_end")
_ROW_FIELDS: Final = ("chunk_id", *_TEXT_FIELDS, *_INT_FIELDS, *_NULLABLE_INT_FIELDS)
"""Every stored field but the vector: custody is rebuilt from them."""
_METADATA_TYPES: Final = {
    FieldType.KEYWORD: DataType.VARCHAR,
    FieldType.DATE: DataType.VARCHAR,
    FieldType.DATETIME: DataType.INT64,
    FieldType.INTEGER: DataType.INT64,
    FieldType.FLOAT: DataType.DOUBLE,
    FieldType.BOOLEAN: DataType.BOOL,
}
"""Milvus field types of the schema's scalar types (``keyword[]`` is an ARRAY of VARCHAR). Dates
are ISO strings (string order is date order); datetimes microseconds since the epoch."""
_COUNTED_TYPES: Final = frozenset(
    {FieldType.KEYWORD, FieldType.KEYWORDS, FieldType.DATE, FieldType.INTEGER, FieldType.BOOLEAN}
)

RECALL_QUERIES: Final = 40
RECALL_K: Final = 10


# -- the client edge -----------------------------------------------------------------------------


@contextmanager
def milvus_errors(where: str) -> Iterator[None]:
    """Client failures as RACE errors: a deadline is a ``BackendTimeout``, anything else the
    client or server raised a ``BackendUnavailable``."""
    try:
        yield
    except grpc.FutureTimeoutError as exc:
        raise BackendTimeout(f"milvus did not answer in time: {exc}", where=where) from exc
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            raise BackendTimeout(f"milvus did not answer in time: {exc}", where=where) from exc
        raise BackendUnavailable(f"milvus rpc failed: {exc}", where=where) from exc
    except MilvusException as exc:
        message = str(getattr(exc, "message", exc))
        if "deadline" in message.lower() or "timeout" in message.lower():
            raise BackendTimeout(f"milvus did not answer in time: {message}", where=where) from exc
        raise BackendUnavailable(f"milvus failed: {message}", where=where) from exc
    except (OSError, ValueError, TypeError) as exc:
        raise BackendUnavailable(f"milvus client failed: {type(exc).__name__}: {exc}", where=where) from exc


def resolve_uri(folder: Path, uri: str) -> str:
    """A milvus-lite file named relative to the instance folder, or any other URI as given."""
    if uri.endswith(".db") and not Path(uri).is_absolute() and "://" not in uri:
        return str(folder / uri)
    return uri


def embed_chunks(
    chunks: Sequence[Chunk], embedder: Embedder, progress: Progress | None = None
) -> npt.NDArray[np.float32]:
    """The vectors LanceDB's build stores for these chunks: ``chunk_text`` of each, embedded in
    batches by the same embedder, so both backends compare the same vectors."""
    vectors = np.empty((len(chunks), embedder.identity.dims), dtype=np.float32)
    for start in range(0, len(chunks), _EMBED_BATCH):
        batch = chunks[start : start + _EMBED_BATCH]
        vectors[start : start + len(batch)] = embedder.embed([chunk_text(c) for c in batch])
        if progress:
            progress(start + len(batch), len(chunks))
    return vectors


def lance_vectors(index_dir: Path, corpus: Corpus) -> npt.NDArray[np.float32]:
    """The vectors the LanceDB index in ``index_dir`` stores for the corpus's chunks, in chunk
    order: a collection loaded from them compares exactly the vectors LanceDB compares. The index
    must have been built from this very corpus revision."""
    from backends.lancedb.adapter import LanceAdapter

    chunks = corpus.chunks
    lance = LanceAdapter.open(index_dir)
    if lance.identity != f"lancedb:{corpus.revision}":
        raise IndexMissingError(
            f"the LanceDB index is of another corpus revision ({lance.identity}, not {corpus.revision})",
            where=str(index_dir),
        )
    table = lance.snapshot().table.search().select(["chunk_id", VECTOR]).limit(None).to_arrow()
    by_id = dict(zip(table.column("chunk_id").to_pylist(), table.column(VECTOR).to_pylist(), strict=True))
    missing = [c.chunk_id for c in chunks if c.chunk_id not in by_id]
    if missing:
        raise IndexMissingError(
            f"the LanceDB index lacks {len(missing)} chunks, e.g. {missing[0]}", where=str(index_dir)
        )
    return np.asarray([by_id[c.chunk_id] for c in chunks], dtype=np.float32)


def _collection_schema(client: MilvusClient, dims: int, corpus_schema: CorpusSchema) -> Any:
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("chunk_id", DataType.VARCHAR, is_primary=True, max_length=_VARCHAR_MAX)
    for name in _TEXT_FIELDS:
        schema.add_field(name, DataType.VARCHAR, max_length=_VARCHAR_MAX)
    for name in _INT_FIELDS:
        schema.add_field(name, DataType.INT64)
    for name in _NULLABLE_INT_FIELDS:
        schema.add_field(name, DataType.INT64, nullable=True)
    for name, spec in corpus_schema.filterable().items():
        if spec.type is FieldType.KEYWORDS:
            schema.add_field(
                name,
                DataType.ARRAY,
                element_type=DataType.VARCHAR,
                max_capacity=4096,
                max_length=_VARCHAR_MAX,
                nullable=True,
            )
        elif _METADATA_TYPES[spec.type] is DataType.VARCHAR:
            schema.add_field(name, DataType.VARCHAR, max_length=_VARCHAR_MAX, nullable=True)
        else:
            schema.add_field(name, _METADATA_TYPES[spec.type], nullable=True)
    schema.add_field(VECTOR, DataType.FLOAT_VECTOR, dim=dims)
    return schema


def _index_build_params(index_type: str, rows: int) -> dict[str, int]:
    if index_type == "HNSW":
        return dict(HNSW_BUILD)
    return {}


def _row(chunk: Chunk, vector: npt.NDArray[np.float32], revision: str, corpus_schema: CorpusSchema) -> dict[str, Any]:
    row: dict[str, Any] = {name: getattr(chunk, name) for name in ("chunk_id", *_INT_FIELDS, *_NULLABLE_INT_FIELDS)}
    for name in _TEXT_FIELDS:
        if name == "corpus_revision":
            row[name] = revision
        elif name == "metadata_json":
            row[name] = json.dumps(chunk.metadata, sort_keys=True)
        else:
            row[name] = str(getattr(chunk, name) or "")
        if len(row[name].encode("utf-8")) > _VARCHAR_MAX:
            raise BackendUnavailable(
                f"chunk {chunk.chunk_id}: {name} is longer than Milvus's {_VARCHAR_MAX}-byte VARCHAR", where="milvus"
            )
    for name, spec in corpus_schema.filterable().items():
        value = chunk.metadata.get(name)
        if value is not None and spec.type is FieldType.DATETIME:
            value = datetime_micros(str(value))
        row[name] = list(value) if isinstance(value, tuple | list) else value
    row[VECTOR] = np.asarray(vector, dtype=np.float32).tolist()
    return row


# -- recall, measured on the collection itself ---------------------------------------------------


def exact_top_k(
    vectors: npt.NDArray[np.float32], ids: Sequence[str], query: npt.NDArray[np.float32], k: int
) -> list[tuple[str, float]]:
    """The exact cosine top-k in float64, ties by id: the reference every approximate answer is
    measured against (and the FLAT contract is tested against)."""
    wide = vectors.astype(np.float64)
    q = query.astype(np.float64)
    norms = np.linalg.norm(wide, axis=1) * float(np.linalg.norm(q))
    sims = (wide @ q) / np.where(norms == 0.0, 1.0, norms)
    distances = 1.0 - sims
    order = sorted(range(len(ids)), key=lambda i: (float(distances[i]), ids[i]))
    return [(ids[i], float(distances[i])) for i in order[:k]]


# -- the adapter ---------------------------------------------------------------------------------


class MilvusAdapter(Adapter):
    backend = "milvus"

    def __init__(self, folder: Path, manifest: dict[str, Any], embedder: Embedder, *, timeout: float) -> None:
        self._folder = folder
        self._manifest = manifest
        self._uri = resolve_uri(folder, str(manifest["uri"]))
        self._collection = str(manifest["collection"])
        self._index_type = str(manifest["index"]["index_type"])
        self._corpus_schema = schema_of(manifest)
        self._fields = self._corpus_schema.filterable()
        self._embedder = embedder
        self._embedder_identity = EmbedderIdentity.model_validate(manifest["embedder"])
        self._embedder_fingerprint = fingerprint(self._embedder_identity)
        self._timeout = timeout
        with milvus_errors(self._uri):
            self._client = MilvusClient(self._uri, timeout=timeout)
        self._pin: str | None = None
        self._stats: tuple[str, BackendStatistics] | None = None
        self._vectors: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._vectors_lock = threading.Lock()

    # -- contract, build, open --------------------------------------------------------------

    @classmethod
    def contracts(cls) -> tuple[Contract, ...]:
        return load_contracts_beside(__file__)

    @classmethod
    def build(
        cls,
        corpus: Corpus,
        index_dir: Path,
        progress: Progress | None = None,
        *,
        embedder: Embedder | None = None,
        uri: str | None = None,
        collection: str = DEFAULT_COLLECTION,
        index_type: str = "FLAT",
        timeout: float = DEFAULT_TIMEOUT_S,
        vectors: npt.NDArray[np.float32] | None = None,
    ) -> str:
        """Load the corpus into ``collection`` at ``uri`` (by default a milvus-lite file inside
        ``index_dir/milvus/``), replacing a collection of that name, and write the instance's
        manifest and contracts to ``index_dir/milvus/``. ``vectors`` are the chunks' embeddings by
        ``embedder``, in chunk order, when they exist already (``lance_vectors``); otherwise the
        chunks are embedded here."""
        if index_type not in INDEX_TYPES:
            raise BackendUnavailable(f"milvus index type {index_type!r} is not one of {INDEX_TYPES}", where="milvus")
        embedder = embedder or MiniLMEmbedder()
        identity = embedder.identity
        folder = index_dir / cls.backend
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        stored_uri = uri if uri is not None else LITE_FILE
        resolved = resolve_uri(folder, stored_uri)
        chunks = corpus.chunks
        if vectors is None:
            vectors = embed_chunks(chunks, embedder, progress)
        elif vectors.shape != (len(chunks), identity.dims):
            raise BackendUnavailable(
                f"{vectors.shape} vectors given for {len(chunks)} chunks of {identity.dims} dims", where="milvus"
            )
        schema = corpus.corpus_schema
        build_params = _index_build_params(index_type, len(chunks))
        with milvus_errors(resolved):
            client = MilvusClient(resolved, timeout=timeout)
            try:
                if client.has_collection(collection):
                    client.drop_collection(collection)
                index_params = client.prepare_index_params()
                index_params.add_index(
                    field_name=VECTOR, index_type=index_type, metric_type="COSINE", params=build_params
                )
                client.create_collection(
                    collection,
                    schema=_collection_schema(client, identity.dims, schema),
                    index_params=index_params,
                    consistency_level=CONSISTENCY,
                )
                for start in range(0, len(chunks), _INSERT_BATCH):
                    client.insert(
                        collection,
                        [
                            _row(chunk, vectors[start + i], corpus.revision, schema)
                            for i, chunk in enumerate(chunks[start : start + _INSERT_BATCH])
                        ],
                    )
                # Flushed rows are sealed into segments that carry the vector index.
                client.flush(collection)
                client.load_collection(collection)
            finally:
                client.close()
        manifest: dict[str, Any] = {
            "uri": stored_uri,
            "collection": collection,
            "corpus_revision": corpus.revision,
            "embedder": identity.model_dump(mode="json"),
            "schema": schema_json(schema),
            "index": {"index_type": index_type, "metric_type": "COSINE", "params": build_params},
            "consistency_level": CONSISTENCY,
        }
        (folder / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1), encoding="utf-8")
        adapter = cls(folder, manifest, embedder, timeout=timeout)
        try:
            contract = adapter._template_contract()
            if index_type != "FLAT":
                recall, note = adapter.measure_recall(vectors, chunks)
                contract = _with_recall(contract, recall, note, index_type, build_params)
            contract = contract.model_copy(
                update={"source_domain": f"{contract.source_domain}; collection {collection!r} at {stored_uri}"}
            )
            write_contracts(folder, (contract,))
            if index_type != "FLAT":
                from backends.milvus.calibration import write_calibration

                adapter.generated_contracts = (contract,)
                write_calibration(adapter, folder)
            return adapter.generation()
        finally:
            adapter.close()

    @classmethod
    def open(cls, index_dir: Path, *, embedder: Embedder | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> Self:
        folder = index_dir / cls.backend
        path = folder / MANIFEST
        if not path.exists():
            raise IndexMissingError("no Milvus collection here (build one with MilvusAdapter.build)", where=str(folder))
        manifest = json.loads(path.read_text(encoding="utf-8"))
        embedder = embedder or MiniLMEmbedder()
        built_with = EmbedderIdentity.model_validate(manifest["embedder"])
        if embedder.identity != built_with:
            raise IndexMissingError(
                f"the collection's vectors were built with {built_with.name} ({built_with.weights_sha256}), but "
                f"this process embeds with {embedder.identity.name} ({embedder.identity.weights_sha256})",
                where=str(folder),
            )
        adapter = cls(folder, manifest, embedder, timeout=timeout)
        try:
            adapter.ensure_loaded()
        except BaseException:
            adapter.close()
            raise
        adapter.generated_contracts = read_contracts(folder)
        return adapter

    def ensure_loaded(self) -> None:
        """Milvus answers only a loaded collection, and a restarted server (milvus-lite in a new
        process) holds it released: load it unless it is loaded already."""
        if not self._call(self._client.has_collection, self._collection):
            raise IndexMissingError(f"no collection {self._collection!r} at {self._uri}", where=str(self._folder))
        state = self._call(self._client.get_load_state, self._collection)
        if "NotLoad" in str(state.get("state") if isinstance(state, dict) else state):
            self._call(self._client.load_collection, self._collection)

    def _template_contract(self) -> Contract:
        wanted = FLAT_CONTRACT if self._index_type == "FLAT" else ANN_CONTRACT
        template = next(c for c in self.contracts() if c.rsc_id == wanted)
        return generate_contract(template, self._corpus_schema)

    def index_contracts(self) -> tuple[Contract, ...]:
        if self.generated_contracts is not None:
            return self.generated_contracts
        return (self._template_contract(),)

    @property
    def identity(self) -> str:
        return f"milvus:{self._manifest['uri']}/{self._collection}"

    @property
    def collection(self) -> str:
        return self._collection

    @property
    def index_type(self) -> str:
        return self._index_type

    def models(self) -> tuple[dict[str, str | int], ...]:
        return (dict(self._embedder_identity.model_dump(mode="json")),)

    def filterable_fields(self) -> dict[str, FieldSpec]:
        return dict(self._fields)

    def calibrations(self) -> tuple[str, tuple[Calibration, ...]] | None:
        """The recall curves measured on this collection (at build) and their generation."""
        from backends.calibration import read_calibration

        return read_calibration(self._folder)

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        await blocking(self.close)

    # -- generations --------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with milvus_errors(f"milvus:{self._collection}"):
            return fn(*args, timeout=self._timeout, **kwargs)

    def read_rows(self, fields: Sequence[str]) -> list[dict[str, Any]]:
        """Every row's ``fields``, in chunk-id order."""
        rows: list[dict[str, Any]] = []
        with milvus_errors(f"milvus:{self._collection}"):
            iterator = self._client.query_iterator(
                self._collection,
                batch_size=_READ_BATCH,
                output_fields=list(fields),
                consistency_level=CONSISTENCY,
                timeout=self._timeout,
            )
            try:
                while batch := iterator.next():
                    rows.extend(dict(r) for r in batch)
            finally:
                iterator.close()
        return sorted(rows, key=lambda r: str(r["chunk_id"]))

    def _current(self) -> tuple[str, list[dict[str, Any]]]:
        if not self._call(self._client.has_collection, self._collection):
            raise BackendUnavailable(f"milvus collection {self._collection!r} is gone", where=self._uri)
        index = self._call(self._client.describe_index, self._collection, VECTOR) or {}
        rows = self.read_rows((*_ROW_FIELDS, VECTOR))
        digest = fingerprint(
            [
                [*(r.get(name) for name in _ROW_FIELDS), np.asarray(r[VECTOR], dtype=np.float32).tobytes().hex()]
                for r in rows
            ]
        )
        index_name = f"{index.get('index_type', 'none')}/{index.get('metric_type', 'none')}"
        generation = (
            f"milvus:{self._collection}:index={index_name}:rows={len(rows)}:content={digest}"
            f":embedder={self._embedder_fingerprint}"
        )
        return generation, rows

    def generation(self) -> str:
        """Collection, index and a digest of every row, read now (a pinned adapter answers the
        generation it was pinned at)."""
        if self._pin is not None:
            return self._pin
        return self._current()[0]

    async def current_generation(self) -> str:
        return await blocking(self.generation)

    def pinned(self, generation: str) -> Adapter:
        """The collection held at ``generation`` for one run. Milvus keeps no snapshots to check out,
        so a pin is a promise checked by each scan: the content must still be ``generation``."""
        try:
            current = self._current()[0]
        except Exception:
            current = UNKNOWN_GENERATION
        if generation == UNKNOWN_GENERATION or current != generation:
            return RefusedSnapshot(self, planned=generation, current=current, reason="is not the collection's content")
        held = copy.copy(self)
        held._pin = generation
        return held

    async def pin(self, generation: str) -> Adapter:
        return await blocking(self.pinned, generation)

    def statistics(self) -> BackendStatistics:
        """Row and value counts for the cost model. They only choose among alternatives (I2), so a
        collection that cannot be read reports none rather than failing the plan; its legs then
        fail on their own, as gaps."""
        try:
            generation, rows = self._current()
        except (BackendUnavailable, BackendTimeout):
            return BackendStatistics(backend=self.backend, rows=0)
        if self._stats is not None and self._stats[0] == generation:
            return self._stats[1]
        counts: dict[str, dict[str, int]] = {}
        for name, spec in self._fields.items():
            if spec.type not in _COUNTED_TYPES:
                continue
            tally: dict[str, int] = {}
            for row in rows:
                value = orjson.loads(row["metadata_json"]).get(name)
                for item in value if isinstance(value, list) else [value]:
                    if item is not None:
                        tally[str(item)] = tally.get(str(item), 0) + 1
            if tally:
                counts[name] = dict(sorted(tally.items()))
        stats = BackendStatistics(backend=self.backend, rows=len(rows), value_counts=counts)
        self._stats = (generation, stats)
        return stats

    # -- scans --------------------------------------------------------------------------------

    async def scan(self, request: ScanRequest) -> ScanResult:
        return await blocking(self._scan, request)

    def _search_params(self, k: int) -> dict[str, Any]:
        if self._index_type == "HNSW":
            return {"metric_type": "COSINE", "params": {"ef": max(HNSW_MIN_EF, k)}}
        return {"metric_type": "COSINE"}

    def search(
        self, vector: npt.NDArray[np.float32], expr: str | None, limit: int
    ) -> list[tuple[dict[str, Any], float]]:
        """Milvus's top-``limit`` under ``expr``, as (row, cosine distance) sorted by (distance, id)."""
        answer = self._call(
            self._client.search,
            self._collection,
            data=[np.asarray(vector, dtype=np.float32).tolist()],
            limit=limit,
            filter=expr or "",
            output_fields=list(_ROW_FIELDS),
            search_params=self._search_params(limit),
            anns_field=VECTOR,
            consistency_level=CONSISTENCY,
        )
        found = []
        for hit in answer[0]:
            entity = dict(hit["entity"])
            entity["chunk_id"] = hit["chunk_id"]
            found.append((entity, 1.0 - float(hit["distance"])))
        return sorted(found, key=lambda pair: (pair[1], str(pair[0]["chunk_id"])))

    def count(self, expr: str | None) -> int:
        answer = self._call(
            self._client.query,
            self._collection,
            filter=expr or "",
            output_fields=["count(*)"],
            consistency_level=CONSISTENCY,
        )
        return int(answer[0]["count(*)"])

    def _scan(self, request: ScanRequest) -> ScanResult:
        if request.mode not in (MODE_FLAT, MODE_ANN):
            raise BackendUnavailable(f"milvus has no mode {request.mode!r}", where=request.rsc_id)
        if (request.mode == MODE_FLAT) != (self._index_type == "FLAT"):
            raise BackendUnavailable(
                f"collection {self._collection!r} has a {self._index_type} index; it cannot serve {request.mode}",
                where=request.rsc_id,
            )
        text = (request.query.text or "").strip()
        if not text:
            raise BackendUnavailable("a vector scan needs query text", where=request.rsc_id)
        if request.k > MAX_TOPK:
            raise BackendUnavailable(f"milvus answers at most {MAX_TOPK} rows per search", where=request.rsc_id)
        # Residual filters are evaluated natively too: inside Milvus's search they lose nothing.
        filters: tuple[Filter, ...] = (*request.pushed, *request.residual)
        expr = filter_expr(filters, self._fields)
        before = self.generation()
        vector, embedded = self._query_vector(text)
        rows: list[tuple[dict[str, Any], float]] = []
        matching = 0
        if expr != NOTHING:
            rows = self._top_k(vector, expr, request.k)
            matching = self.count(expr)
        after = self._current()[0]
        if after != before:
            raise SnapshotMoved(
                f"collection {self._collection!r} changed while it was searched",
                where=request.rsc_id,
                planned=before,
                current=after,
            )
        hits = self._hits(request, rows, before)
        return ScanResult(
            hits=hits,
            model_calls=int(embedded),
            generation=before,
            total_matches=matching,
            exhausted=len(hits) >= matching,
        )

    def _top_k(self, vector: npt.NDArray[np.float32], expr: str | None, k: int) -> list[tuple[dict[str, Any], float]]:
        """The top-k, reading past k until the row after the k-th is farther than it, so that which
        of several equally distant rows is kept is decided by chunk id."""
        limit = min(k + TIE_MARGIN, MAX_TOPK)
        while True:
            rows = self.search(vector, expr, limit)
            if len(rows) <= k or rows[-1][1] > rows[k - 1][1] or limit >= MAX_TOPK:
                return rows[:k]
            limit = min(limit * 2, MAX_TOPK)

    def forget_query_vectors(self) -> None:
        with self._vectors_lock:
            self._vectors.clear()

    def _query_vector(self, text: str) -> tuple[npt.NDArray[np.float32], bool]:
        with self._vectors_lock:
            kept = self._vectors.get(text)
            if kept is not None:
                self._vectors.move_to_end(text)
                return kept, False
        vector: npt.NDArray[np.float32] = np.asarray(self._embedder.embed([text])[0], dtype=np.float32)
        vector.setflags(write=False)
        with self._vectors_lock:
            self._vectors[text] = vector
            while len(self._vectors) > _QUERY_VECTORS:
                self._vectors.popitem(last=False)
        return vector, True

    def _hits(self, request: ScanRequest, rows: list[tuple[dict[str, Any], float]], generation: str) -> tuple[Hit, ...]:
        chunks = []
        for row, distance in rows:
            chunk = {name: row.get(name) for name in _ROW_FIELDS if name != "metadata_json"}
            chunk["metadata"] = orjson.loads(row["metadata_json"])
            chunks.append((chunk, distance))
        return tuple(
            custody_hits(
                request=request,
                contract_ref=f"{request.rsc_id}@{request.rsc_version}",
                rows=chunks,
                score_kind=ScoreKind.COSINE_DISTANCE,
                index_identity=self.identity,
                generation=generation,
                corpus_revision=str(rows[0][0]["corpus_revision"]) if rows else "",
            )
        )

    # -- calibration --------------------------------------------------------------------------

    def measure_recall(self, vectors: npt.NDArray[np.float32], chunks: Sequence[Chunk]) -> tuple[float, str]:
        """Mean recall@10 of this collection's index against the exact float64 answer, unfiltered
        and under each keyword field's most and least frequent value, over queries that are the
        normalized sums of two stored vectors (points the index does not hold). Returns the lowest
        one-sided 95 % Wilson lower bound of a bucket's mean, and a note of every bucket's mean,
        bound and sample."""
        n = len(chunks)
        ids = [c.chunk_id for c in chunks]
        buckets: list[tuple[str, Filter | None]] = [("unfiltered", None)]
        for name, spec in self._fields.items():
            if spec.type is not FieldType.KEYWORD:
                continue
            tally: dict[str, int] = {}
            for chunk in chunks:
                value = chunk.metadata.get(name)
                if isinstance(value, str):
                    tally[value] = tally.get(value, 0) + 1
            if not tally:
                continue
            ranked = sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))
            for value, _ in {ranked[0][0]: 0, ranked[-1][0]: 0}.items():
                buckets.append((f"{name}={value}", Filter(field=name, value=value)))
        means: list[tuple[str, float, int]] = []
        for label, flt in buckets:
            keep = [i for i, c in enumerate(chunks) if flt is None or flt.matches(c.metadata)]
            if not keep:
                continue
            expr = filter_expr((flt,), self._fields) if flt is not None else None
            recalls = []
            for q in range(min(RECALL_QUERIES, n)):
                a, b = (q * 7919) % n, (q * 104_729 + 1) % n
                query = vectors[a] + vectors[b]
                query = (query / max(float(np.linalg.norm(query)), 1e-12)).astype(np.float32)
                exact = {cid for cid, _ in exact_top_k(vectors[keep], [ids[i] for i in keep], query, RECALL_K)}
                found = {str(row["chunk_id"]) for row, _ in self.search(query, expr, RECALL_K)}
                recalls.append(len(exact & found) / len(exact))
            means.append((label, float(np.mean(recalls)), len(recalls)))
        lowest = min(wilson_lower(mean, size) for _, mean, size in means)
        note = "; ".join(
            f"{label} mean {mean:.3f}, bound {wilson_lower(mean, size):.3f} ({size} queries)"
            for label, mean, size in means
        )
        return lowest, note


def _with_recall(contract: Contract, recall: float, note: str, index_type: str, params: dict[str, int]) -> Contract:
    """The ANN contract stating the recall bound measured on its collection, rounded down to 0.01."""
    stated = math.floor(recall * 100) / 100
    if stated <= 0.0:
        raise BackendUnavailable(
            f"the {index_type} index measured a recall bound of {recall:.3f} ({note}): too low to serve", where="milvus"
        )
    knobs = ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
    search = f"ef=max({HNSW_MIN_EF}, k)"
    profile = (
        f"milvus {index_type} cosine ({knobs}), search {search}, filter expression evaluated inside the index "
        f"search; recall@{RECALL_K} measured at build against the exact float64 answer"
    )
    filters = {
        name: support.model_copy(update={"profile": profile, "recall": stated})
        if support.support is FilterSupportClass.NATIVE_FILTERED_ANN
        else support
        for name, support in contract.filters.items()
    }
    description = (
        f"Approximate cosine top-k through the collection's {index_type} index with the boolean filter expression "
        f"applied inside the index search. Recall {stated} is the lowest one-sided 95 % lower bound of a "
        f"bucket's mean recall@{RECALL_K}, measured on this collection at build, by bucket: {note}; rounded down. "
        f"Read at consistency level {CONSISTENCY}."
    )
    return contract.model_copy(
        update={
            "coverage": contract.coverage.model_copy(update={"claim": CoverageClaim.APPROXIMATE, "recall": stated}),
            "filters": filters,
            "description": description,
        }
    )
