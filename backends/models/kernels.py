"""Compiled kernels for a short text's forward pass (a query): its layer products, the
activations' grid, the rounding back to float32 and GELU, with the same bits as numpy's path.

A query is a dozen rows, and its layer products are skinny (12 x 384 by 384 x 1536): there
OpenBLAS spends much of its time packing the weights rather than multiplying them
(``benchmarks/bench_query_embedding.py`` measures both). These kernels, compiled by numba
(the optional extra ``fast``), read each layer's weight integers as float32 (half the bytes;
exact, since every weight integer of float32 weights has at most 24 significant bits, checked
at set-up) and keep a tile of 4 rows by 4 columns in registers, on the calling thread (with
a second thread, a query beside two CPU-bound processes waited up to 190 ms for a core, in a
run made while this was written). A product is still an exact
integer sum (``encoder._exact_matmul``): the order of its terms and FMA contraction cannot
show. The grid (``_grid``), the rounding (``_finish``) and GELU (``_gelu``) are compiled
without fast-math, so they round as numpy's operations do, in the same order.

Loading them is set-up (``ShortKernels.load``): numba's import and the compiled code, read
from numba's cache after the first compile on a machine. Without numba the numpy path runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from backends.models.encoder import (
    _ERF_C0,
    _ERF_C1,
    _ERF_C2,
    _ERF_C3,
    _ERF_LIMIT,
    _ERF_STEP,
    _NORM_BOUND,
    FloatArray,
    WideArray,
    _Bert,
    _Grid,
    _Linear,
)

_TILE = 4
"""Rows and columns of a register tile: 16 float64 accumulators."""

# The products are exact integer sums: any order, grouping or FMA gives the same result.
_EXACT_SUMS = {"reassoc", "nsz", "contract"}


def _products(ints: WideArray, weights: FloatArray, out: WideArray) -> None:
    """``out[:, :n] = ints @ weights[:n].T`` for ``n`` a multiple of 4 and 4 | rows."""
    rows, depth = ints.shape
    for block in range(weights.shape[0] // _TILE):
        n = block * _TILE
        for i in range(0, rows, _TILE):
            a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = 0.0
            a20 = a21 = a22 = a23 = a30 = a31 = a32 = a33 = 0.0
            for k in range(depth):
                w0 = np.float64(weights[n, k])
                w1 = np.float64(weights[n + 1, k])
                w2 = np.float64(weights[n + 2, k])
                w3 = np.float64(weights[n + 3, k])
                x0, x1, x2, x3 = ints[i, k], ints[i + 1, k], ints[i + 2, k], ints[i + 3, k]
                a00 += x0 * w0
                a01 += x0 * w1
                a02 += x0 * w2
                a03 += x0 * w3
                a10 += x1 * w0
                a11 += x1 * w1
                a12 += x1 * w2
                a13 += x1 * w3
                a20 += x2 * w0
                a21 += x2 * w1
                a22 += x2 * w2
                a23 += x2 * w3
                a30 += x3 * w0
                a31 += x3 * w1
                a32 += x3 * w2
                a33 += x3 * w3
            out[i, n], out[i, n + 1], out[i, n + 2], out[i, n + 3] = a00, a01, a02, a03
            out[i + 1, n], out[i + 1, n + 1], out[i + 1, n + 2], out[i + 1, n + 3] = a10, a11, a12, a13
            out[i + 2, n], out[i + 2, n + 1], out[i + 2, n + 2], out[i + 2, n + 3] = a20, a21, a22, a23
            out[i + 3, n], out[i + 3, n + 1], out[i + 3, n + 2], out[i + 3, n + 3] = a30, a31, a32, a33
    for n in range(weights.shape[0] - weights.shape[0] % _TILE, weights.shape[0]):
        for i in range(rows):
            total = 0.0
            for k in range(depth):
                total += ints[i, k] * np.float64(weights[n, k])
            out[i, n] = total


def _finish(sums: WideArray, row_step: WideArray, column_step: WideArray, bias: FloatArray, out: FloatArray) -> None:
    """``encoder._Linear.__call__``'s rounding: ``(sums * row_step * column_step + bias)`` to float32."""
    for i in range(out.shape[0]):
        for n in range(out.shape[1]):
            value = sums[i, n] * row_step[i]
            value *= column_step[n]
            value += np.float64(bias[n])
            out[i, n] = np.float32(value)


