"""Embedders read from a local folder in the sentence-transformers layout (bge, e5, gte, a
MiniLM copy, a model of one's own), run on RACE's own BERT encoder (``backends.models.encoder``).

The folder holds what ``SentenceTransformer.save`` writes: ``config.json`` (a BERT encoder:
``model_type`` ``bert``, erf GELU, absolute positions), ``tokenizer.json``, the weights as
``model.safetensors``, and optionally ``modules.json`` with its ``1_Pooling/config.json``
(mean or CLS pooling) and a ``Normalize`` module, ``sentence_bert_config.json``
(``max_seq_length``) and ``config_sentence_transformers.json`` (``prompts``). Without
``modules.json`` the pooling is the mean and vectors are not normalised, as
sentence-transformers does for a bare transformers folder.

Prefixes: the query prefix is the folder's ``prompts["query"]``, the document prefix its
``prompts["document"]`` (or ``"passage"``); a corpus schema or catalog may state either
explicitly (``query_prompt``, ``document_prompt``), which wins over the folder's. e5 wants
``"query: "``/``"passage: "``; bge's query instruction is a query prompt with no document one.

The identity is the folder's weights (sha256 of ``model.safetensors``) and the sha256 of the
canonical JSON of everything else that changes a vector: the architecture numbers, the
tokenizer file, pooling, normalisation, maximum length and both prefixes. Nothing is ever
downloaded: a folder that is not there, or holds another architecture or another pooling
(max, weighted mean, a Dense layer), is an ``InputError`` naming the folder and the file.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tokenizers import Tokenizer

from backends.ingest.chunking import TokenCounter
from backends.models.embedding import (
    _BATCH,
    _SINGLE_THREAD_BLAS,
    Embedder,
    MiniLMEmbedder,
    _sha256_file,
    loaded,
    read_bert,
    token_counter,
)
from backends.models.encoder import FloatArray, _Bert
from rsc import Contract, EmbedderIdentity, InputError, canonical_json

_REQUIRED = ("config.json", "tokenizer.json", "model.safetensors")
_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
_ARCHITECTURE = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "layer_norm_eps",
    "hidden_act",
    "max_position_embeddings",
    "type_vocab_size",
    "vocab_size",
)
_DEFAULT_MAX_TOKENS = 512


def _json(path: Path, where: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path.name} cannot be read as JSON ({exc})", where=str(where)) from exc


class FolderSettings:
    """What a folder says about its embedding, read and checked once (no weights loaded)."""

    def __init__(self, folder: Path, *, query_prompt: str | None = None, document_prompt: str | None = None) -> None:
        if not folder.is_dir():
            raise InputError("embedder folder does not exist (nothing is downloaded)", where=str(folder))
        missing = [name for name in _REQUIRED if not (folder / name).is_file()]
        if missing:
            raise InputError(
                f"embedder folder lacks {', '.join(missing)} (sentence-transformers layout, safetensors weights)",
                where=str(folder),
            )
        self.folder = folder
        self.config: dict[str, Any] = _json(folder / "config.json", folder)
        architecture = self.config.get("model_type")
        if architecture != "bert" or self.config.get("hidden_act") != "gelu":
            raise InputError(
                f"config.json: model_type {architecture!r} with hidden_act {self.config.get('hidden_act')!r} is not "
                "an architecture RACE's encoder runs (BERT, erf GELU); pass query vectors from the caller instead",
                where=str(folder),
            )
        if self.config.get("position_embedding_type", "absolute") != "absolute":
            raise InputError("config.json: only absolute position embeddings are supported", where=str(folder))
        self.pooling, self.normalize = self._modules()
        self.max_tokens = self._max_tokens()
        prompts = self._prompts()
        self.query_prompt = query_prompt if query_prompt is not None else prompts.get("query", "")
        self.document_prompt = (
            document_prompt if document_prompt is not None else prompts.get("document", prompts.get("passage", ""))
        )

    def _modules(self) -> tuple[Literal["mean", "cls"], bool]:
        path = self.folder / "modules.json"
        if not path.is_file():
            return "mean", False
        modules = _json(path, self.folder)
        kinds = [str(m.get("type", "")) for m in modules] if isinstance(modules, list) else []
        other = [k for k in kinds if k not in (_TRANSFORMER, _POOLING, _NORMALIZE)]
        if not kinds or kinds[0] != _TRANSFORMER or other:
            raise InputError(f"modules.json: modules {kinds} are not transformer, pooling, normalize", where=str(path))
        pooling: Literal["mean", "cls"] = "mean"
        for module in modules:
            if module.get("type") == _POOLING:
                config = _json(self.folder / str(module.get("path", "")) / "config.json", self.folder)
                modes = sorted(k for k, v in config.items() if k.startswith("pooling_mode_") and v is True)
                if modes == ["pooling_mode_cls_token"]:
                    pooling = "cls"
                elif modes != ["pooling_mode_mean_tokens"]:
                    raise InputError(f"pooling {modes} is not supported (mean or CLS)", where=str(path))
        return pooling, _NORMALIZE in kinds

    def _max_tokens(self) -> int:
        limit = int(self.config.get("max_position_embeddings", _DEFAULT_MAX_TOKENS))
        path = self.folder / "sentence_bert_config.json"
        if path.is_file():
            value = _json(path, self.folder).get("max_seq_length")
            if isinstance(value, int) and value > 0:
                return min(value, limit)
        return min(_DEFAULT_MAX_TOKENS, limit)

    def _prompts(self) -> dict[str, str]:
        path = self.folder / "config_sentence_transformers.json"
        if not path.is_file():
            return {}
        prompts = _json(path, self.folder).get("prompts") or {}
        return {str(k): str(v) for k, v in prompts.items()} if isinstance(prompts, dict) else {}

    def config_sha256(self) -> str:
        """sha256 of the canonical JSON of everything but the weights that changes a vector."""
        described = {
            "architecture": {k: self.config.get(k) for k in _ARCHITECTURE},
            "tokenizer_sha256": _sha256_file(self.folder / "tokenizer.json"),
            "pooling": self.pooling,
            "normalize": self.normalize,
            "max_tokens": self.max_tokens,
            "query_prompt": self.query_prompt,
            "document_prompt": self.document_prompt,
        }
        return "sha256:" + hashlib.sha256(canonical_json(described)).hexdigest()

    def token_counter(self) -> TokenCounter:
        """The folder's tokenizer for the chunker: the document prefix's tokens count as special
        ones, since every chunk's embedded text carries it."""
        tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        specials = tokenizer.num_special_tokens_to_add(False)
        prefix = len(tokenizer.encode(self.document_prompt, add_special_tokens=False).ids)

        def offsets(text: str) -> list[tuple[int, int]]:
            encoding = tokenizer.encode(text, add_special_tokens=False)
            return [(int(a), int(b)) for a, b in encoding.offsets]

        return TokenCounter(offsets=offsets, max_tokens=self.max_tokens, specials=specials + prefix)


