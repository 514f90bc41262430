"""The Milvus adapter: cosine vector search over one collection, through pymilvus.

The same client code talks to a Milvus cluster (``http://host:19530``) and to milvus-lite (a
local ``*.db`` path, served in-process by ``milvus-lite``). One adapter owns one collection,
built by ``MilvusAdapter.build`` from a corpus, and serves the one contract its index supports:

* ``milvus.flat_prefilter`` — a FLAT index: the filter is evaluated before the top-k (exact).
* ``milvus.ann_filtered`` — an HNSW index: the filter is evaluated inside the graph search
  (``native_filtered_ann``); the recall its contract states is the lower bound measured on
  this collection at build time against the exact float64 answer (``measure_recall``).
  IVF_FLAT is not offered: under milvus-lite its filtered search measured a mean recall@10 of 0.0
  for some filters on the bundled corpus (the filter acts after the probe, not inside it).

Milvus reports COSINE as a similarity; hits carry ``1 - similarity`` as ``cosine_distance``.
Every read uses the instance's consistency level (``consistency``; Strong unless the manifest
or the catalog says otherwise), and a read below Strong carries a caveat.

The generation names the collection and its content: URI, collection name, index
description, row count and a digest over every row (ids, custody fields, metadata and vector
bytes). Milvus cannot pin a snapshot, so a scan reads the generation again after searching:
if it moved, the scan is refused with ``SnapshotMoved`` instead of reporting hits of one
content under the generation of another. Client errors and deadlines become
``BackendUnavailable`` / ``BackendTimeout`` here; a closed adapter connects again when used.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from backends.base import (
    UNKNOWN_GENERATION,
    Adapter,
    Progress,
    RefusedSnapshot,
    blocking,
    load_contracts_beside,
)
from backends.generated import generate_contract, read_contracts, schema_of
from backends.ingest.corpus import Chunk, Corpus
from backends.ingest.schema import FieldSpec
from backends.milvus.build import lance_vectors as lance_vectors
from backends.milvus.build import with_partition_key
from backends.milvus.client import (
    _QUERY_VECTORS,
    _ROW_FIELDS,
    ANN_CONTRACT,
    DEFAULT_COLLECTION,
    DEFAULT_TIMEOUT_S,
    FLAT_CONTRACT,
    MANIFEST,
    MAX_TOPK,
    MODE_ANN,
    MODE_FLAT,
    VECTOR,
    Connection,
    resolve_uri,
)
from backends.milvus.client import LITE_FILE as LITE_FILE
from backends.milvus.client import milvus_errors as milvus_errors
from backends.milvus.consistency import STRONG, Consistency, caveat_detail, level_of, with_consistency
from backends.milvus.expr import NOTHING, filter_expr
from backends.milvus.generation import current_generation, read_rows, value_counts
from backends.milvus.search import answer_rows, custody, measure_recall, search_params, top_k
from backends.milvus.search import exact_top_k as exact_top_k
from backends.models.embedding import Embedder, EmbedderIdentity, MiniLMEmbedder
from backends.models.queries import BuiltWith, QueryVectors
from rsc import (
    BackendStatistics,
    BackendTimeout,
    BackendUnavailable,
    Calibration,
    Contract,
    Filter,
    Gap,
    GapKind,
    GapSeverity,
    IndexMissingError,
    ScanRequest,
    ScanResult,
    SnapshotMoved,
    fingerprint,
)


class MilvusAdapter(Adapter):
    backend = "milvus"

    def __init__(
        self,
        folder: Path,
        manifest: dict[str, Any],
        embedder: Embedder,
        *,
        timeout: float,
        consistency: str | None = None,
    ) -> None:
        self._folder = folder
        stated = consistency or manifest.get("consistency_level", STRONG)
        self._consistency = level_of(stated, where=str(folder / MANIFEST) if consistency is None else "consistency")
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
        self._connection = Connection(self._uri, timeout)
        self._connection.client()  # connect now: a server that cannot be reached is an error at open
        self._pin: str | None = None
        self._stats: tuple[str, BackendStatistics] | None = None
        self._queries = QueryVectors(embedder, _QUERY_VECTORS)

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
        consistency: str = STRONG,
        partition_key: str | None = None,
    ) -> str:
        """Load the corpus into ``collection`` at ``uri`` (by default a milvus-lite file inside
        ``index_dir/milvus/``), replacing a collection of that name, and write the instance's
        manifest and contracts to ``index_dir/milvus/``. ``vectors`` are the chunks' embeddings by
        ``embedder``, in chunk order, when they exist already (``lance_vectors``); otherwise the
        chunks are embedded here. Reads use ``consistency``; ``partition_key`` names a keyword or
        integer field every chunk holds, made the collection's partition key."""
        from backends.milvus.build import build_instance

        return build_instance(
            cls, corpus, index_dir, progress, embedder, uri, collection, index_type, timeout, vectors,
            consistency=consistency, partition_key=partition_key,
        )  # fmt: skip

    @classmethod
    def open(
        cls,
        index_dir: Path,
        *,
        embedder: Embedder | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        consistency: str | None = None,
    ) -> Self:
        """The instance folder's collection, read at ``consistency`` (default: its manifest's)."""
        folder = index_dir / cls.backend
        path = folder / MANIFEST
        if not path.exists():
            raise IndexMissingError("no Milvus collection here (build one with MilvusAdapter.build)", where=str(folder))
        manifest = json.loads(path.read_text(encoding="utf-8"))
        built_with = EmbedderIdentity.model_validate(manifest["embedder"])
        # The model is loaded, and checked against the one the vectors were built with, at the first query.
        embedder = BuiltWith(embedder or MiniLMEmbedder(), built_with, where=str(folder), hint="rebuild the collection")
        adapter = cls(folder, manifest, embedder, timeout=timeout, consistency=consistency)
        try:
            adapter.ensure_loaded()
        except BaseException:
            adapter.close()
            raise
        written = read_contracts(folder)
        if written is not None:
            adapter.generated_contracts = tuple(with_consistency(c, adapter.consistency) for c in written)
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
        contract = with_partition_key(generate_contract(template, self._corpus_schema), self.partition_key)
        return with_consistency(contract, self._consistency)

    def index_contracts(self) -> tuple[Contract, ...]:
        if self.generated_contracts is not None:
            return self.generated_contracts
        return (self._template_contract(),)

    @property
    def identity(self) -> str:
        return f"milvus:{self._manifest['uri']}/{self._collection}"

    @property
    def folder(self) -> Path:
        return self._folder

    @property
    def collection(self) -> str:
        return self._collection

    @property
    def index_type(self) -> str:
        return self._index_type

    @property
    def consistency(self) -> Consistency:
        return self._consistency

    @property
    def partition_key(self) -> str | None:
        key = self._manifest.get("partition_key")
        return str(key) if key is not None else None

    def models(self) -> tuple[dict[str, str | int], ...]:
        return (dict(self._embedder_identity.model_dump(mode="json")),)

    def filterable_fields(self) -> dict[str, FieldSpec]:
        return dict(self._fields)

    def calibrations(self) -> tuple[str, tuple[Calibration, ...]] | None:
        """The recall curves measured on this collection (at build) and their generation."""
        from backends.calibration import read_calibration

        return read_calibration(self._folder)

    @property
    def _client(self) -> Any:
        return self._connection.client()

    def warm(self, modes: frozenset[str] | None = None) -> None:
        self._connection.client()  # connected again after a close, before a plan's clock starts

    def close(self) -> None:
        self._connection.close()

    async def aclose(self) -> None:
        await blocking(self.close)

    # -- generations --------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with milvus_errors(f"milvus:{self._collection}"):
            return fn(*args, timeout=self._timeout, **kwargs)

    def read_rows(self, fields: Sequence[str]) -> list[dict[str, Any]]:
        """Every row's ``fields``, in chunk-id order."""
        return read_rows(self._client, self._collection, fields, self._timeout, self._consistency)

    def _current(self) -> tuple[str, list[dict[str, Any]]]:
        return current_generation(
            self._call, self._client, self._collection, self._uri, self._embedder_fingerprint, self.read_rows
        )

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
        counts = value_counts(rows, self._fields)
        stats = BackendStatistics(backend=self.backend, rows=len(rows), value_counts=counts)
        self._stats = (generation, stats)
        return stats

    # -- scans --------------------------------------------------------------------------------

    async def scan(self, request: ScanRequest) -> ScanResult:
        return await blocking(self._scan, request)

    def _search_params(self, k: int) -> dict[str, Any]:
        return search_params(self._index_type, k)

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
            consistency_level=self._consistency,
        )
        return answer_rows(answer)

    def count(self, expr: str | None) -> int:
        answer = self._call(
            self._client.query,
            self._collection,
            filter=expr or "",
            output_fields=["count(*)"],
            consistency_level=self._consistency,
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
        if request.k > MAX_TOPK:
            raise BackendUnavailable(f"milvus answers at most {MAX_TOPK} rows per search", where=request.rsc_id)
        # Residual filters are evaluated natively too: inside Milvus's search they lose nothing.
        filters: tuple[Filter, ...] = (*request.pushed, *request.residual)
        expr = filter_expr(filters, self._fields)
        before = self.generation()
        vector, embedded = self._queries.for_query(request.query, self._embedder_identity, where=request.rsc_id)
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
        hits = custody(request, rows, before, self.identity)
        gaps: tuple[Gap, ...] = ()
        if self._consistency != STRONG:
            detail = caveat_detail(self._consistency, self._collection)
            gaps = (self.gap(request, GapKind.WEAK_CONSISTENCY, detail, GapSeverity.CAVEAT),)
        return ScanResult(
            hits=hits,
            gaps=gaps,
            model_calls=int(embedded),
            generation=before,
            total_matches=matching,
            exhausted=len(hits) >= matching,
        )

    def _top_k(self, vector: npt.NDArray[np.float32], expr: str | None, k: int) -> list[tuple[dict[str, Any], float]]:
        return top_k(self.search, vector, expr, k)

    def forget_query_vectors(self) -> None:
        self._queries.clear()

    # -- calibration --------------------------------------------------------------------------

    def measure_recall(self, vectors: npt.NDArray[np.float32], chunks: Sequence[Chunk]) -> tuple[float, str]:
        """This collection's recall bound and its note (``backends.milvus.search.measure_recall``)."""
        return measure_recall(self.search, self._fields, vectors, chunks)
