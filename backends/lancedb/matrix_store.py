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
from typing import TYPE_CHECKING, Any, Final

import numpy.typing as npt
import orjson

from backends.base import Adapter, custody_hits
from backends.lancedb.exact import ExactMatrix
from backends.lancedb.matrix import META_FILE, SCHEMA_VERSION, U64_MAX, manifest_digest, write_matrix
from backends.lancedb.query import _CHUNK_COLUMNS
from rsc import BackendUnavailable, Filter, Gap, GapKind, Hit, ScanRequest, ScanResult, ScoreKind

if TYPE_CHECKING:  # the table is read to write a matrix; serving one needs no LanceDB
    from lancedb.table import Table

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

    def load(self, version: int) -> ExactMatrix | None:
        """Serve the matrix of table ``version`` as written beside the table, from RACE's own
        files alone (no table is opened); ``None`` if none was written for that snapshot or it
        cannot be read back (only the table can write one: ``build``)."""
        matrix = self.serving(version)
        if matrix is not None:
            return matrix
        with self._lock:
            manifest = self._digest(version)
            if manifest is None:
                return None
            folder = self._folder / self._name(version, manifest)
            if not (folder / META_FILE).exists():
                return None
            try:
                matrix = ExactMatrix(folder)
            except (OSError, ValueError, KeyError):
                return None
            if matrix.version != version or matrix.manifest != manifest:
                return None
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
        return ranked(matrix, query, filters, k, columns)


def ranked(
    matrix: ExactMatrix, query: npt.NDArray[Any], filters: Sequence[Filter], k: int, columns: Sequence[str]
) -> ExactAnswer:
    """The exact top-k of ``matrix`` under ``filters``, its rows' ``columns`` in rank order."""
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


# -- ranked rows as a scan's answer (the adapter's, and the handle's without the table) -------


def exact_result(
    owner: Adapter,
    request: ScanRequest,
    answer: ExactAnswer,
    *,
    generation: str,
    identity: str,
    truncated: dict[str, dict[str, int]],
    embedded: bool,
) -> ScanResult:
    """The scan result of an exact answer with no filter left to apply to its rows."""
    rows = sorted(answer.rows, key=lambda r: (float(r["_distance"]), str(r["chunk_id"])))
    hits = lance_hits(request, rows, generation=generation, identity=identity)
    gaps = truncation_gaps(owner, request, hits, truncated)
    matching = answer.total_matches
    return ScanResult(
        hits=hits,
        gaps=tuple(gaps),
        # A kept query vector costs no model call; the receipt counts the obligation's own.
        model_calls=int(embedded),
        generation=generation,
        total_matches=matching,
        exhausted=len(hits) >= matching and not gaps,
    )


def lance_hits(request: ScanRequest, rows: list[dict[str, Any]], *, generation: str, identity: str) -> tuple[Hit, ...]:
    """The hits of ranked chunk rows (each with its ``_distance``), custody rebuilt from their columns."""
    chunks = []
    for row in rows:
        chunk = {name: row[name] for name in _CHUNK_COLUMNS if name != "metadata_json"}
        chunk["metadata"] = orjson.loads(row["metadata_json"])
        chunks.append((chunk, float(row["_distance"])))
    corpus_revision = str(rows[0]["corpus_revision"]) if rows else ""
    return tuple(
        custody_hits(
            request=request,
            contract_ref=f"{request.rsc_id}@{request.rsc_version}",
            rows=chunks,
            score_kind=ScoreKind.COSINE_DISTANCE,
            index_identity=identity,
            generation=generation,
            corpus_revision=corpus_revision,
        )
    )


def truncation_gaps(
    owner: Adapter, request: ScanRequest, hits: Sequence[Hit], truncated: dict[str, dict[str, int]]
) -> list[Gap]:
    """A ``truncated_text`` gap for every document among the hits with text past the model's
    window: this search could not see into that text (docs/invariants.md#gap-kinds)."""
    gaps = []
    for doc in sorted({h.doc_id for h in hits} & set(truncated)):
        cut = truncated[doc]
        detail = ", ".join(f"{chunk}: {n} tokens" for chunk, n in sorted(cut.items()))
        gaps.append(
            owner.gap(
                request,
                GapKind.TRUNCATED_TEXT,
                f"document {doc}: {sum(cut.values())} tokens were never embedded ({detail}); "
                f"the vector index cannot find what they say",
            )
        )
    return gaps
