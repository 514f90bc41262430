"""The exact vector path: a float32 matrix kept beside the LanceDB table, scored at the BLAS limit.

A matrix holds every row of one table version: the vectors in ``chunk_id`` order (which is
the order of the evidence keys ``chunk:<chunk_id>``), each row's float64 norm, the row's
other columns (an Arrow file, for the custody of the hits), and the fields a filter may name
dictionary-encoded (one code per row and field, the distinct values in ``exact.json``). It is
written at index time under ``exact/`` beside the table (``matrix.py``) and memory-mapped at
open.

Beside the matrix are copies of it sorted by each field a filter may name whose values are not
already runs of rows (``matrix.py``), so that a filter on one field reads runs of rows in
place (``selection.py``), like the numpy floor over pre-sliced rows.

A search resolves the hard filters to row positions from the codes (``masks.py``), with the semantics of
``Filter.matches`` (a value matches an operand of its own type class only: booleans, numbers,
strings; a range needs both bounds' class), scores the selected rows with one float32
matrix-vector product, and settles the cut exactly: every row whose float32 score is within
the float32 error bound of the k-th is scored again in float64 from its float32 vector (the
products are exact there, the sum is per row and does not depend on the other rows asked
for), and the top-k is taken by that distance, rounded once to float32, ties broken by
``chunk_id``. The cosine distance is ``1 - x.q / (|x| |q|)``, what LanceDB's flat scan
computes in float32, here to float32 rounding. A row without a direction (zero, null or
non-finite vector) has no cosine distance: like LanceDB's flat scan, the search never ranks
it, though it counts among the rows that match the filter; a query without one is refused.

A matrix names the table version it was built from and the digest of that version's
manifest file, and is served for that snapshot only (``matrix_store.py``).
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from backends.lancedb.masks import F32 as F32
from backends.lancedb.masks import F64 as F64
from backends.lancedb.masks import I64 as I64
from backends.lancedb.masks import Column as Column
from backends.lancedb.masks import TypedKey as TypedKey
from backends.lancedb.masks import filter_key
from backends.lancedb.masks import typed_key as typed_key
from backends.lancedb.matrix import (
    BLOCK_ROWS,
    CODES_FILE,
    MATRIX_FILE,
    META_FILE,
    NORMS_FILE,
    ROWS_FILE,
    sorted_file,
)
from backends.lancedb.matrix import SCHEMA_VERSION as SCHEMA_VERSION
from backends.lancedb.matrix import cluster_field as cluster_field
from backends.lancedb.matrix import manifest_digest as manifest_digest
from backends.lancedb.matrix import row_norms as row_norms
from backends.lancedb.matrix import write_matrix as write_matrix
from backends.lancedb.query import EXACT_DIR as EXACT_DIR
from backends.lancedb.query import MODE_EXACT as MODE_EXACT
from backends.lancedb.scoring import Space, scores_of
from backends.lancedb.selection import Selection, choose
from rsc import BackendUnavailable, Filter

_WHERE: Final = "lancedb.exact"

_MODERATE: Final = 2.0**16
"""A query of norm within this factor of 1 is scored without normalising it, unless its products
with the longest row could come near float32's range (about 2**128) or those with the shortest
near its subnormals (below 2**-126), where the float32 error bound no longer holds."""
DIRECT_ROWS: Final = 32
"""Up to this many selected rows, every one is scored in float64 at once (no float32 pass)."""
_SELECTIONS: Final = 64
"""Resolved filter combinations kept per matrix (row positions; at most 8 bytes a row each)."""


def margin(dims: int) -> float:
    """How far below the k-th float32 score a row can still belong to the exact top-k.

    A float32 dot product of ``dims`` terms errs by at most ``dims * 2**-24 * |x| |q|``
    (recursive summation; blocked and FMA kernels do better), the normalisation by a few
    more units; the k-th score itself is off by as much, and rounding the distance to float32
    moves it by one unit in the last place (2**-23 for distances in [1, 2)).
    """
    return 2.0 * (dims + 8) * 2.0**-24 + 2.0**-22


_SLICED_ROWS: Final = 64
"""Ranked rows up to which ``fetch`` reads one-row slices rather than a ``take``."""


@dataclass(frozen=True)
class Ranking:
    """An exact top-k: matrix row positions in rank order, their float32 cosine distances, and
    the number of rows that match the filters."""

    positions: I64
    distances: F32
    total_matches: int


class ExactMatrix:
    """One table version's vectors, norms, row ids and filter codes, read-only."""

    def __init__(self, folder: Path) -> None:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{folder / META_FILE}: schema_version is not {SCHEMA_VERSION}")
        self.folder = folder
        self.version = int(meta["table_version"])
        self.manifest = str(meta["manifest"])
        self.rows = int(meta["rows"])
        self.dims = int(meta["dims"])
        self.matrix: F32 = np.asarray(np.load(folder / MATRIX_FILE, mmap_mode="r"))
        self.norms: F64 = np.load(folder / NORMS_FILE)
        self.table = pa.ipc.open_file(pa.memory_map(str(folder / ROWS_FILE))).read_all()
        codes = np.load(folder / CODES_FILE)
        fields: list[str] = list(meta["fields"])
        if (
            self.matrix.shape != (self.rows, self.dims)
            or self.matrix.dtype != np.float32
            or self.norms.shape != (self.rows,)
            or self.table.num_rows != self.rows
            or codes.shape != (len(fields), self.rows)
        ):
            raise ValueError(f"{folder}: the matrix files do not agree with {META_FILE}")
        if "chunk_id" not in fields:
            raise ValueError(f"{folder}: a matrix needs the chunk_id field")
        self.columns = {name: Column.of(name, meta["values"][name], codes[i]) for i, name in enumerate(fields)}
        self.cluster: str | None = meta.get("cluster")
        self._spaces: dict[str, Space] = {}
        # chunk_id values are unique, so a row's chunk_id code is its rank in key order.
        self._rank = self.columns["chunk_id"].codes
        directed = np.isfinite(self.norms) & (self.norms > 0)
        self.undirected = int(self.rows - directed.sum())
        lengths = self.norms[directed]
        self._longest = float(lengths.max()) if len(lengths) else 0.0
        self._shortest = float(lengths.min()) if len(lengths) else 0.0
        self._directed = directed
        with np.errstate(divide="ignore"):
            self._inverse: F32 = np.where(directed, 1.0 / self.norms, 0.0).astype(np.float32)
        self._margin = np.float32(margin(self.dims))
        self._base = Space(self.matrix, self.norms, self._inverse, None, directed, self._rank)
        for name in meta.get("sorted", []):
            order = self.columns[name].order
            copy: F32 = np.asarray(np.load(folder / sorted_file(fields.index(name)), mmap_mode="r"))
            if copy.shape != self.matrix.shape or copy.dtype != np.float32:
                raise ValueError(f"{folder}: the copy sorted by {name!r} does not agree with {META_FILE}")
            self._spaces[name] = Space(
                copy, self.norms[order], self._inverse[order], order, directed[order], self._rank[order]
            )
        self._copies = frozenset(self._spaces)
        self.copies: tuple[str, ...] = tuple(sorted(self._spaces))
        """The fields with a copy of the matrix sorted by their values."""
        self._scratch = threading.local()
        self._selections: OrderedDict[tuple[Hashable, ...], Selection] = OrderedDict()
        self._selections_lock = threading.Lock()

    # -- filters ----------------------------------------------------------------------------

    def select(self, filters: Sequence[Filter]) -> tuple[I64 | None, int]:
        """(ascending matrix positions of the rows passing every filter, or ``None`` for all;
        their count)."""
        found = self.selection(filters)
        listed = found.listed()
        if listed is None or found.space is None:
            return listed, found.matching
        return np.sort(self._spaces[found.space].to_base[listed]), found.matching  # type: ignore[index]

    def selection(self, filters: Sequence[Filter]) -> Selection:
        """The rows passing every filter, as runs or positions of the matrix or of a sorted copy.

        The answer depends on the filters and this (immutable) matrix only, so the last few
        resolved are kept: a filter that many queries share is resolved once."""
        if not filters:
            return Selection(None, None, None, self.rows)
        key = tuple(filter_key(flt) for flt in filters)
        # A read without the lock (one dict lookup is atomic); the oldest kept is dropped first.
        found = self._selections.get(key)
        if found is not None:
            return found
        found = choose(self.columns, filters, self._copies, self.rows)
        for array in (found.runs, found.positions):
            if array is not None:
                array.setflags(write=False)
        with self._selections_lock:
            self._selections[key] = found
            while len(self._selections) > _SELECTIONS:
                self._selections.popitem(last=False)
        return found

    # -- scoring ----------------------------------------------------------------------------

    def search(self, query: npt.NDArray[Any], filters: Sequence[Filter], k: int) -> Ranking:
        q32 = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if q32.shape != (self.dims,):
            raise BackendUnavailable(f"a {q32.shape[0]}-d query against {self.dims}-d vectors", where=_WHERE)
        q64 = q32.astype(np.float64)
        q_norm = math.sqrt(float(q64 @ q64))
        if not (math.isfinite(q_norm) and q_norm > 0.0):
            raise BackendUnavailable("the query vector has no direction: cosine distance is undefined", where=_WHERE)
        found = self.selection(filters)
        space = self._spaces[found.space] if found.space is not None else self._base
        if found.matching <= DIRECT_ROWS:
            return self._direct(space, found, q64, q_norm, k)
        # Scores are only compared with one another, so the query need not be a unit vector:
        # one of moderate norm is scored as it is (its float32 error bound scales with its norm).
        cut = self._margin
        if (
            1.0 / _MODERATE <= q_norm <= _MODERATE
            and 2.0**-60 <= q_norm * self._shortest <= q_norm * self._longest <= 2.0**100
        ):
            cut = cut * np.float32(q_norm)
        else:
            q32 = q32 / np.float32(q_norm)
        scores, locate = scores_of(space, found, q32, self._buffer)
        count = len(scores)
        if self.undirected and count:
            # Rows without a direction score 0 (zeroed); they are never ranked.
            listed = found.listed()
            undirected = ~(space.directed if listed is None else space.directed[listed])
            scores[undirected] = -np.inf
            count -= int(undirected.sum())
        if count == 0 or k < 1:
            return Ranking(np.empty(0, np.int64), np.empty(0, np.float32), found.matching)
        if k < count:
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            near = (scores >= kth - cut).nonzero()[0]
        elif count < len(scores):
            near = np.isfinite(scores).nonzero()[0]
        else:
            near = np.arange(count)
        return self._settled(space, locate(near), q64, q_norm, k, found.matching)

    def _direct(self, space: Space, found: Selection, q64: F64, q_norm: float, k: int) -> Ranking:
        """The top-k of a few rows: each row's float64 distance straight away (the bits the
        float32 pass and its settling would give the rows they keep), ordered by it and key."""
        runs = found.runs
        if runs is not None and len(runs) == 1:
            # One run of rows with a direction each, read in place (a slice is a view; a list
            # of positions would be a gather).
            first, stop = runs[0].tolist()
            if first < stop and k >= 1 and (not self.undirected or bool(space.directed[first:stop].all())):
                return self._settled(space, slice(first, stop), q64, q_norm, k, found.matching)
        listed = found.listed()
        if listed is None:
            listed = np.arange(self.rows)
        if self.undirected:
            listed = listed[space.directed[listed]]
        if len(listed) == 0 or k < 1:
            return Ranking(np.empty(0, np.int64), np.empty(0, np.float32), found.matching)
        return self._settled(space, listed, q64, q_norm, k, found.matching)

    @staticmethod
    def _settled(space: Space, rows: I64 | slice, q64: F64, q_norm: float, k: int, matching: int) -> Ranking:
        """The top-k of ``rows`` (positions in ``space``, or one run of them) by float64
        distance, ties by key."""
        distances = space.distances(rows, q64, q_norm)
        order = np.lexsort((space.rank[rows], distances))[:k]
        ranked = rows[order] if isinstance(rows, np.ndarray) else order + rows.start
        if space.to_base is not None:
            ranked = space.to_base[ranked]
        return Ranking(ranked.astype(np.int64, copy=False), distances[order], matching)

    def distances(self, positions: I64, q64: F64, q_norm: float) -> F32:
        """Cosine distances of the rows at ``positions``, each from its own float64 dot product
        (the products of float32 values are exact in float64)."""
        return self._base.distances(positions, q64, q_norm)

    def _buffer(self) -> F32:
        buffer: F32 | None = getattr(self._scratch, "buffer", None)
        if buffer is None:
            buffer = self._scratch.buffer = np.empty((BLOCK_ROWS, self.dims), dtype=np.float32)
        return buffer

    # -- rows -------------------------------------------------------------------------------

    def fetch(self, ranking: Ranking, columns: Sequence[str]) -> list[dict[str, Any]]:
        """The ranked rows' ``columns`` (as the table version holds them), in rank order, each
        with its ``_distance``."""
        if len(ranking.positions) == 0:
            return []
        selected = self.table.select(list(columns))
        if len(ranking.positions) <= _SLICED_ROWS:
            # A top-k is a few rows: one-row slices, since ``take`` imports pyarrow.compute
            # (40 ms of a cold run) and reads the same values.
            found = [selected.slice(p, 1).to_pylist()[0] for p in ranking.positions.tolist()]
        else:
            # From the positions' own buffer: ``pa.array`` of anything would import pandas to ask
            # whether it is a DataFrame (0.5 s of a cold run).
            positions = np.ascontiguousarray(ranking.positions, dtype=np.int64)
            indices = pa.Array.from_buffers(pa.int64(), len(positions), [None, pa.py_buffer(positions)])
            found = selected.take(indices).to_pylist()
        return [{**row, "_distance": d} for row, d in zip(found, ranking.distances.tolist(), strict=True)]
