"""The BERT forward pass behind ``MiniLMEmbedder`` and every folder embedder, with matrix
products summed exactly.

BERT encoder (post-LayerNorm, exact erf GELU), mean pooling over the attention mask (or the
[CLS] token's state), L2 normalisation (or none): sentence-transformers' pipeline for
all-MiniLM-L6-v2 and the BERT-family models laid out like it (bge, e5, gte). Every matrix product is
an exact sum (``_exact_matmul``), so the order in which BLAS splits and adds the terms cannot
show in the result: the same text gives the same bits under any thread count or kernel.
Loading the weights is ``backends.models.embedding``'s; the model's identity is recorded here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from rsc import EmbedderIdentity

FloatArray = npt.NDArray[np.float32]
WideArray = npt.NDArray[np.float64]


# Attention scores computed per pass over a group of heads: all heads at once for a short
# text, a few at a time for a long one, so the temporaries stay small (measured: 6 ms a
# layer for 256 tokens, 10 ms with all 12 heads in one pass).
_SCORES_PER_PASS = 1 << 18

_ROWS_PER_PASS = 128
"""Rows (tokens of a batch) a layer's feed-forward part takes at a time, the same bits: numpy's
path took 12.5 to 14.2 s of CPU for 64 texts of 243 tokens in blocks of 128 to 512 rows against
15.1 and 15.7 s whole, in runs made while this was written."""


# ---------------------------------------------------------------------------------------
# matrix products whose bits do not depend on how BLAS orders the sums

# float64 holds every integer up to 2**53 exactly. Two integer vectors whose Euclidean norms
# are both within 2**26.5 have sum |a_i * b_i| <= |a| * |b| <= 2**53 (Cauchy-Schwarz), so
# every partial sum of their dot product is exact: whatever order or grouping BLAS adds the
# terms in (threads, kernel blocking, FMA), the result is the same.
_NORM_BOUND = 2.0**26.5


@dataclass(frozen=True)
class _Grid:
    """``x`` rounded to ``ints * step``, one power-of-two ``step`` per row (or column).

    The step is the finest that keeps each row's integers within ``_NORM_BOUND``: for
    float32 data that is about 2**-26 of the row's norm, finer than the rounding float32
    sums make, and a row's few outlier features do not cost the others their precision.
    """

    ints: WideArray
    step: WideArray

    @classmethod
    def of(cls, x: FloatArray | WideArray, axis: Literal[-1, -2]) -> _Grid:
        """Rows (``axis=-1``) or columns (``axis=-2``) of the last two dimensions on a grid."""
        wide = x.astype(np.float64)
        squares = np.einsum("...ij,...ij->...i" if axis == -1 else "...ij,...ij->...j", wide, wide)
        # |x| / step < bound - sqrt(depth), and rounding to integers adds at most sqrt(depth) / 2
        # to the norm; the other half absorbs the rounding of ``squares``.
        # Indexing, not np.expand_dims: the same view without its argument checks (0.1 ms a call).
        target = np.sqrt(squares[..., None] if axis == -1 else squares[..., None, :]) / (
            _NORM_BOUND - math.sqrt(x.shape[axis])
        )
        _, exponent = np.frexp(target)  # target < 2**exponent (exponent 0 for a zero row)
        wide *= np.ldexp(1.0, -exponent)  # scaling by a power of two is exact
        return cls(np.rint(wide, out=wide), np.ldexp(1.0, exponent))


def _exact_matmul(a: _Grid, b: _Grid) -> WideArray:
    """``a @ b`` (stacked like ``np.matmul``), ``a`` on a grid per row and ``b`` per column."""
    out: WideArray = a.ints @ b.ints
    out *= a.step
    out *= b.step
    return out


# ---------------------------------------------------------------------------------------
# exact GELU without scipy: erf from a cubic Hermite table built with math.erf

_ERF_STEP = 1.0 / 512.0
_ERF_LIMIT = 6.0  # erf(6) = 1 - 2e-17: beyond it the table's end values are exact
_ERF_BLOCK = 1 << 15  # elements per pass, so the temporaries stay in cache


def _erf_cubics() -> npt.NDArray[np.float64]:
    """Per grid cell, the Hermite cubic c0 + c1 t + c2 t^2 + c3 t^3 in the local t in [0, 1]."""
    grid = np.arange(-_ERF_LIMIT, _ERF_LIMIT + _ERF_STEP / 2, _ERF_STEP)
    value = np.array([math.erf(x) for x in grid], dtype=np.float64)
    slope = (2.0 / math.sqrt(math.pi)) * np.exp(-(grid**2)) * _ERF_STEP
    v0, v1, s0, s1 = value[:-1], value[1:], slope[:-1], slope[1:]
    return np.stack([v0, s0, -3 * v0 - 2 * s0 + 3 * v1 - s1, 2 * v0 + s0 - 2 * v1 + s1], axis=1)


_ERF_CUBICS = _erf_cubics()


_ERF_C0, _ERF_C1, _ERF_C2, _ERF_C3 = (np.ascontiguousarray(_ERF_CUBICS[:, i]) for i in range(4))


def _erf(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """erf to ~2e-13 absolute: cubic Hermite interpolation with the exact derivative.

    numpy has no erf, and the tanh approximation of GELU would not match the reference
    (config ``hidden_act: gelu`` is the erf form). The interpolation error bound
    h**4 / 384 * max|erf^(4)| is below 1e-12 for h = 1/512, far under float32 resolution.
    """
    pos = np.clip(x, -_ERF_LIMIT, _ERF_LIMIT)
    pos += _ERF_LIMIT
    pos *= 1.0 / _ERF_STEP
    idx = pos.astype(np.intp)
    np.minimum(idx, len(_ERF_C0) - 1, out=idx)
    t = pos - idx
    result = np.take(_ERF_C3, idx)
    for coefficients in (_ERF_C2, _ERF_C1, _ERF_C0):
        result *= t
        result += np.take(coefficients, idx)
    return result


def _gelu(x: FloatArray) -> FloatArray:
    flat = x.reshape(-1)
    out = np.empty_like(flat)
    for start in range(0, flat.size, _ERF_BLOCK):
        wide = flat[start : start + _ERF_BLOCK].astype(np.float64)
        erf = _erf(wide * (1.0 / math.sqrt(2.0)))
        erf += 1.0
        erf *= wide
        erf *= 0.5
        out[start : start + _ERF_BLOCK] = erf
    return out.reshape(x.shape)


def _layer_norm(x: FloatArray, weight: FloatArray, bias: FloatArray, eps: float) -> FloatArray:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    out: FloatArray = centered / np.sqrt(var + np.float32(eps)) * weight + bias
    return out


def _add_layer_norm(
    x: FloatArray, residual: FloatArray, weight: FloatArray, bias: FloatArray, eps: float
) -> FloatArray:
    return _layer_norm(x + residual, weight, bias, eps)


@dataclass(frozen=True)
class _Linear:
    """``x @ W + b`` with the product summed exactly, rounded once to float32."""

    weight: _Grid  # (in, out), one step per output column; transposed so every call is x @ W
    bias: FloatArray

    @classmethod
    def from_weights(cls, weight: FloatArray, bias: FloatArray) -> _Linear:
        return cls(_Grid.of(np.ascontiguousarray(weight.T), axis=-2), bias)

    def __call__(self, x: FloatArray) -> FloatArray:
        wide = _exact_matmul(_Grid.of(x, axis=-1), self.weight)
        wide += self.bias
        out: FloatArray = wide.astype(np.float32)
        return out


class CompiledPath(Protocol):
    """Another way to compute the forward pass's layer products, attention, layer norms and GELU,
    with the same bits
    (``backends.models.kernels``)."""

    def layer(self, number: int) -> tuple[Callable[[FloatArray], FloatArray], ...]:
        """Layer ``number``'s QKV, attention output, intermediate and output products."""
        ...

    def gelu(self, x: FloatArray) -> FloatArray: ...

    def attend(self, qkv: FloatArray, heads: int) -> FloatArray | None:
        """``_Bert._attend`` of one text; ``None`` where it must run instead."""
        ...

    def add_layer_norm(
        self, x: FloatArray, residual: FloatArray, weight: FloatArray, bias: FloatArray, eps: float
    ) -> FloatArray:
        """``_layer_norm(x + residual, weight, bias, eps)``."""
        ...


