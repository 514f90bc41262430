"""A second BERT-family embedding model for the tests, written deterministically into a folder
in the sentence-transformers layout: random weights from a fixed seed (safetensors' numpy API),
a WordPiece tokenizer over part of MiniLM's vocabulary (the ``tokenizers`` library), 48
dimensions instead of 384, CLS pooling instead of the mean, a Normalize module, a 64-token
window, and e5-style prompts ``"query: "`` / ``"passage: "``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer
from tokenizers.processors import TemplateProcessing

from backends.models.embedding import default_model_dir

HIDDEN = 48
LAYERS = 2
HEADS = 4
INTERMEDIATE = 96
POSITIONS = 128
MAX_SEQ = 64
SEED = 26
VOCAB_WORDS = 6000
"""MiniLM's first word pieces kept (special tokens, characters, the commonest words)."""


def _vocab() -> dict[str, int]:
    folder = default_model_dir()
    assert folder is not None, "MiniLM's package provides the word pieces"
    pieces = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    # The commonest words, then every one-character continuation so that any word tokenizes.
    kept = pieces[:VOCAB_WORDS] + [p for p in pieces[VOCAB_WORDS:] if p.startswith("##") and len(p) == 3]
    return {piece: i for i, piece in enumerate(kept)}


def _tokenizer(vocab: dict[str, int]) -> Tokenizer:
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = BertPreTokenizer()
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return tokenizer


def _weights(vocab_size: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    def ones_near(n: int) -> np.ndarray:
        return (1.0 + rng.standard_normal(n) * 0.05).astype(np.float32)

    tensors: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": normal(vocab_size, HIDDEN),
        "embeddings.position_embeddings.weight": normal(POSITIONS, HIDDEN),
        "embeddings.token_type_embeddings.weight": normal(2, HIDDEN),
        "embeddings.LayerNorm.weight": ones_near(HIDDEN),
        "embeddings.LayerNorm.bias": normal(HIDDEN),
    }
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        for name in ("query", "key", "value"):
            tensors[f"{p}.attention.self.{name}.weight"] = normal(HIDDEN, HIDDEN)
            tensors[f"{p}.attention.self.{name}.bias"] = normal(HIDDEN)
        tensors[f"{p}.attention.output.dense.weight"] = normal(HIDDEN, HIDDEN)
        tensors[f"{p}.attention.output.dense.bias"] = normal(HIDDEN)
        tensors[f"{p}.attention.output.LayerNorm.weight"] = ones_near(HIDDEN)
        tensors[f"{p}.attention.output.LayerNorm.bias"] = normal(HIDDEN)
        tensors[f"{p}.intermediate.dense.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[f"{p}.intermediate.dense.bias"] = normal(INTERMEDIATE)
        tensors[f"{p}.output.dense.weight"] = normal(HIDDEN, INTERMEDIATE)
        tensors[f"{p}.output.dense.bias"] = normal(HIDDEN)
        tensors[f"{p}.output.LayerNorm.weight"] = ones_near(HIDDEN)
        tensors[f"{p}.output.LayerNorm.bias"] = normal(HIDDEN)
    return tensors


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_tiny_bert(folder: Path) -> Path:
    """The model's folder, written at ``folder``; the same bytes every time."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = _vocab()
    _tokenizer(vocab).save(str(folder / "tokenizer.json"))
    save_file(_weights(len(vocab)), str(folder / "model.safetensors"))
    _write_json(
        folder / "config.json",
        {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "hidden_act": "gelu",
            "hidden_size": HIDDEN,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "intermediate_size": INTERMEDIATE,
            "max_position_embeddings": POSITIONS,
            "type_vocab_size": 2,
            "vocab_size": len(vocab),
            "layer_norm_eps": 1e-12,
            "position_embedding_type": "absolute",
        },
    )
    _write_json(
        folder / "modules.json",
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ],
    )
    _write_json(
        folder / "1_Pooling" / "config.json",
        {
            "word_embedding_dimension": HIDDEN,
            "pooling_mode_cls_token": True,
            "pooling_mode_mean_tokens": False,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        },
    )
    _write_json(folder / "sentence_bert_config.json", {"max_seq_length": MAX_SEQ, "do_lower_case": False})
    _write_json(
        folder / "config_sentence_transformers.json",
        {"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": None},
    )
    return folder
