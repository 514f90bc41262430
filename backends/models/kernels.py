"""The compiled path for a short text's forward pass (a query), with the same bits as numpy's:
``ShortKernels`` gathers its parts, each in its own module, each bit for bit what it replaces.

- layer products: register tiles compiled for the host's vectors (``backends.models.tiles``),
  reading each layer's weight integers as float32 (half the bytes; exact, since every weight
  integer of float32 weights has at most 24 significant bits, checked at set-up). A product is
  still an exact integer sum (``encoder._exact_matmul``): the order of its terms and FMA
  contraction cannot show. Around it, the activations' grid (``_grid``) and the rounding back to
  float32 (``_finish``), compiled by numba without fast-math, in numpy's order;
- self-attention (``backends.models.short_attention``);
- the residual add and layer norm on numpy's float32 row sums (``backends.models.float32_sums``);
- GELU on the host's vectors (``backends.models.vector_gelu``).

A query is a dozen rows, and its layer products are skinny (12 x 384 by 384 x 1536): there
OpenBLAS spends much of its time packing the weights rather than multiplying them, and the rest
of the pass is dozens of small numpy calls (``benchmarks/bench_query_embedding.py``). All of it
runs on the calling thread (with a second thread, a query beside two CPU-bound processes waited
up to 190 ms for a core, in a run made while an earlier version of this was written).

Loading it is set-up (``ShortKernels.load``): numba's import and its compiled code, read from
numba's cache after the first compile on a machine, and the LLVM code of the tiles and GELU
(about 0.2 s). Without numba (the optional extra ``fast``) the numpy path runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from backends.models import float32_sums, short_attention
from backends.models.encoder import (
    _NORM_BOUND,
    FloatArray,
    WideArray,
    _Bert,
    _Grid,
    _Linear,
)
from backends.models.tiles import Tiles, host_tiles
from backends.models.vector_gelu import VectorGelu, host_gelu


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


_finish_compiled = numba.njit(nogil=True, cache=True)(_finish)
_grid_compiled = numba.njit(nogil=True, cache=True)(_grid)


@dataclass(frozen=True)
class _ShortLinear:
    """One ``_Linear`` for the kernels: its weight integers packed for ``tiles``."""

    linear: _Linear
    tiles: Tiles
    packed: FloatArray

    def __call__(self, x: FloatArray) -> FloatArray:
        rows, depth = x.shape
        ints = np.empty((rows, depth), dtype=np.float64)
        step = np.empty(rows, dtype=np.float64)
        if not _grid_compiled(x, _NORM_BOUND - math.sqrt(depth), ints, step):
            grid = _Grid.of(x, axis=-1)
            ints, step = grid.ints, grid.step[:, 0]
        sums = np.empty((rows, self.packed.shape[0] * self.tiles.columns), dtype=np.float64)
        self.tiles(ints, self.packed, sums)
        out = np.empty((rows, self.linear.bias.shape[0]), dtype=np.float32)
        _finish_compiled(sums, step, self.linear.weight.step[0], self.linear.bias, out)
        return out


class ShortKernels:
    """A model's kernels for short texts (``encoder.ShortPath``): ``layer(number)`` gives the
    layer's four products (QKV, attention output, intermediate, output), ``gelu`` the activation."""

    def __init__(self, layers: tuple[tuple[_ShortLinear, ...], ...], gelu: VectorGelu) -> None:
        self._layers = layers
        self._gelu = gelu

    @classmethod
    def load(cls, bert: _Bert) -> ShortKernels | None:
        """The kernels for ``bert``, compiled (or read from numba's cache) and run once; ``None``
        where a layer's weight integers are not exact in float32 (weights stored wider)."""
        tiles = host_tiles()
        layers = []
        for layer in bert.layers:
            parts = []
            for linear in layer.linears():
                packed = tiles.pack(linear.weight.ints)
                if packed is None:
                    return None
                parts.append(_ShortLinear(linear, tiles, packed))
            layers.append(tuple(parts))
        kernels = cls(tuple(layers), host_gelu())
        ints, sums = np.zeros((1, 8)), np.empty((1, 5))
        steps, bias = np.ones(5), np.zeros(5, dtype=np.float32)
        _finish_compiled(sums, steps, steps, bias, np.empty(sums.shape, dtype=np.float32))
        _grid_compiled(np.ones((1, 8), dtype=np.float32), 1.0, ints, steps)
        kernels.gelu(np.zeros(4, dtype=np.float32))
        return kernels

    def layer(self, number: int) -> tuple[_ShortLinear, ...]:
        return self._layers[number]

    def attend(self, qkv: FloatArray, heads: int) -> FloatArray | None:
        return short_attention.attend(qkv, heads)

    def add_layer_norm(
        self, x: FloatArray, residual: FloatArray, weight: FloatArray, bias: FloatArray, eps: float
    ) -> FloatArray:
        return float32_sums.add_layer_norm(x, residual, weight, bias, eps)

    def gelu(self, x: FloatArray) -> FloatArray:
        return self._gelu(x)