_LOADED: dict[tuple[Path, str, str, str], _Bert] = {}
_LOADED_LOCK = threading.Lock()


class FolderEmbedder(MiniLMEmbedder):
    """A BERT-family model from a folder, loaded at first use and kept per process. Documents
    are embedded with the document prefix (``embed``), queries with the query prefix
    (``embed_queries``)."""

    def __init__(
        self,
        folder: Path,
        *,
        name: str | None = None,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
    ) -> None:
        folder = folder.expanduser().resolve()
        self.settings = FolderSettings(folder, query_prompt=query_prompt, document_prompt=document_prompt)
        super().__init__(folder)
        self.name = name or folder.name

    def _model(self) -> _Bert:
        if self._bert is not None:
            return self._bert
        s = self.settings
        key = (s.folder, self.name, s.query_prompt, s.document_prompt)
        with _LOADED_LOCK:
            model = _LOADED.get(key)
            if model is None:
                model = read_bert(
                    s.folder,
                    s.config,
                    name=self.name,
                    max_tokens=s.max_tokens,
                    hint="check the folder's files",
                    pooling=s.pooling,
                    normalize=s.normalize,
                    config_sha256=s.config_sha256(),
                    error=InputError,
                )
                _LOADED[key] = loaded(model)
        self._bert = model
        return model

    def source(self) -> dict[str, str]:
        """What opens this embedder again (an index manifest keeps it beside the identity)."""
        s = self.settings
        return {
            "path": str(s.folder),
            "name": self.name,
            "query_prompt": s.query_prompt,
            "document_prompt": s.document_prompt,
        }

    def embed(self, texts: Sequence[str]) -> FloatArray:
        return self._prefixed(texts, self.settings.document_prompt)

    def embed_queries(self, texts: Sequence[str]) -> FloatArray:
        return self._prefixed(texts, self.settings.query_prompt)

    def _prefixed(self, texts: Sequence[str], prompt: str) -> FloatArray:
        model = self._model()
        dims = model.identity.dims
        out = np.empty((len(texts), dims), dtype=np.float32)
        with _SINGLE_THREAD_BLAS:
            for start in range(0, len(texts), _BATCH):
                batch = [prompt + t for t in texts[start : start + _BATCH]]
                out[start : start + _BATCH] = model.encode_batch(batch, model.compiled_path)
        return out


