"""The exact matrices of one LanceDB table (``exact.py``): which folder holds the matrix of a
table version, writing it when it is missing or damaged, and serving it for that version only.

A matrix names the table version it was built from and the digest of that version's manifest
file. It is served only for that snapshot: for any other (a later write, a rebuilt table that
reuses the version number, a run pinned to an older version) the matrix of that snapshot is
built first. A matrix folder that cannot be read back (a truncated or foreign file) is derived
data and is written again from the table. Only if writing fails (an unwritable index
directory, duplicate chunk ids) does the adapter scan with LanceDB's flat scan instead.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy.typing as npt
from lancedb.table import Table

from backends.lancedb.exact import ExactMatrix
from backends.lancedb.matrix import META_FILE, SCHEMA_VERSION, U64_MAX, manifest_digest, write_matrix
from rsc import BackendUnavailable, Filter

_WHERE: Final = "lancedb.exact"


class MatrixStore:
    """The exact matrices of one LanceDB table: one folder per (version, manifest digest), and
    the one this process serves."""

    def __init__(self, folder: Path, versions_dir: Path) -> None:
        self._folder = folder
        self._versions_dir = versions_dir
        self._current: ExactMatrix | None = None
        self._lock = threading.Lock()
        self._digests: dict[tuple[int, int, int, int], str] = {}
        self.unavailable = "not opened"
        """Why no matrix is served, for explanation; empty while one is."""

    def _name(self, version: int, manifest: str) -> str:
        # The layout's version is in the name: a matrix of another layout is rebuilt, not refused.
        return f"v{version}-{manifest[:16]}-x{SCHEMA_VERSION.rsplit('/', 1)[-1]}"

    def _digest(self, version: int) -> str | None:
        # A manifest file is written once; its digest is kept by (version, inode, mtime, size).
        for name in (f"{U64_MAX - version:020d}.manifest", f"{version}.manifest"):
            try:
                st = os.stat(self._versions_dir / name)
            except FileNotFoundError:
                continue
            stamp = (version, st.st_ino, st.st_mtime_ns, st.st_size)
            found = self._digests.get(stamp)
            if found is None:
                found = manifest_digest(self._versions_dir, version)
                if found is None:
                    return None
                self._digests[stamp] = found
            return found
        return None

    def build(self, table: Table) -> ExactMatrix | None:
        """Write (or find) and serve the matrix of ``table``'s checked-out version.

        A table that cannot have one (duplicate chunk ids, an unwritable index directory)
        leaves none served, and the reason in ``unavailable``.
        """
        with self._lock:
            version = int(table.version)
            manifest = self._digest(version)
            if manifest is None:
                self.unavailable = f"table version {version} has no manifest"
                return None
            folder = self._folder / self._name(version, manifest)
            current = self._current
            if current is not None and current.folder == folder:
                return current
            try:
                matrix = self._open_or_write(table, folder, manifest)
            except (OSError, ValueError, KeyError) as exc:
                self.unavailable = f"no matrix for table version {version}: {exc}"
                return None
            for old in self._folder.iterdir():
                if old.name != folder.name and not old.name.startswith("."):
                    shutil.rmtree(old, ignore_errors=True)
            self._current, self.unavailable = matrix, ""
            return matrix

    def _open_or_write(self, table: Table, folder: Path, manifest: str) -> ExactMatrix:
        if (folder / META_FILE).exists():
            try:
                return ExactMatrix(folder)
            except (OSError, ValueError, KeyError):
                # Damaged (a truncated or foreign file): it is derived data, written again from
                # the table, so that this snapshot is answered with its usual bytes.
                shutil.rmtree(folder, ignore_errors=True)
        self._folder.mkdir(parents=True, exist_ok=True)
        try:
            write_matrix(table, folder, manifest)
        except OSError:
            if not (folder / META_FILE).exists():  # not another writer's matrix either
                raise
        return ExactMatrix(folder)

    def serving(self, version: int) -> ExactMatrix | None:
        """The matrix of table ``version`` if it is the one kept, else ``None`` (never stale)."""
        matrix = self._current
        if matrix is None or matrix.version != version or self._digest(version) != matrix.manifest:
            return None
        return matrix

    def answer(
        self,
        table: Table,
        version: int,
        query: npt.NDArray[Any],
        filters: Sequence[Filter],
        k: int,
        columns: Sequence[str],
    ) -> ExactAnswer | None:
        """The exact top-k of ``table`` (checked out at ``version``) under ``filters``, its rows'
        ``columns`` in rank order; ``None`` if no matrix of that version can be had.

        A matrix of another version is never used: the one of ``version`` is built first (the
        first scan after a write pays for it), so that every engine answers one snapshot with
        the same bytes, whenever it opened the index."""
        matrix = self.serving(version)
        if matrix is None:
            matrix = self.build(table)
            if matrix is None or matrix.version != version:
                return None
        ranking = matrix.search(query, filters, k)
        try:
            rows = matrix.fetch(ranking, columns)
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendUnavailable(f"reading the ranked rows failed: {exc}", where=_WHERE) from exc
        return ExactAnswer(rows=rows, total_matches=ranking.total_matches)


@dataclass(frozen=True)
class ExactAnswer:
    rows: list[dict[str, Any]]
    """The ranked rows, each with its ``_distance``."""
    total_matches: int
    """Rows of the table version that pass the filters (rows without a direction included)."""
