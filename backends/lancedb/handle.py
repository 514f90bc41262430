"""An opened LanceDB index that answers planning from plain files, without LanceDB or pyarrow.

Planning a plan needs every backend's contracts, calibrations, statistics and generation; a
plan with no vector search needs nothing else from LanceDB. ``LanceIndex`` reads those from
the index directory: the generated contracts (``contracts/``), ``calibration.json``,
``race.json``, the table's version manifests (``_versions/``) and ``snapshot.json``, the row
counts and statistics ``LanceAdapter`` wrote for one table version, keyed by the digest of
that version's manifest. The real adapter is opened at the first thing only the table can
answer (a scan, a pin, LanceDB's own plan), or whenever those files do not describe the
latest version; from then on it answers everything.

The generation it reports is the adapter's, byte for byte: both are made by
``generation_of`` from the same version, manifest digest, row counts and embedder. The
version is the latest one exactly when its manifest is there with the recorded digest and
the next version's manifest is not (Lance numbers versions densely and writes each manifest
once; see ``LanceSnapshots.generation``).
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import orjson

from backends.base import Adapter, Progress, blocking, load_contracts_beside
from backends.generated import read_contracts, schema_of
from backends.lancedb.manifest import (
    FACTS,
    MANIFEST,
    TABLE,
    _stamp,
    ann_facts,
    generation_of,
    manifest_digest,
    next_manifest,
    read_lance_manifest,
)
from backends.lancedb.query import (
    _CHUNK_COLUMNS,
    EXACT_DIR,
    MODE_EXACT,
    QUERY_VECTORS,
    _fast,
    _split_filters,
    filter_sql,
)
from rsc import (
    BackendStatistics,
    Calibration,
    Contract,
    EmbedderIdentity,
    IndexMissingError,
    ScanRequest,
    ScanResult,
    fingerprint,
)

_log = logging.getLogger(__name__)

if TYPE_CHECKING:  # numpy and the model's runtime are imported by the first vector leg
    from backends.ingest.corpus import Corpus
    from backends.lancedb.adapter import LanceAdapter
    from backends.lancedb.exact import ExactMatrix
    from backends.lancedb.matrix_store import MatrixStore
    from backends.models.embedding import Embedder
    from backends.models.queries import BuiltWith, QueryVectors


class LanceIndex(Adapter):
    """A LanceDB index as planning sees it; the real ``LanceAdapter`` opens on first need."""

    backend: ClassVar[str] = "lancedb"

    def __init__(self, path: Path, manifest: dict[str, Any], stamp: tuple[int, int, int], embedder: Embedder | None):
        self._path = path
        self._manifest = manifest
        self._manifest_stamp = stamp
        self._embedder = embedder
        self._embedder_identity = EmbedderIdentity.model_validate(manifest["embedder"])
        self._embedder_fingerprint = fingerprint(self._embedder_identity)
        self._versions_dir = path / f"{TABLE}.lance" / "_versions"
        self._real: LanceAdapter | None = None
        self._lock = threading.Lock()
        # The facts read from snapshot.json, by the (inode, mtime, size) they were read at.
        self._facts: tuple[tuple[int, int, int], dict[str, Any]] | None = None
        # The _versions/ stamp and manifest digest last found to agree.
        self._checked: tuple[tuple[int, int, int], str] | None = None
        # The exact matrices and the query vectors, shared with the real adapter once it opens.
        self._store: MatrixStore | None = None
        self._built: BuiltWith | None = None
        self._queries: QueryVectors | None = None
        # Of a handle pinned to the latest snapshot (``pinned``): its generation, table version,
        # corpus revision and facts, its matrix (if one was written), the handle it was pinned
        # from, and the real adapter pinned likewise (opened for a leg the matrix cannot answer).
        self._held: tuple[str, int, str, dict[str, Any], ExactMatrix | None] | None = None
        self._origin: LanceIndex | None = None
        self._held_real: Adapter | None = None

    # -- contract, build, open ----------------------------------------------------------------

    @classmethod
    def contracts(cls) -> tuple[Contract, ...]:
        return load_contracts_beside(str(Path(__file__).with_name("__init__.py")))

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None) -> str:
        from backends.lancedb.adapter import LanceAdapter

        return LanceAdapter.build(corpus, index_dir, progress)

    @classmethod
    def open(cls, index_dir: Path, *, embedder: Embedder | None = None) -> Self:
        started = time.perf_counter()
        path = index_dir / cls.backend
        manifest, stamp = read_lance_manifest(path)
        handle = cls(path, manifest, stamp, embedder)
        handle.generated_contracts = read_contracts(path)
        handle.corpus_schema = schema_of(manifest)
        ms = (time.perf_counter() - started) * 1e3
        _log.debug("lancedb %s: manifest read in %.1f ms (the table opens at its first use)", path, ms)
        return handle

    def adapter(self) -> LanceAdapter:
        """The real adapter over the table, opened once (with the exact matrix of its latest
        version); it embeds queries through this handle's model and kept query vectors."""
        if self._origin is not None:
            return self._origin.adapter()
        real = self._real
        if real is None:
            queries = self._vectors()
            with self._lock:
                real = self._real
                if real is None:
                    from backends.lancedb.adapter import LanceAdapter

                    real = LanceAdapter.open(self._path.parent, embedder=self._embedder)
                    real._queries = queries
                    if self.generated_contracts is not None:
                        real.generated_contracts = self.generated_contracts
                    self._real = real
        return real

    def _vectors(self) -> QueryVectors:
        """The query vectors, embedded by the model the index was built with (checked at the first
        use); a pinned handle's are those of the handle it was pinned from, kept across runs."""
        if self._origin is not None:
            return self._origin._vectors()
        queries = self._queries
        if queries is None:
            with self._lock:
                queries = self._queries
                if queries is None:
                    from backends.models.folder import built_embedder
                    from backends.models.queries import BuiltWith, QueryVectors

                    # One model object for this handle and the adapter it may open: loaded once.
                    self._embedder = self._embedder or built_embedder(self._manifest)
                    where = str(self._path)
                    self._built = BuiltWith(
                        self._embedder, self._embedder_identity, where=where, hint="rebuild: `race index`"
                    )
                    queries = self._queries = QueryVectors(self._built, QUERY_VECTORS)
        return queries

    def _matrix(self, version: int) -> ExactMatrix | None:
        """The exact matrix of table ``version`` from its files, if it was written; never the table."""
        if self._origin is not None:
            return self._origin._matrix(version)
        store = self._store
        if store is None:
            from backends.lancedb.matrix_store import MatrixStore

            with self._lock:
                store = self._store
                if store is None:
                    store = self._store = MatrixStore(self._path / EXACT_DIR, self._versions_dir)
        return store.load(version)

    # -- what planning reads ------------------------------------------------------------------

    @property
    def embedder_identity(self) -> EmbedderIdentity:
        return self._embedder_identity

    def models(self) -> tuple[dict[str, str | int], ...]:
        return (dict(self._embedder_identity.model_dump(mode="json")),)

    def calibrations(self) -> tuple[str, tuple[Calibration, ...]] | None:
        from backends.calibration import read_calibration

        return read_calibration(self._path)

    @property
    def reads_generation_inline(self) -> bool:
        return True  # stats of the manifest, the facts file and _versions/

    def generation(self) -> str:
        if self._held is not None:
            return self._held[0]
        facts = self._latest_facts()
        if facts is None:
            return self.adapter().generation()
        return self._generation_of(facts)

    def _generation_of(self, facts: dict[str, Any]) -> str:
        return generation_of(
            int(facts["version"]),
            str(facts["manifest"]),
            int(facts["indexed_rows"]),
            int(facts["unindexed_rows"]),
            self._embedder_fingerprint,
        )

    def statistics(self) -> BackendStatistics:
        facts = self._held[3] if self._held is not None else self._latest_facts()
        if facts is not None:
            try:
                stats = BackendStatistics.model_validate(facts["statistics"])
                # Facts kept before the statistics carried the IVF facts: they are the manifest's.
                return stats if stats.access else stats.model_copy(update={"access": ann_facts(self._manifest)})
            except ValueError:  # pydantic's ValidationError among them: the table answers
                pass
        return self._table().statistics()

    def _latest_facts(self) -> dict[str, Any] | None:
        """The kept facts if they describe the latest table version of the table this handle
        opened; ``None`` once the real adapter is open, or if anything else is so."""
        if self._real is not None or (self._origin is not None and self._origin._real is not None):
            return None
        try:
            # race.json rewritten (a rebuild, another embedder): the adapter reads it afresh.
            if _stamp(self._path / MANIFEST) != self._manifest_stamp:
                return None
            facts = self._read_facts()
            if facts is None:
                return None
            version, versions_dir = int(facts["version"]), str(self._versions_dir)
            following = next_manifest(versions_dir, version)
            if following is None or os.access(following, os.F_OK):
                return None
            # Any entry added, removed or renamed in _versions/ moves its stamp: hashed again.
            seen = (_stamp(self._versions_dir), str(facts["manifest"]))
            if self._checked != seen:
                if manifest_digest(versions_dir, version) != facts["manifest"]:
                    return None
                self._checked = seen
        except (OSError, ValueError, KeyError, TypeError, IndexMissingError):
            return None
        return facts

    def _read_facts(self) -> dict[str, Any] | None:
        path = self._path / FACTS
        try:
            stamp = _stamp(path)
        except FileNotFoundError:
            return None
        known = self._facts
        if known is not None and known[0] == stamp:
            return known[1]
        facts = orjson.loads(path.read_bytes())
        if not isinstance(facts, dict):
            return None
        self._facts = (stamp, facts)
        return facts

    # -- scans: the exact matrix from its files, the rest from the table ------------------------

    def warm(self, modes: frozenset[str] | None = None) -> None:
        started = time.perf_counter()
        self._warm(modes)
        ms = (time.perf_counter() - started) * 1e3
        _log.debug("lancedb %s: set-up for %s in %.1f ms", self._path, sorted(modes) if modes else "every mode", ms)

    def _warm(self, modes: frozenset[str] | None) -> None:
        if modes is not None and modes <= {MODE_EXACT} and self._real is None:
            # Exact scans only: the matrix of the latest version and the model, without the table.
            facts = self._latest_facts()
            if facts is not None and self._matrix(int(facts["version"])) is not None:
                self._vectors()
                try:
                    assert self._built is not None
                    self._built.identity  # noqa: B018 - the load is the point
                except Exception:
                    return  # no model: every vector leg reports it as its gap
                return
        self.adapter().warm(modes)

    async def _opened(self) -> Adapter:
        # Opening imports LanceDB and maps the exact matrix: seconds of CPU, never on the loop.
        if self._held is not None:
            held = self._held_real
            return held if held is not None else await blocking(self._table)
        real = self._real
        return real if real is not None else await blocking(self.adapter)

    def _table(self) -> Adapter:
        """The real adapter, pinned to this handle's snapshot if it holds one."""
        if self._held is None:
            return self.adapter()
        held = self._held_real
        if held is None:
            held = self._held_real = self.adapter().pinned(self._held[0])
        return held

    async def scan(self, request: ScanRequest) -> ScanResult:
        if request.mode == MODE_EXACT and self._real is None:
            found = await blocking(self._scan_exact, request)
            if found is not None:
                return found
        return await (await self._opened()).scan(request)

    def _scan_exact(self, request: ScanRequest) -> ScanResult | None:
        """An exact scan answered from the matrix files of the snapshot (the one held, else the
        latest), as ``LanceAdapter`` answers it; ``None`` where only the table can answer: a
        filter left to apply to the ranked rows (the count of rows it keeps reads the table), no
        matrix written for that snapshot, or facts that do not describe the latest version."""
        from backends.lancedb.matrix_store import exact_result, ranked

        native, after = _split_filters(request)
        if after:
            return None
        # Refused here as the adapter refuses them: a filter LanceDB could not be given.
        filter_sql(native, self.corpus_schema)
        filter_sql((*request.pushed, *request.residual), self.corpus_schema)
        _fast(request)
        if self._held is not None:
            generation, _, revision, _, matrix = self._held
        else:
            facts = self._latest_facts()
            if facts is None:
                return None
            generation, revision = self._generation_of(facts), str(self._manifest["corpus_revision"])
            matrix = self._matrix(int(facts["version"]))
        if matrix is None:
            return None
        vector, embedded = self._vectors().for_query(request.query, self._embedder_identity, where=request.rsc_id)
        answer = ranked(matrix, vector, native, request.k, _CHUNK_COLUMNS)
        return exact_result(
            self,
            request,
            answer,
            generation=generation,
            identity=f"lancedb:{revision}",
            truncated=self._manifest.get("truncated") or {},
            embedded=embedded,
        )

    def pinned(self, generation: str) -> Adapter:
        """Held at ``generation``: without the table when that is the latest snapshot the facts
        describe (an exact scan reads that snapshot's matrix, held from now on; any other leg
        pins the real adapter to it), else the real adapter pinned as ever."""
        if self._held is not None:
            return self if generation == self._held[0] else (self._origin or self).pinned(generation)
        if self._real is None:
            facts = self._latest_facts()
            if facts is not None and self._generation_of(facts) == generation:
                version = int(facts["version"])
                held = copy.copy(self)
                held._origin = self
                held._held = (generation, version, str(self._manifest["corpus_revision"]), facts, self._matrix(version))
                held._held_real = None
                return held
        return self.adapter().pinned(generation)

    async def pin(self, generation: str) -> Adapter:
        # Mapping a matrix that warm did not map, or checking the table out: off the loop.
        return await blocking(self.pinned, generation)

    def forget_query_vectors(self) -> None:
        """Drop the kept query vectors (the real adapter's are these), without opening the table."""
        self._vectors().clear()

    @property
    def identity(self) -> str:
        if self._held is not None:
            return f"lancedb:{self._held[2]}"
        if self._real is None and self._latest_facts() is not None:
            return f"lancedb:{self._manifest['corpus_revision']}"
        return self.adapter().identity

    def __getattr__(self, name: str) -> Any:
        # Anything else the adapter offers (its snapshot, LanceDB's plan, the kept query
        # vectors, the exact matrix) is the real adapter's (pinned like this handle).
        if name.startswith("__") or name in ("_real", "_lock", "_path", "_embedder", "generated_contracts", "_held"):
            raise AttributeError(name)
        return getattr(self._table(), name)
