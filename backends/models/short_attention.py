"""A short text's self-attention compiled by numba (the extra ``fast``), with
``encoder._Bert._attend``'s bits, all heads in one pass (a short text's scores fit one).

``_Bert._attend`` puts each head's query rows and key rows on their grids, sums their
products exactly, applies the two steps and the scale in that order and rounds to float32;
subtracts each row's maximum, takes numpy's ``exp`` and divides by the row's float32 sum;
then puts the probability rows and the value columns on their grids and sums those products
exactly. Here the same: a grid's row norm is added in another order than numpy's einsum, so a
row whose norm lies within 1e-12 of a power of two is left to numpy (``kernels._grid``'s
argument), the integer products are exact whatever their order (compiled with fast-math), the
exponential stays numpy's, and the row sums are numpy's pairwise sums (``float32_sums``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from backends.models.encoder import _NORM_BOUND, FloatArray, WideArray
from backends.models.float32_sums import _pairwise_sum_compiled


def _integer_products(a: WideArray, b: WideArray, out: WideArray) -> None:
    """``out = a @ b.T`` for integers whose every partial sum is exact (on their grids)."""
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            total = 0.0
            for k in range(a.shape[1]):
                total += a[i, k] * b[j, k]
            out[i, j] = total


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


def _scores(qkv: FloatArray, heads: int, scale: float, bound: float, scores: FloatArray) -> bool:
    """Each head's scores less their row's maximum, ``(heads, tokens, tokens)`` float32; ``False``
    where a grid is left to numpy."""
    tokens, width = qkv.shape
    dim = width // (3 * heads)
    flat = qkv.reshape(-1)
    ints = np.empty((2, tokens, dim))
    steps = np.empty((2, tokens))
    sums = np.empty((tokens, tokens))
    for h in range(heads):
        for part in range(2):  # 0: queries, 1: keys
            for t in range(tokens):
                start = t * width + (part * heads + h) * dim
                steps[part, t] = _on_grid_compiled(flat, start, 1, dim, bound, ints[part, t])
                if steps[part, t] == 0.0:
                    return False
        _integer_products_compiled(ints[0], ints[1], sums)
        for t in range(tokens):
            for u in range(tokens):
                total = sums[t, u]
                total *= steps[0, t]
                total *= steps[1, u]
                total *= scale
                scores[h, t, u] = np.float32(total)
            top = scores[h, t, 0]
            for u in range(1, tokens):
                top = max(top, scores[h, t, u])
            for u in range(tokens):
                scores[h, t, u] = scores[h, t, u] - top
    return True


def _context(qkv: FloatArray, exps: FloatArray, heads: int, bound: float, out: FloatArray) -> bool:
    """The context ``(tokens, heads * dim)`` float32 from each row's exponentials ``exps``
    (divided by their sum here, in place); ``False`` where a grid is left to numpy."""
    tokens, width = qkv.shape
    dim = width // (3 * heads)
    flat = qkv.reshape(-1)
    probs = exps.reshape(-1)
    rows = np.empty((tokens, tokens))
    columns = np.empty((dim, tokens))
    row_steps = np.empty(tokens)
    column_steps = np.empty(dim)
    sums = np.empty((tokens, dim))
    for h in range(heads):
        for t in range(tokens):
            start = (h * tokens + t) * tokens
            total = _pairwise_sum_compiled(probs, start, tokens)
            for u in range(tokens):
                probs[start + u] = probs[start + u] / total
            row_steps[t] = _on_grid_compiled(probs, start, 1, tokens, bound, rows[t])
            if row_steps[t] == 0.0:
                return False
        for d in range(dim):
            column_steps[d] = _on_grid_compiled(flat, (2 * heads + h) * dim + d, width, tokens, bound, columns[d])
            if column_steps[d] == 0.0:
                return False
        _integer_products_compiled(rows, columns, sums)
        for t in range(tokens):
            for d in range(dim):
                total = sums[t, d]
                total *= row_steps[t]
                total *= column_steps[d]
                out[t, h * dim + d] = np.float32(total)
    return True


# The products are exact integer sums: any order, grouping or FMA gives the same result.
_integer_products_compiled = numba.njit(fastmath={"reassoc", "nsz", "contract"}, nogil=True, cache=True)(
    _integer_products
)
_on_grid_compiled = numba.njit(nogil=True, cache=True)(_on_grid)
_scores_compiled = numba.njit(nogil=True, cache=True)(_scores)
_context_compiled = numba.njit(nogil=True, cache=True)(_context)


def attend(qkv: FloatArray, heads: int) -> FloatArray | None:
    """``_Bert._attend(qkv)`` with the same bits; ``None`` where a grid is left to numpy."""
    tokens, width = qkv.shape
    dim = width // (3 * heads)
    scores = np.empty((heads, tokens, tokens), dtype=np.float32)
    if not _scores_compiled(qkv, heads, 1.0 / math.sqrt(dim), _NORM_BOUND - math.sqrt(dim), scores):
        return None
    np.exp(scores, out=scores)
    context = np.empty((tokens, heads * dim), dtype=np.float32)
    if not _context_compiled(qkv, scores, heads, _NORM_BOUND - math.sqrt(tokens), context):
        return None
    return context
