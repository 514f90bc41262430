"""numpy's float32 reductions, bit for bit, compiled by numba (the extra ``fast``): the
pairwise sum behind ``ndarray.sum`` and ``mean`` over a row, and ``encoder._layer_norm`` on
top of it, for the rows of any batch.

numpy adds a float32 row in ``pairwise_sum`` (its ``loops_utils``): fewer than 8 values one
after another from 0; up to 128 in eight running sums over blocks of eight, combined as
``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, then the values left over one by one;
more than 128 as two halves (the first a multiple of 8 long); the reduction adds the result to
its start, +0.0. ``mean`` divides that float32 sum by the count as an ``intp``: in float64, then
rounded to float32. Every step here is float32 arithmetic in that order, compiled without
fast-math; ``tests/test_short_kernel_parts.py`` compares the bits with numpy's on rows of every
length from 1 to 299 and longer ones, signed zeros included.
"""

from __future__ import annotations

import numba
import numpy as np

from backends.models.encoder import FloatArray

_BLOCK = 128
"""numpy's ``PW_BLOCKSIZE``."""


def _block_sum(a: FloatArray, start: int, count: int) -> np.float32:
    """numpy's sum of at most ``_BLOCK`` float32 values from ``start``."""
    if count < 8:
        total = np.float32(0.0)
        for i in range(count):
            total = np.float32(total + a[start + i])
        return total
    r0, r1, r2, r3 = a[start], a[start + 1], a[start + 2], a[start + 3]
    r4, r5, r6, r7 = a[start + 4], a[start + 5], a[start + 6], a[start + 7]
    i = 8
    while i < count - count % 8:
        at = start + i
        r0, r1, r2, r3 = r0 + a[at], r1 + a[at + 1], r2 + a[at + 2], r3 + a[at + 3]
        r4, r5, r6, r7 = r4 + a[at + 4], r5 + a[at + 5], r6 + a[at + 6], r7 + a[at + 7]
        i += 8
    low, high = np.float32(r0 + r1) + np.float32(r2 + r3), np.float32(r4 + r5) + np.float32(r6 + r7)
    total = np.float32(np.float32(low) + np.float32(high))
    while i < count:
        total = np.float32(total + a[start + i])
        i += 1
    return total


def _pairwise_sum(a: FloatArray, start: int, count: int) -> np.float32:
    """``a[start:start + count].sum()`` as numpy adds a contiguous float32 row: its recursion
    over halves, walked with a stack (numba's cache cannot hold a recursive function), added to
    the reduction's start, +0.0 (a row of -0.0 sums to +0.0)."""
    if count <= _BLOCK:
        return np.float32(np.float32(0.0) + _block_sum_compiled(a, start, count))
    depth = 64  # halves: 2**64 values would be needed to overflow it
    starts = np.empty(depth, dtype=np.int64)
    counts = np.empty(depth, dtype=np.int64)
    lefts = np.empty(depth, dtype=np.float32)
    visits = np.zeros(depth, dtype=np.int64)  # 0: new, 1: left half summed, 2: both
    starts[0], counts[0], top = start, count, 0
    value = np.float32(0.0)  # the sum the node just finished hands its parent
    while top >= 0:
        count_here = counts[top]
        half = count_here // 2
        half -= half % 8
        if count_here <= _BLOCK:
            value = _block_sum_compiled(a, starts[top], count_here)
            top -= 1
        elif visits[top] == 0:
            visits[top] = 1
            top += 1
            starts[top], counts[top], visits[top] = starts[top - 1], half, 0
        elif visits[top] == 1:
            visits[top] = 2
            lefts[top] = value
            top += 1
            starts[top], counts[top], visits[top] = starts[top - 1] + half, count_here - half, 0
        else:
            value = np.float32(lefts[top] + value)
            top -= 1
    return np.float32(np.float32(0.0) + value)


def _add_layer_norm(
    x: FloatArray, residual: FloatArray, weight: FloatArray, bias: FloatArray, eps: np.float32, out: FloatArray
) -> None:
    """``encoder._layer_norm(x + residual, weight, bias, eps)`` row by row."""
    rows, width = x.shape
    row = np.empty(width, dtype=np.float32)
    squares = np.empty(width, dtype=np.float32)
    for i in range(rows):
        for j in range(width):
            row[j] = x[i, j] + residual[i, j]
        mean = np.float32(np.float64(_pairwise_sum_compiled(row, 0, width)) / np.float64(width))
        for j in range(width):
            row[j] = row[j] - mean
            squares[j] = row[j] * row[j]
        variance = np.float32(np.float64(_pairwise_sum_compiled(squares, 0, width)) / np.float64(width))
        scale = np.sqrt(np.float32(variance + eps))
        for j in range(width):
            out[i, j] = np.float32(np.float32(row[j] / scale) * weight[j]) + bias[j]


_block_sum_compiled = numba.njit(nogil=True, cache=True)(_block_sum)
_pairwise_sum_compiled = numba.njit(nogil=True, cache=True)(_pairwise_sum)
_add_layer_norm_compiled = numba.njit(nogil=True, cache=True)(_add_layer_norm)


def add_layer_norm(x: FloatArray, residual: FloatArray, weight: FloatArray, bias: FloatArray, eps: float) -> FloatArray:
    """``encoder._layer_norm(x + residual, weight, bias, eps)``, the same bits."""
    out = np.empty(x.shape, dtype=np.float32)
    _add_layer_norm_compiled(x, residual, weight, bias, np.float32(eps), out)
    return out
