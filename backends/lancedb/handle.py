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

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import orjson

from backends.base import Adapter, Progress, blocking, load_contracts_beside
from backends.generated import read_contracts, schema_of
from backends.ingest.corpus import Corpus
from backends.lancedb.manifest import (
    FACTS,
    MANIFEST,
    TABLE,
    _stamp,
    generation_of,
    manifest_digest,
    next_manifest,
    read_lance_manifest,
)
from backends.models.embedding import Embedder, EmbedderIdentity
from rsc import (
    BackendStatistics,
    Calibration,
    Contract,
    IndexMissingError,
    ScanRequest,
    ScanResult,
    fingerprint,
)

if TYPE_CHECKING:
    from backends.lancedb.adapter import LanceAdapter

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
        path = index_dir / cls.backend
        manifest, stamp = read_lance_manifest(path)
        handle = cls(path, manifest, stamp, embedder)
        handle.generated_contracts = read_contracts(path)
        handle.corpus_schema = schema_of(manifest)
        return handle

    def adapter(self) -> LanceAdapter:
        """The real adapter over the table, opened once (with the exact matrix of its latest version)."""
        real = self._real
        if real is None:
            with self._lock:
                real = self._real
                if real is None:
                    from backends.lancedb.adapter import LanceAdapter

                    real = LanceAdapter.open(self._path.parent, embedder=self._embedder)
                    if self.generated_contracts is not None:
                        real.generated_contracts = self.generated_contracts
                    self._real = real
        return real

    # -- what planning reads ------------------------------------------------------------------

    @property
    def identity(self) -> str:
        if self._real is None and self._latest_facts() is not None:
            return f"lancedb:{self._manifest['corpus_revision']}"
        return self.adapter().identity

    @property
    def embedder_identity(self) -> EmbedderIdentity:
        return self._embedder_identity

    def models(self) -> tuple[dict[str, str | int], ...]:
        return (dict(self._embedder_identity.model_dump(mode="json")),)

    def calibrations(self) -> tuple[str, tuple[Calibration, ...]] | None:
        from backends.calibration import read_calibration

        return read_calibration(self._path)

    def generation(self) -> str:
        facts = self._latest_facts()
        if facts is None:
            return self.adapter().generation()
        return generation_of(
            int(facts["version"]),
            str(facts["manifest"]),
            int(facts["indexed_rows"]),
            int(facts["unindexed_rows"]),
            self._embedder_fingerprint,
        )

    def statistics(self) -> BackendStatistics:
        facts = self._latest_facts()
        if facts is not None:
            try:
                return BackendStatistics.model_validate(facts["statistics"])
            except ValueError:  # pydantic's ValidationError among them: the table answers
                pass
        return self.adapter().statistics()

    def _latest_facts(self) -> dict[str, Any] | None:
        """The kept facts if they describe the latest table version of the table this handle
        opened; ``None`` once the real adapter is open, or if anything else is so."""
        if self._real is not None:
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

    # -- what only the table answers ----------------------------------------------------------

    def warm(self, modes: frozenset[str] | None = None) -> None:
        self.adapter().warm(modes)

    async def _opened(self) -> LanceAdapter:
        # Opening imports LanceDB and maps the exact matrix: seconds of CPU, never on the loop.
        real = self._real
        return real if real is not None else await blocking(self.adapter)

    async def scan(self, request: ScanRequest) -> ScanResult:
        return await (await self._opened()).scan(request)

    def pinned(self, generation: str) -> Adapter:
        return self.adapter().pinned(generation)

    async def pin(self, generation: str) -> Adapter:
        return await (await self._opened()).pin(generation)

    def __getattr__(self, name: str) -> Any:
        # Anything else the adapter offers (its snapshot, LanceDB's plan, the kept query
        # vectors, the exact matrix) is the real adapter's.
        if name.startswith("__") or name in ("_real", "_lock", "_path", "_embedder", "generated_contracts"):
            raise AttributeError(name)
        return getattr(self.adapter(), name)
