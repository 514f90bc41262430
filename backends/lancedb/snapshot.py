"""Table snapshots: one table version with its manifest digest and row counts, and the
manifest files that tell whether a version read earlier is still the latest."""

from __future__ import annotations

import copy
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import lancedb
from lancedb.table import Table

from backends.base import UNKNOWN_GENERATION, Adapter, RefusedSnapshot, blocking
from backends.lancedb.manifest import generation_of, manifest_digest
from backends.lancedb.manifest import next_manifest as _next_manifest  # tests read it from here
from backends.lancedb.query import MANIFEST, TABLE, VECTOR_INDEX
from backends.models.embedding import EmbedderIdentity
from rsc import BackendUnavailable, IndexMissingError


@dataclass(frozen=True)
class Snapshot:
    """One table version as a scan sees it, with what makes up its generation."""

    table: Table
    version: int
    rows: int
    indexed_rows: int
    unindexed_rows: int
    manifest: str = ""
    """Digest of this version's manifest file: which dataset, at which version."""
    corpus_revision: str = ""
    """The corpus revision ``race.json`` records for the table this version belongs to."""


@dataclass(frozen=True)
class _GenerationMemo:
    """The generation read for one table version, and what shows that version is still the latest."""

    generation: str
    versions_dir: tuple[int, int, int]
    """(inode, mtime, ctime) of ``_versions/``, taken before the version was read."""
    next_manifest: str | None
    """The path the manifest of the next version will have; ``None`` if its name is unknown."""


_VERSION_OF: Final = re.compile(r"^lancedb:v(\d+):")
_SNAPSHOT_TRIES: Final = 5
"""Reads of a snapshot retried while the table directory keeps being replaced under them."""


