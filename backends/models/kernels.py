"""The compiled path for the forward pass, with the same bits as numpy's: ``CompiledKernels``
gathers its parts, each in its own module, each bit for bit what it replaces.

- layer products: for a short batch (a query, up to ``SHORT_ROWS`` tokens) register tiles
  compiled for the host's vectors (``backends.models.tiles``), reading each layer's weight
  integers as float32 (half the bytes; exact, since every weight integer of float32 weights has
  at most 24 significant bits, checked at set-up); for a longer one OpenBLAS, as numpy's path.
  A product is still an exact integer sum (``encoder._exact_matmul``): the order of its terms
  and FMA contraction cannot show. Around it, the activations' grid (``_grid``) and the
  rounding back to float32 (``_finish``), compiled by numba without fast-math, in numpy's order;
- self-attention (``backends.models.attention``);
- the residual add and layer norm on numpy's float32 row sums (``backends.models.float32_sums``);
- GELU on the host's vectors (``backends.models.vector_gelu``).

A query is a dozen rows, and its layer products are skinny (12 x 384 by 384 x 1536): there
OpenBLAS spends much of its time packing the weights rather than multiplying them, and the rest
of the pass is dozens of small numpy calls (``benchmarks/bench_query_embedding.py``). A long
batch (an index build) spends much of its time outside the products, in numpy's passes over the
activations, which the compiled parts make once. All of it runs on the calling thread (with a
second thread, a query beside two CPU-bound processes waited up to 190 ms for a core, in a run
made while an earlier version of this was written).

Loading it is set-up (``CompiledKernels.load``): numba's import and its compiled code, read from
numba's cache after the first compile on a machine, and the LLVM code of the tiles and GELU
(about 0.2 s). Without numba (the optional extra ``fast``) the numpy path runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from backends.models import attention, float32_sums
from backends.models.encoder import (
    _NORM_BOUND,
    SHORT_ROWS,
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


_CHUNK_ROWS = 128
"""Rows of a long batch taken at a time, so that their float64 sums (1.5 MB at 1536 outputs) stay
in cache between the product and the rounding: a whole batch's (190 MB for 32 texts of 243
tokens) went to memory and back, and the rounding took a sixth of the pass."""


@dataclass(frozen=True)
class _CompiledLinear:
    """One ``_Linear`` for the kernels: its weight integers packed for ``tiles``, which compute
    the products of up to ``SHORT_ROWS`` rows; BLAS computes more."""

    linear: _Linear
    tiles: Tiles
    packed: FloatArray

    def __call__(self, x: FloatArray) -> FloatArray:
        rows = x.shape[0]
        out = np.empty((rows, self.linear.bias.shape[0]), dtype=np.float32)
        for start in range(0, rows, _CHUNK_ROWS):
            self._rows(x[start : start + _CHUNK_ROWS], out[start : start + _CHUNK_ROWS])
        return out

    def _rows(self, x: FloatArray, out: FloatArray) -> None:
        rows, depth = x.shape
        ints = np.empty((rows, depth), dtype=np.float64)
        step = np.empty(rows, dtype=np.float64)
        if not _grid_compiled(x, _NORM_BOUND - math.sqrt(depth), ints, step):
            grid = _Grid.of(x, axis=-1)
            ints, step = grid.ints, grid.step[:, 0]
        if rows <= SHORT_ROWS:
            sums = np.empty((rows, self.packed.shape[0] * self.tiles.columns), dtype=np.float64)
            self.tiles(ints, self.packed, sums)
        else:
            sums = ints @ self.linear.weight.ints  # BLAS: exact all the same (encoder._exact_matmul)
        _finish_compiled(sums, step, self.linear.weight.step[0], self.linear.bias, out)


class CompiledKernels:
    """A model's compiled path (``encoder.CompiledPath``): ``layer(number)`` gives the
    layer's four products (QKV, attention output, intermediate, output), ``gelu`` the activation."""

    def __init__(self, layers: tuple[tuple[_CompiledLinear, ...], ...], gelu: VectorGelu) -> None:
        self._layers = layers
        self._gelu = gelu

    @classmethod
    def load(cls, bert: _Bert) -> CompiledKernels | None:
        """The kernels for ``bert``, compiled (or read from numba's cache) and run on a short and
        a long text; ``None`` where a layer's weight integers are not exact in float32 (weights
        stored wider)."""
        tiles = host_tiles()
        layers = []
        for layer in bert.layers:
            parts = []
            for linear in layer.linears():
                packed = tiles.pack(linear.weight.ints)
                if packed is None:
                    return None
                parts.append(_CompiledLinear(linear, tiles, packed))
            layers.append(tuple(parts))
        kernels = cls(tuple(layers), host_gelu())
        # Every compiled function, compiled now (or read from numba's cache), never at a text's
        # first use: a short text, a batch of two, and a text long enough for BLAS's products
        # and for rows taken in blocks.
        long = " ".join(["warm"] * (2 * _CHUNK_ROWS))
        for texts in (["warm"], ["warm", "up"], [long]):
            bert.encode_batch(texts, kernels)
        return kernels

    def layer(self, number: int) -> tuple[_CompiledLinear, ...]:
        return self._layers[number]

    def attend(self, qkv: FloatArray, heads: int) -> FloatArray | None:
        return attention.attend(qkv, heads)

    def add_layer_norm(
        self, x: FloatArray, residual: FloatArray, weight: FloatArray, bias: FloatArray, eps: float
    ) -> FloatArray:
        return float32_sums.add_layer_norm(x, residual, weight, bias, eps)

    def gelu(self, x: FloatArray) -> FloatArray:
        return self._gelu(x)
