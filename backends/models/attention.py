"""Self-attention compiled by numba (the extra ``fast``), with ``encoder._Bert._attend``'s
bits, for a text of any length.

``_Bert._attend`` takes the heads in groups (all at once for a short text): puts each head's
query rows and key rows on their grids, sums their products exactly, applies the two steps and
the scale in that order and rounds to float32; subtracts each row's maximum, takes numpy's
``exp`` and divides by the row's float32 sum; then puts the probability rows and the value
columns on their grids and sums those products exactly. Here the same stages, each compiled
but the softmax's exponential and division (numpy's own) and the integer products (BLAS's
``matmul``, exact whatever its order). A grid's row norm is added in another order than numpy's
einsum, so a row whose norm lies within 1e-12 of a power of two is left to numpy
(``kernels._grid``'s argument): ``attend`` then returns ``None``.

No compiled function here calls one of another module: numba's cache keeps a caller's code,
callees included, until the caller's own file changes, so a callee edited elsewhere would go
unseen in a checkout whose caller's file did not change.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from backends.models.encoder import _NORM_BOUND, _SCORES_PER_PASS, FloatArray, WideArray


def _on_grid(x: FloatArray, start: int, stride: int, count: int, bound: float, ints: WideArray) -> float:
    """``count`` values of ``x``'s flat buffer from ``start`` by ``stride`` on their grid, as
    ``encoder._Grid.of`` puts a row: the integers into ``ints``, the step returned; 0.0 where the
    row's norm lies within 1e-12 of a power of two (times ``bound``)."""
    squares = 0.0
    for j in range(count):
        value = np.float64(x[start + j * stride])
        squares += value * value
    target = math.sqrt(squares) / bound
    exponent = math.frexp(target)[1]
    if math.frexp(target * (1.0 - 1e-12))[1] != exponent or math.frexp(target * (1.0 + 1e-12))[1] != exponent:
        return 0.0
    scale = math.ldexp(1.0, -exponent)
    for j in range(count):
        ints[j] = np.rint(np.float64(x[start + j * stride]) * scale)
    return math.ldexp(1.0, exponent)


def _row_grids(qkv: FloatArray, offset: int, bound: float, ints: WideArray, steps: WideArray) -> bool:
    """Query or key rows of ``ints.shape[0]`` heads from column ``offset``: ``ints[h, t]``."""
    heads, tokens, dim = ints.shape
    width = qkv.shape[1]
    flat = qkv.reshape(-1)
    for h in range(heads):
        for t in range(tokens):
            steps[h, t] = _on_grid_compiled(flat, t * width + offset + h * dim, 1, dim, bound, ints[h, t])
            if steps[h, t] == 0.0:
                return False
    return True


def _column_grids(qkv: FloatArray, offset: int, bound: float, ints: WideArray, steps: WideArray) -> bool:
    """Value columns of ``ints.shape[0]`` heads from column ``offset``: ``ints[h, d]`` over tokens."""
    heads, dim, tokens = ints.shape
    width = qkv.shape[1]
    flat = qkv.reshape(-1)
    for h in range(heads):
        for d in range(dim):
            steps[h, d] = _on_grid_compiled(flat, offset + h * dim + d, width, tokens, bound, ints[h, d])
            if steps[h, d] == 0.0:
                return False
    return True


def _scores(sums: WideArray, rows: WideArray, columns: WideArray, scale: float, scores: FloatArray) -> None:
    """The scores less their row's maximum: steps and scale in numpy's order, then float32."""
    heads, tokens, keys = sums.shape
    for h in range(heads):
        for t in range(tokens):
            for u in range(keys):
                total = sums[h, t, u]
                total *= rows[h, t]
                total *= columns[h, u]
                total *= scale
                scores[h, t, u] = np.float32(total)
            top = scores[h, t, 0]
            for u in range(1, keys):
                top = max(top, scores[h, t, u])
            for u in range(keys):
                scores[h, t, u] = scores[h, t, u] - top


def _probability_grids(probabilities: FloatArray, bound: float, ints: WideArray, steps: WideArray) -> bool:
    """Each row of ``probabilities`` on its grid."""
    heads, tokens, keys = probabilities.shape
    flat = probabilities.reshape(-1)
    for h in range(heads):
        for t in range(tokens):
            steps[h, t] = _on_grid_compiled(flat, (h * tokens + t) * keys, 1, keys, bound, ints[h, t])
            if steps[h, t] == 0.0:
                return False
    return True


def _context(sums: WideArray, rows: WideArray, columns: WideArray, offset: int, out: FloatArray) -> None:
    """``out[t, offset + h * dim + d]``: steps in numpy's order, then float32."""
    heads, tokens, dim = sums.shape
    for h in range(heads):
        for t in range(tokens):
            for d in range(dim):
                total = sums[h, t, d]
                total *= rows[h, t]
                total *= columns[h, d]
                out[t, offset + h * dim + d] = np.float32(total)


_on_grid_compiled = numba.njit(nogil=True, cache=True)(_on_grid)
_row_grids_compiled = numba.njit(nogil=True, cache=True)(_row_grids)
_column_grids_compiled = numba.njit(nogil=True, cache=True)(_column_grids)
_scores_compiled = numba.njit(nogil=True, cache=True)(_scores)
_probability_grids_compiled = numba.njit(nogil=True, cache=True)(_probability_grids)
_context_compiled = numba.njit(nogil=True, cache=True)(_context)


def _products(a: WideArray, b: WideArray) -> WideArray:
    """``a[h] @ b[h].T`` for every head, by BLAS: exact sums of integers on their grids, as
    ``encoder._exact_matmul``'s (faster than numba's loops at every length, 8 tokens included)."""
    products: WideArray = np.matmul(a, b.transpose(0, 2, 1))
    return products


def attend(qkv: FloatArray, heads: int) -> FloatArray | None:
    """``_Bert._attend(qkv)`` with the same bits; ``None`` where a grid is left to numpy."""
    tokens, width = qkv.shape
    dim = width // (3 * heads)
    by_dim, by_tokens = _NORM_BOUND - math.sqrt(dim), _NORM_BOUND - math.sqrt(tokens)
    out = np.empty((tokens, heads * dim), dtype=np.float32)
    group = max(1, _SCORES_PER_PASS // (tokens * tokens))  # heads a pass, as _attend takes them
    for first in range(0, heads, group):
        count = min(group, heads - first)
        queries, keys = np.empty((count, tokens, dim)), np.empty((count, tokens, dim))
        query_steps, key_steps = np.empty((count, tokens)), np.empty((count, tokens))
        if not (
            _row_grids_compiled(qkv, first * dim, by_dim, queries, query_steps)
            and _row_grids_compiled(qkv, (heads + first) * dim, by_dim, keys, key_steps)
        ):
            return None
        scores = np.empty((count, tokens, tokens), dtype=np.float32)
        _scores_compiled(_products(queries, keys), query_steps, key_steps, 1.0 / math.sqrt(dim), scores)
        np.exp(scores, out=scores)  # the softmax's exponential and division are numpy's own
        scores /= scores.sum(axis=-1, keepdims=True)
        probabilities, values = np.empty((count, tokens, tokens)), np.empty((count, dim, tokens))
        probability_steps, value_steps = np.empty((count, tokens)), np.empty((count, dim))
        if not (
            _probability_grids_compiled(scores, by_tokens, probabilities, probability_steps)
            and _column_grids_compiled(qkv, (2 * heads + first) * dim, by_tokens, values, value_steps)
        ):
            return None
        _context_compiled(_products(probabilities, values), probability_steps, value_steps, first * dim, out)
    return out