class LanceSnapshots(Adapter):
    """The snapshots, generations and pinning of ``LanceAdapter``, which sets these attributes."""

    _path: Path
    _db: lancedb.DBConnection
    _versions_dir: Path
    _embedder_identity: EmbedderIdentity
    _embedder_fingerprint: str
    _generation_memo: _GenerationMemo | None
    _generation_lock: threading.Lock
    _counts: dict[str, tuple[int, int, int]]
    _pin: Snapshot | None
    _revision: tuple[tuple[int, int, int], str] | None

    def snapshot(self) -> Snapshot:
        """The pinned version, or else the latest one, held for as long as the handle is used."""
        pin = self._pin
        return pin if pin is not None else self._open_snapshot(None)

    def _open_snapshot(self, version: int | None) -> Snapshot:
        """Table ``version`` (the latest when ``None``) checked out, with its manifest digest.

        ``_versions/`` keeps its inode unless the table directory itself is replaced (a rebuild),
        so the same inode before and after says the handle, the digest and ``race.json`` all
        belong to one table.
        """
        versions_dir = str(self._versions_dir)
        for _ in range(_SNAPSHOT_TRIES):
            before = self._versions_inode()
            revision = self._corpus_revision()
            try:
                table = self._db.open_table(TABLE)
                if version is not None:
                    table.checkout(version)
            except (ValueError, FileNotFoundError) as exc:
                raise IndexMissingError(f"the LanceDB table is gone: {exc}", where=str(self._path)) from exc
            current = table.version
            digest = manifest_digest(versions_dir, current)
            if self._versions_inode() == before:
                break
        else:
            raise BackendUnavailable("the LanceDB table kept being replaced while it was read", where=str(self._path))
        # A manifest never changes once written, so the counts of a version are read once.
        counts = self._counts.get(digest)
        if counts is None:
            rows = table.count_rows()
            stats = table.index_stats(VECTOR_INDEX)
            indexed = stats.num_indexed_rows if stats is not None else 0
            unindexed = stats.num_unindexed_rows if stats is not None else rows
            counts = self._counts[digest] = (rows, indexed, unindexed)
        rows, indexed, unindexed = counts
        return Snapshot(
            table=table,
            version=current,
            rows=rows,
            indexed_rows=indexed,
            unindexed_rows=unindexed,
            manifest=digest,
            corpus_revision=revision,
        )

    def _versions_inode(self) -> int:
        try:
            return os.stat(self._versions_dir).st_ino
        except FileNotFoundError as exc:
            raise IndexMissingError("the LanceDB table is gone", where=str(self._path)) from exc

    def _corpus_revision(self) -> str:
        """The corpus revision in ``race.json``, read again whenever the file was rewritten."""
        path = self._path / MANIFEST
        try:
            st = os.stat(path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            known = self._revision
            if known is not None and known[0] == stamp:
                return known[1]
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise IndexMissingError(f"unreadable {MANIFEST}: {exc}", where=str(self._path)) from exc
        if EmbedderIdentity.model_validate(manifest["embedder"]) != self._embedder_identity:
            raise IndexMissingError(
                "the table was rebuilt with another embedder; reopen the index", where=str(self._path)
            )
        revision = str(manifest["corpus_revision"])
        self._revision = (stamp, revision)
        return revision

    def _generation(self, snap: Snapshot) -> str:
        return generation_of(
            snap.version, snap.manifest, snap.indexed_rows, snap.unindexed_rows, self._embedder_fingerprint
        )

    def pinned(self, generation: str) -> Adapter:
        """The table checked out at the version ``generation`` names, if that version is still
        the snapshot ``generation`` names (a rebuilt table reuses version numbers)."""
        match = _VERSION_OF.match(generation)
        if match is None:
            return RefusedSnapshot(
                self, planned=generation, current=self._latest_or_unknown(), reason="names no table version"
            )
        try:
            snap = self._open_snapshot(int(match[1]))
        except (IndexMissingError, BackendUnavailable, ValueError, RuntimeError, OSError) as exc:
            reason = f"cannot be checked out ({type(exc).__name__}: {exc})"
            return RefusedSnapshot(self, planned=generation, current=self._latest_or_unknown(), reason=reason)
        found = self._generation(snap)
        if found != generation:
            reason = f"is gone: table version {snap.version} is now {found}"
            return RefusedSnapshot(self, planned=generation, current=self._latest_or_unknown(), reason=reason)
        held = copy.copy(self)
        held._pin = snap
        return held

    async def pin(self, generation: str) -> Adapter:
        # Opening and checking out a table is real I/O: off the event loop.
        return await blocking(self.pinned, generation)

    def _latest_or_unknown(self) -> str:
        try:
            return self.generation()
        except Exception:
            return UNKNOWN_GENERATION

    @property
    def reads_generation_inline(self) -> bool:
        return True  # two system calls on the table's own directory

    def generation(self) -> str:
        """Table version, rows inside/outside the ANN index, and the embedder's fingerprint.

        The generation read for version ``v`` still holds while both of these do:

        * no manifest of version ``v + 1`` exists. Every commit (rows, an index, a delete, an
          overwrite, a restore) creates exactly that file, put-if-not-exists, before the new
          version is visible: Lance numbers versions densely, each one the latest plus one.
        * ``_versions/`` has the (inode, mtime, ctime) it had before ``v`` was read. What
          changes the latest version without a commit (dropping and re-creating the table,
          removing versions) adds, removes or renames entries there, and so moves those.

        Commits are caught by the first check alone, which does not rely on timestamps. Two
        system calls, however many versions the table keeps; anything else reads afresh. A
        pinned adapter answers its pinned generation.
        """
        pin = self._pin
        if pin is not None:
            return self._generation(pin)
        versions_dir = str(self._versions_dir)
        try:
            st = os.stat(versions_dir)
        except FileNotFoundError as exc:
            raise IndexMissingError("the LanceDB table is gone", where=str(self._path)) from exc
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        # The memo is one immutable object, replaced whole, so reading it needs no lock.
        memo = self._generation_memo
        if (
            memo is not None
            and memo.versions_dir == stamp
            and memo.next_manifest is not None
            and not os.access(memo.next_manifest, os.F_OK)
        ):
            return memo.generation
        with self._generation_lock:
            snap = self.snapshot()
            generation = self._generation(snap)
            self._generation_memo = _GenerationMemo(generation, stamp, _next_manifest(versions_dir, snap.version))
            return generation