SHORT_ROWS = 64
"""Rows (tokens of a batch) up to which a ``CompiledPath`` computes the layer products on its own
tiles; above, BLAS fills its tiles well and computes them."""


@dataclass(frozen=True)
class _Layer:
    qkv: _Linear  # query, key and value projections side by side: one matmul for all three
    attn_out: _Linear
    attn_norm: tuple[FloatArray, FloatArray]
    intermediate: _Linear
    output: _Linear
    out_norm: tuple[FloatArray, FloatArray]

    def linears(self) -> tuple[_Linear, _Linear, _Linear, _Linear]:
        return self.qkv, self.attn_out, self.intermediate, self.output


@dataclass(frozen=True)
class _Bert:
    tokenizer: Tokenizer
    word: FloatArray
    position: FloatArray
    token_type: FloatArray
    emb_norm: tuple[FloatArray, FloatArray]
    layers: tuple[_Layer, ...]
    heads: int
    eps: float
    max_tokens: int
    identity: EmbedderIdentity
    pooling: Literal["mean", "cls"] = "mean"
    """sentence-transformers' pooling: the mean of the tokens' states, or the [CLS] token's."""
    normalize: bool = True
    """Whether vectors are scaled to unit length (a ``Normalize`` module in the folder)."""
    compiled: list[CompiledPath] = field(default_factory=list, compare=False, repr=False)
    """The compiled path once set up (``backends.models.embedding.compile_forward_passes``)."""

    @property
    def compiled_path(self) -> CompiledPath | None:
        return self.compiled[0] if self.compiled else None

    def encode_batch(self, texts: Sequence[str], compiled: CompiledPath | None = None) -> FloatArray:
        """Unpadded: every text's real tokens are concatenated into one 2-D activation. With
        ``compiled``, the layers are computed there (the same bits).

        transformers pads and masks padded keys with the most negative float, so their
        softmax weight is exactly zero; attending over each text's own tokens only is the
        same computation without the padding work.
        """
        # One text (a query) is encoded on this thread: encode_batch hands even a single text
        # to the tokenizer's thread pool, which costs more than the encoding (1.3 ms vs 0.06 ms).
        encodings = [self.tokenizer.encode(texts[0])] if len(texts) == 1 else self.tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.intp)
        ids = np.concatenate([np.asarray(e.ids, dtype=np.intp) for e in encodings])
        types = np.concatenate([np.asarray(e.type_ids, dtype=np.intp) for e in encodings])
        positions = np.concatenate([np.arange(n, dtype=np.intp) for n in lengths])
        flat = _layer_norm(self.word[ids] + self.position[positions] + self.token_type[types], *self.emb_norm, self.eps)
        gelu = _gelu if compiled is None else compiled.gelu
        add_norm = _add_layer_norm if compiled is None else compiled.add_layer_norm
        for number, layer in enumerate(self.layers):
            linears = layer.linears() if compiled is None else compiled.layer(number)
            qkv = linears[0](flat)
            if len(lengths) == 1:
                context = self._attend_with(qkv, compiled)
            else:
                context = np.empty_like(flat)
                for start, end in itertools.pairwise(offsets):
                    context[start:end] = self._attend_with(qkv[start:end], compiled)
            # The rest of the layer works row by row: taken a block of rows at a time, its
            # intermediates stay in cache (a batch's whole ones run to hundreds of MB).
            for start in range(0, len(flat), _ROWS_PER_PASS):
                rows = slice(start, start + _ROWS_PER_PASS)
                hidden = add_norm(linears[1](context[rows]), flat[rows], *layer.attn_norm, self.eps)
                inner = gelu(linears[2](hidden))
                flat[rows] = add_norm(linears[3](inner), hidden, *layer.out_norm, self.eps)
        pooled: FloatArray | WideArray
        if self.pooling == "cls":
            pooled = flat[offsets[:-1]]
        else:
            pooled = np.add.reduceat(flat, offsets[:-1], axis=0) / np.asarray(lengths, dtype=np.float32)[:, None]
        if not self.normalize:
            return np.ascontiguousarray(pooled, dtype=np.float32)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
        out: FloatArray = (pooled / norms).astype(np.float32)
        return out

    def _attend_with(self, qkv: FloatArray, compiled: CompiledPath | None) -> FloatArray:
        context = None if compiled is None else compiled.attend(qkv, self.heads)
        return self._attend(qkv) if context is None else context

    def _attend(self, qkv: FloatArray) -> FloatArray:
        """Self-attention of one text's tokens: (tokens, 3 * hidden) -> (tokens, hidden)."""
        tokens = qkv.shape[0]
        head_dim = qkv.shape[1] // (3 * self.heads)
        q, k, v = qkv.reshape(tokens, 3, self.heads, head_dim).transpose(1, 2, 0, 3)  # each (heads, tokens, dim)
        context = np.empty((tokens, self.heads, head_dim), dtype=np.float32)
        group = max(1, _SCORES_PER_PASS // (tokens * tokens))
        for first in range(0, self.heads, group):
            heads = slice(first, first + group)
            wide = _exact_matmul(_Grid.of(q[heads], axis=-1), _Grid.of(k[heads].transpose(0, 2, 1), axis=-2))
            wide *= 1.0 / math.sqrt(head_dim)
            scores = wide.astype(np.float32)
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context[:, heads] = _exact_matmul(_Grid.of(scores, axis=-1), _Grid.of(v[heads], axis=-2)).transpose(1, 0, 2)
        return context.reshape(tokens, -1)