def _grid(x: FloatArray, bound: float, ints: WideArray, step: WideArray) -> bool:
    """``encoder._Grid.of(x, axis=-1)`` into ``ints`` and ``step``; ``False`` where a row's
    step could differ from it. Each row's sum of squares is added in another order than
    numpy's einsum: both are within ``depth`` units in the last place of the exact sum
    (positive terms), so a row's step can only differ when its norm lies within 1e-12 of a
    power of two (times ``bound``); such a row is left to numpy (``_Grid.of``)."""
    for i in range(x.shape[0]):
        squares = 0.0
        for k in range(x.shape[1]):
            value = np.float64(x[i, k])
            squares += value * value
        target = math.sqrt(squares) / bound
        exponent = math.frexp(target)[1]
        if math.frexp(target * (1.0 - 1e-12))[1] != exponent or math.frexp(target * (1.0 + 1e-12))[1] != exponent:
            return False
        scale = math.ldexp(1.0, -exponent)
        for k in range(x.shape[1]):
            ints[i, k] = np.rint(np.float64(x[i, k]) * scale)
        step[i] = math.ldexp(1.0, exponent)
    return True


def _gelu(x: FloatArray, c0: WideArray, c1: WideArray, c2: WideArray, c3: WideArray, out: FloatArray) -> None:
    """``encoder._gelu``'s operations, in its order, one element at a time."""
    inverse_sqrt2 = 1.0 / math.sqrt(2.0)
    last = c0.shape[0] - 1
    for j in range(x.shape[0]):
        wide = np.float64(x[j])
        pos = min(max(wide * inverse_sqrt2, -_ERF_LIMIT), _ERF_LIMIT)
        pos += _ERF_LIMIT
        pos *= 1.0 / _ERF_STEP
        idx = min(int(pos), last)
        t = pos - idx
        erf = c3[idx]
        erf *= t
        erf += c2[idx]
        erf *= t
        erf += c1[idx]
        erf *= t
        erf += c0[idx]
        erf += 1.0
        erf *= wide
        erf *= 0.5
        out[j] = np.float32(erf)


_products_compiled = numba.njit(fastmath=_EXACT_SUMS, nogil=True, cache=True)(_products)
_finish_compiled = numba.njit(nogil=True, cache=True)(_finish)
_gelu_compiled = numba.njit(nogil=True, cache=True)(_gelu)
_grid_compiled = numba.njit(nogil=True, cache=True)(_grid)


@dataclass(frozen=True)
class _ShortLinear:
    """One ``_Linear`` for the kernels: its weight integers as float32, one row per output."""

    linear: _Linear
    weights: FloatArray

    def __call__(self, x: FloatArray) -> FloatArray:
        rows, depth = x.shape
        ints = np.zeros((-(-rows // _TILE) * _TILE, depth), dtype=np.float64)
        step = np.empty(rows, dtype=np.float64)
        if not _grid_compiled(x, _NORM_BOUND - math.sqrt(depth), ints, step):
            grid = _Grid.of(x, axis=-1)
            ints[:rows], step = grid.ints, grid.step[:, 0]
        sums = np.empty((ints.shape[0], self.weights.shape[0]), dtype=np.float64)
        _products_compiled(ints, self.weights, sums)
        out = np.empty((rows, self.weights.shape[0]), dtype=np.float32)
        _finish_compiled(sums, step, self.linear.weight.step[0], self.linear.bias, out)
        return out


class ShortKernels:
    """A model's kernels for short texts (``encoder.ShortPath``): ``layer(number)`` gives the
    layer's four products (QKV, attention output, intermediate, output), ``gelu`` the activation."""

    def __init__(self, layers: tuple[tuple[_ShortLinear, ...], ...]) -> None:
        self._layers = layers

    @classmethod
    def load(cls, bert: _Bert) -> ShortKernels | None:
        """The kernels for ``bert``, compiled (or read from numba's cache) and run once; ``None``
        where a layer's weight integers are not exact in float32 (weights stored wider)."""
        layers = []
        for layer in bert.layers:
            parts = []
            for linear in layer.linears():
                weights = np.ascontiguousarray(linear.weight.ints.T, dtype=np.float32)
                if not np.array_equal(weights.T, linear.weight.ints):
                    return None
                parts.append(_ShortLinear(linear, weights))
            layers.append(tuple(parts))
        kernels = cls(tuple(layers))
        ints, weights, sums = np.zeros((_TILE, 8)), np.zeros((_TILE + 1, 8), dtype=np.float32), np.empty((_TILE, 5))
        _products_compiled(ints, weights, sums)
        steps, bias = np.ones(_TILE + 1), np.zeros(_TILE + 1, dtype=np.float32)
        _finish_compiled(sums, steps, steps, bias, np.empty(sums.shape, dtype=np.float32))
        _grid_compiled(np.ones((1, 8), dtype=np.float32), 1.0, ints, steps)
        kernels.gelu(np.zeros(4, dtype=np.float32))
        return kernels

    def layer(self, number: int) -> tuple[_ShortLinear, ...]:
        return self._layers[number]

    def gelu(self, x: FloatArray) -> FloatArray:
        out = np.empty_like(x)
        _gelu_compiled(x.reshape(-1), _ERF_C0, _ERF_C1, _ERF_C2, _ERF_C3, out.reshape(-1))
        return out
