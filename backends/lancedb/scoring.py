"""Scoring the rows a search selected (``selection.py``) in float32: one matrix-vector
product per run of consecutive rows, over the whole matrix, or over blocks of gathered rows
(``exact.py`` settles the cut exactly afterwards)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from backends.lancedb.masks import F32, F64, I64
from backends.lancedb.matrix import BLOCK_ROWS
from backends.lancedb.selection import Selection

DENSE_SHARE: Final = 0.75
"""From this share of the rows on, one product over the whole matrix costs less than
gathering the selected rows first."""
MAX_RUNS: Final = 16
"""Up to this many runs of consecutive rows are scored in place, one product each."""


def _identity(i: I64) -> I64:
    return i


@dataclass(frozen=True)
class Space:
    """Rows in one order: the matrix's own (``to_base`` is ``None``) or a field's sorted copy,
    whose row ``p`` is matrix row ``to_base[p]``; each row's float64 norm, its float32 inverse
    norm (0 without a direction), whether it has one and its rank in key order, in that order
    (a search reads them for rows it just scored, near one another)."""

    matrix: F32
    norms: F64
    inverse: F32
    to_base: I64 | None
    directed: npt.NDArray[np.bool_]
    rank: npt.NDArray[np.int32]

    def distances(self, positions: I64 | slice, q64: F64, q_norm: float) -> F32:
        """Cosine distances of the rows at ``positions`` (or in a run) of this space, each from its own
        float64 dot product (the products of float32 values are exact in float64).

        A row's distance depends on its vector and norm alone, so it is the same in every
        space; scoring it again where it was just scored reads rows still in the cache."""
        # One dot per row (never a matrix product, whose blocking could depend on the row count).
        cosine: F64 = np.vecdot(self.matrix[positions].astype(np.float64), q64)
        cosine /= self.norms[positions] * q_norm
        np.subtract(1.0, cosine, out=cosine)
        distances: F32 = cosine.astype(np.float32)
        # 1 - cosine is at most 2 + 2**-52 (rounds to 2 in float32) but can dip below 0.
        np.maximum(distances, np.float32(0.0), out=distances)
        return distances


def scores_of(
    space: Space, found: Selection, query: F32, buffer: Callable[[], F32]
) -> tuple[F32, Callable[[I64], I64]]:
    """float32 score of every selected row (its cosine times the query's norm: ``exact.py``
    scores a query of moderate norm as it is), and where the i-th score's row is in the space:
    one product over each run of consecutive rows, over the whole matrix, or over blocks
    of the selected rows gathered into a per-thread buffer."""
    runs = found.runs
    if runs is not None and len(runs) <= MAX_RUNS:
        return _run_scores(space, runs, query)
    positions = found.listed()
    if positions is None:
        everything: F32 = space.matrix @ query
        everything *= space.inverse
        return everything, _identity
    listed = positions

    def locate(i: I64) -> I64:
        return listed[i]

    if len(listed) >= DENSE_SHARE * len(space.matrix):
        dense: F32 = space.matrix @ query
        dense *= space.inverse
        return dense[listed], locate
    out = np.empty(len(listed), dtype=np.float32)
    rows_buffer = buffer()
    for start in range(0, len(listed), BLOCK_ROWS):
        block = listed[start : start + BLOCK_ROWS]
        rows = rows_buffer[: len(block)]
        # mode="clip": positions are in range, and "raise" would copy through a bounce buffer.
        np.take(space.matrix, block, axis=0, out=rows, mode="clip")
        # One dot per row on this thread: a threaded BLAS call per block waits on the other
        # cores, which a busy machine makes cost more than the block's arithmetic.
        np.vecdot(rows, query, out=out[start : start + len(block)])
    out *= space.inverse[listed]
    return out, locate


def _run_scores(space: Space, runs: I64, query: F32) -> tuple[F32, Callable[[I64], I64]]:
    if len(runs) == 1:
        first, stop = runs[0].tolist()
        one: F32 = space.matrix[first:stop] @ query
        one *= space.inverse[first:stop]
        return one, lambda i: i + first
    firsts, stops = runs[:, 0], runs[:, 1]
    ends = np.cumsum(stops - firsts)
    out = np.empty(int(ends[-1]), dtype=np.float32)
    at = 0
    for first, stop in runs.tolist():
        piece = out[at : at + stop - first]
        np.matmul(space.matrix[first:stop], query, out=piece)
        piece *= space.inverse[first:stop]
        at += stop - first
    starts = ends - (stops - firsts)

    def locate(i: I64) -> I64:
        run = np.searchsorted(ends, i, side="right")
        located: I64 = firsts[run] + (i - starts[run])
        return located

    return out, locate