def embedder_from_source(source: dict[str, Any]) -> FolderEmbedder:
    """The folder embedder an index manifest's ``embedder_source`` names."""
    return FolderEmbedder(
        Path(str(source["path"])),
        name=str(source["name"]),
        query_prompt=str(source.get("query_prompt", "")),
        document_prompt=str(source.get("document_prompt", "")),
    )


class CallerVectorsOnly:
    """An embedder RACE cannot run, known by its identity alone: a table built with it is
    searched only with query vectors the caller brings (``Query.vector``)."""

    def __init__(self, identity: EmbedderIdentity) -> None:
        self._identity = identity

    @property
    def identity(self) -> EmbedderIdentity:
        return self._identity

    def embed(self, texts: Sequence[str]) -> FloatArray:
        raise InputError(
            f"embedder {self._identity.describe()} does not run in RACE: pass the query's 'vector' and 'embedder'",
            where=self._identity.name,
        )


def embedder_token_counter(embedder: object) -> TokenCounter | None:
    """The tokenizer and window of the model an embedder runs, for the chunker and the
    truncation counts (``None`` for an embedder whose tokenizer RACE does not know)."""
    if isinstance(embedder, FolderEmbedder):
        return embedder.settings.token_counter()
    if isinstance(embedder, MiniLMEmbedder):
        return token_counter(embedder._model_dir)
    return None


def source_of(embedder: object) -> dict[str, str] | None:
    """What an index manifest keeps to open a folder embedder again (``None`` for MiniLM)."""
    return embedder.source() if isinstance(embedder, FolderEmbedder) else None


def built_embedder(manifest: dict[str, Any]) -> Embedder:
    """The embedder an index was built with, by its manifest: the folder it names, else MiniLM."""
    source = manifest.get("embedder_source")
    return embedder_from_source(source) if isinstance(source, dict) else MiniLMEmbedder()


def caller_vectors_only(contract: Contract, embedder: object) -> Contract:
    """An attached index's contract as it stands, or, when its embedder is one RACE cannot run,
    saying that query vectors come from the caller alone and that no model call is made."""
    if not isinstance(embedder, CallerVectorsOnly):
        return contract
    said = (
        f" Query vectors come from the caller alone: RACE does not run {embedder.identity.describe()}, so a "
        "query without a 'vector' of that embedder is refused (no model calls)."
    )
    return Contract.model_validate(
        {**contract.model_dump(mode="json"), "model_calls": 0, "description": contract.description + said}
    )
