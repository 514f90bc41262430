"""The LanceDB adapter: cosine vector search over chunk embeddings in three physical modes.

``vector_flat`` is an exhaustive scan with the filter applied before the distance top-k
(exact). ``vector_ann_prefilter`` probes the IVF index with the filter applied before the
top-k, widening the probe until k filtered rows are found (approximate, recall measured by
``benchmarks/bench_filtered_vectors.py``). ``vector_ann_postfilter`` takes the ANN top-k and
filters afterwards, so it can return fewer than k rows; that shortfall is reported as a
``postfilter_only_filter`` gap, never as absence. The planner sends postfilter-only filters
as ``residual``: that mode hands them to LanceDB's postfilter; the prefilter modes, which
should never get any, apply them to their k rows and report a shortfall the same way.

Unindexed rows (appended after the ANN index was trained) are still searched: LanceDB
scans them flat and merges them in, unless a request opts into ``fast_search``, which
skips them and is then reported as an ``unindexed_rows_skipped`` gap. Every scan reads one
table snapshot, so its hits and its generation describe the same version.

The generation names that snapshot: the table version together with a digest of the version's
manifest file (which names the dataset's data files and indexes, so two tables built apart
never share one even at the same version and row counts), the indexed and unindexed row
counts and the embedder. A run pins it by checking that version out (``pinned``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Self

import lancedb
import numpy as np
import orjson
import pyarrow as pa

from backends.base import (
    Progress,
    blocking,
    load_contracts_beside,
)
from backends.generated import generate_contracts, read_contracts, schema_of, write_contracts
from backends.ingest.schema import FieldType
from backends.lancedb.build import build_table, with_embedder
from backends.lancedb.build import chunk_text as chunk_text  # backends/milvus imports it from here
from backends.lancedb.exact import EXACT_DIR, MODE_EXACT
from backends.lancedb.manifest import ann_facts, read_lance_manifest, write_facts
from backends.lancedb.matrix_store import MatrixStore, exact_result, lance_hits, truncation_gaps
from backends.lancedb.query import (
    _CHUNK_COLUMNS,
    MODE_ANN_POSTFILTER,
    MODE_FLAT,
    MODES,
    QUERY_VECTORS,
    TABLE,
    _fast,
    _random,
    _split_filters,
    filter_sql,
    vector_query,
)
from backends.lancedb.snapshot import LanceSnapshots, Snapshot, _GenerationMemo
from backends.models.embedding import Embedder, EmbedderIdentity, MiniLMEmbedder
from backends.models.folder import built_embedder
from backends.models.queries import BuiltWith, QueryVectors
from rsc import (
    BackendStatistics,
    BackendUnavailable,
    Calibration,
    Contract,
    Gap,
    GapKind,
    Hit,
    ScanRequest,
    ScanResult,
    fingerprint,
)

if TYPE_CHECKING:
    from backends.ingest.corpus import Corpus

_log = logging.getLogger(__name__)

_COUNTED_TYPES: Final = frozenset(
    {FieldType.KEYWORD, FieldType.KEYWORDS, FieldType.DATE, FieldType.INTEGER, FieldType.BOOLEAN}
)
"""Types whose value counts ``statistics()`` reports; ``doc_id`` is left out as unbounded."""


class LanceAdapter(LanceSnapshots):
    backend = "lancedb"

    def __init__(self, path: Path, manifest: dict[str, Any], embedder: Embedder) -> None:
        self._path = path
        self._manifest = manifest
        self._corpus_schema = schema_of(manifest)
        self._truncated: dict[str, dict[str, int]] = manifest.get("truncated") or {}
        self._embedder = embedder
        self._embedder_identity = EmbedderIdentity.model_validate(manifest["embedder"])
        self._embedder_fingerprint = fingerprint(self._embedder_identity)
        # No read-consistency interval: each scan opens its own handle (latest version at
        # open time) and then keeps reading that one version, so the hits and the
        # generation it reports cannot straddle a concurrent write.
        self._db = lancedb.connect(str(path))
        self._stats: tuple[str, BackendStatistics] | None = None
        self._nprobes = int(manifest["ann_index"]["nprobes"])
        self._versions_dir = path / f"{TABLE}.lance" / "_versions"
        self._generation_memo: _GenerationMemo | None = None
        self._generation_lock = threading.Lock()
        self._counts: dict[str, tuple[int, int, int]] = {}
        self._pin: Snapshot | None = None
        # The corpus revision race.json records, by the (inode, mtime, size) it was read at.
        self._revision: tuple[tuple[int, int, int], str] | None = None
        self._queries = QueryVectors(embedder, QUERY_VECTORS)
        self._exact = MatrixStore(path / EXACT_DIR, self._versions_dir)

    # -- contract, build, open --------------------------------------------------------------

    @classmethod
    def contracts(cls) -> tuple[Contract, ...]:
        return load_contracts_beside(__file__)

    @classmethod
    def build(
        cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None, *, embedder: Embedder | None = None
    ) -> str:
        embedder = embedder or MiniLMEmbedder()
        path = index_dir / cls.backend
        schema = build_table(corpus, path, progress, embedder)
        write_contracts(path, with_embedder(generate_contracts(cls.contracts(), schema), embedder.identity))
        adapter = cls.open(index_dir, embedder=embedder)
        adapter.statistics()  # kept with the row counts: an engine then plans without opening the table
        return adapter.generation()

    @classmethod
    def open(cls, index_dir: Path, *, embedder: Embedder | None = None) -> Self:
        started = time.perf_counter()
        path = index_dir / cls.backend
        manifest, _ = read_lance_manifest(path)
        built_with = EmbedderIdentity.model_validate(manifest["embedder"])
        # The model is loaded, and checked against the one the vectors were built with, at the first query.
        embedder = BuiltWith(
            embedder or built_embedder(manifest), built_with, where=str(path), hint="rebuild: `race index`"
        )
        adapter = cls(path, manifest, embedder)
        # The exact matrix of the latest version: loaded, or rebuilt if the table moved on.
        adapter._exact.build(adapter.snapshot().table)
        adapter.generated_contracts = read_contracts(path)
        adapter.corpus_schema = adapter._corpus_schema
        ms = (time.perf_counter() - started) * 1e3
        _log.debug("lancedb %s: table opened and its exact matrix mapped in %.1f ms", path, ms)
        return adapter

    @property
    def identity(self) -> str:
        pin = self._pin
        if pin is not None:
            return f"lancedb:{pin.corpus_revision}"
        known = self._revision
        return f"lancedb:{known[1] if known is not None else self._manifest['corpus_revision']}"

    @property
    def embedder_identity(self) -> EmbedderIdentity:
        return self._embedder_identity

    def models(self) -> tuple[dict[str, str | int], ...]:
        return (dict(self._embedder_identity.model_dump(mode="json")),)

    def statistics(self) -> BackendStatistics:
        snap = self.snapshot()
        if self._stats is not None and self._stats[0] == snap.manifest:
            return self._stats[1]
        counted = [name for name, spec in self._corpus_schema.filterable().items() if spec.type in _COUNTED_TYPES]
        data = snap.table.search().select(counted).limit(None).to_arrow() if counted else None
        counts: dict[str, dict[str, int]] = {}
        for name in counted:
            assert data is not None
            column = data.column(name).drop_null()
            if pa.types.is_list(column.type):
                column = pa.compute.list_flatten(column)
            if len(column) == 0:
                continue
            pairs = column.value_counts().to_pylist()
            counts[name] = {str(p["values"]): int(p["counts"]) for p in sorted(pairs, key=lambda p: str(p["values"]))}
        stats = BackendStatistics(
            backend=self.backend, rows=snap.rows, value_counts=counts, access=ann_facts(self._manifest)
        )
        self._stats = (snap.manifest, stats)
        if self._pin is None:
            # What ``LanceIndex`` answers planning with, for as long as this version is the latest.
            write_facts(
                self._path, snap.version, snap.manifest, (snap.rows, snap.indexed_rows, snap.unindexed_rows), stats
            )
        return stats

    def warm(self, modes: frozenset[str] | None = None) -> None:
        # The table is open and its exact matrix mapped (``open``); what is left is the model:
        # its weights loaded, hashed and checked against the ones the vectors were built with.
        try:
            self._embedder.identity  # noqa: B018 - the load is the point
        except Exception:
            return  # no model: every vector leg reports it as its gap

    # -- scans --------------------------------------------------------------------------------

    async def scan(self, request: ScanRequest) -> ScanResult:
        return await blocking(self._scan, request)

    def native_plan(self, request: ScanRequest) -> str:
        """LanceDB's own physical plan for a request (shows whether the ANN index is used)."""
        snap = self.snapshot()
        vector = np.zeros(self._embedder_identity.dims, dtype=np.float32)
        vector[0] = 1.0
        native, _ = _split_filters(request)
        builder = vector_query(
            snap.table,
            request.mode,
            vector,
            filter_sql(native, self._corpus_schema),
            request.k,
            nprobes=self._nprobes,
            fast_search=_fast(request),
        )
        return str(builder.explain_plan(verbose=True))

    def _scan(self, request: ScanRequest) -> ScanResult:
        if request.mode not in (*MODES, MODE_EXACT):
            raise BackendUnavailable(f"lancedb has no mode {request.mode!r}", where=request.rsc_id)
        native, after = _split_filters(request)
        where = filter_sql(native, self._corpus_schema)
        every = filter_sql((*request.pushed, *request.residual), self._corpus_schema)
        fast_search = _fast(request)
        snap = self.snapshot()
        generation = self._generation(snap)
        vector, embedded = self._queries.for_query(request.query, self._embedder_identity, where=request.rsc_id)
        # Random access scores named rows exactly: a flat scan restricted by the identity
        # filter computes each row's distance as the sorted access does.
        mode = MODE_FLAT if _random(request) or request.mode == MODE_EXACT else request.mode
        # The exact matrix of this snapshot (built first if the table moved on) answers sorted
        # and random access alike; LanceDB's flat scan answers only where none can be built.
        exact = (
            self._exact.answer(snap.table, snap.version, vector, native, request.k, _CHUNK_COLUMNS)
            if request.mode == MODE_EXACT
            else None
        )
        if exact is not None and not after:
            # The handle answers these from the matrix files alone, through the same function.
            return exact_result(
                self,
                request,
                exact,
                generation=generation,
                identity=self.identity,
                truncated=self._truncated,
                embedded=embedded,
            )
        try:
            if exact is not None:
                found = exact.rows
            else:
                query = vector_query(
                    snap.table,
                    mode,
                    vector,
                    where,
                    request.k,
                    nprobes=self._nprobes,
                    fast_search=fast_search,
                    columns=_CHUNK_COLUMNS,
                )
                found = query.to_arrow().to_pylist()
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendUnavailable(f"lancedb search failed: {exc}", where=request.rsc_id) from exc
        rows = sorted(found, key=lambda r: (float(r["_distance"]), str(r["chunk_id"])))
        if mode == MODE_ANN_POSTFILTER:
            late, candidates = native, min(request.k, snap.rows)
        else:
            late, candidates = after, len(rows)
            rows = [r for r in rows if all(f.matches(orjson.loads(r["metadata_json"])) for f in after)]
        hits = self._hits(request, rows, generation)
        matching = exact.total_matches if exact is not None and not after else None
        if matching is None and (late or len(hits) < request.k or mode == MODE_FLAT):
            # The exact scan reports the size of the fragment it searched; the ANN modes count
            # only for a short answer, to tell an exhausted set from a postfilter that lost rows.
            try:
                matching = snap.table.count_rows(every) if every is not None else snap.rows
            except (ValueError, RuntimeError, OSError) as exc:
                raise BackendUnavailable(f"lancedb count failed: {exc}", where=request.rsc_id) from exc
        gaps: list[Gap] = []
        if late and matching is not None and len(hits) < min(request.k, matching):
            gaps.append(
                self.gap(
                    request,
                    GapKind.POSTFILTER_ONLY_FILTER,
                    (
                        f"filter applied after the top-{request.k}: {len(hits)} of {candidates} candidates survived "
                        f"({'; '.join(f.describe() for f in late)}); {matching} rows in table version "
                        f"{snap.version} match the filters"
                    ),
                )
            )
        gaps += self._truncation_gaps(request, hits)
        if fast_search and mode != MODE_FLAT and snap.unindexed_rows > 0:
            gaps.append(
                self.gap(
                    request,
                    GapKind.UNINDEXED_ROWS_SKIPPED,
                    (
                        f"fast_search skipped {snap.unindexed_rows} of {snap.rows} rows that are not yet in the "
                        f"ANN index (table version {snap.version})"
                    ),
                )
            )
        return ScanResult(
            hits=hits,
            gaps=tuple(gaps),
            # A kept query vector costs no model call; the receipt counts the obligation's own.
            model_calls=int(embedded),
            generation=generation,
            total_matches=matching,
            exhausted=matching is not None and len(hits) >= matching and not gaps,
        )

    def calibrations(self) -> tuple[str, tuple[Calibration, ...]] | None:
        """The recall curves measured on this table (``race calibrate``) and their generation."""
        from backends.calibration import read_calibration

        return read_calibration(self._path)

    def _truncation_gaps(self, request: ScanRequest, hits: Sequence[Hit]) -> list[Gap]:
        return truncation_gaps(self, request, hits, self._truncated)

    def forget_query_vectors(self) -> None:
        """Drop the kept query vectors (benchmarks compare cold embedding against a peer)."""
        self._queries.clear()

    def _hits(self, request: ScanRequest, rows: list[dict[str, Any]], generation: str) -> tuple[Hit, ...]:
        return lance_hits(request, rows, generation=generation, identity=self.identity)
