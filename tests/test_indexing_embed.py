"""Index embedding: each distinct text embedded once, copies sharing its vector, and the same
bits from one process, from BLAS threads and from a pool of worker processes as from the
model called on each text alone."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from backends.models import embed_batch
from backends.models.embed_batch import (
    POOL_MIN_TEXTS,
    DistinctTexts,
    Parallel,
    embed_distinct,
    embed_texts,
    length_batches,
)
from backends.models.embedding import EmbedderIdentity, FloatArray, MiniLMEmbedder
from tests.conftest import FIXTURES

_SENTENCES: list[str] = json.loads((FIXTURES / "embeddings" / "minilm_reference.json").read_text())["sentences"]
TEXTS = [
    "is TLS enough against the SCRAM bypass",
    " ".join(_SENTENCES[:-1]),
    "the broker ran out of memory and was killed",
    "is TLS enough against the SCRAM bypass",  # a copy
    "x",
    _SENTENCES[-1],  # past the model's 256 word pieces: truncated
    " ".join(_SENTENCES[:-1]),  # a copy
]


class Recorder:
    def __init__(self) -> None:
        self.model = MiniLMEmbedder()
        self.calls: list[list[str]] = []

    @property
    def identity(self) -> EmbedderIdentity:
        return self.model.identity

    def embed(self, texts: Sequence[str]) -> FloatArray:
        self.calls.append(list(texts))
        return self.model.embed(texts)


@pytest.fixture(scope="module")
def alone() -> list[bytes]:
    model = MiniLMEmbedder()
    return [model.embed([t])[0].tobytes() for t in TEXTS]


def test_distinct_texts_index_every_copy() -> None:
    distinct = DistinctTexts(TEXTS)
    assert distinct.texts == [TEXTS[0], TEXTS[1], TEXTS[2], TEXTS[4], TEXTS[5]]
    assert distinct.slots == [0, 1, 2, 0, 3, 4, 1]


def test_each_distinct_text_is_embedded_once_and_copies_share_its_vector(alone: list[bytes]) -> None:
    recorder = Recorder()
    vectors, embedded = embed_distinct(TEXTS, recorder)
    assert embedded == 5
    assert sorted(t for call in recorder.calls for t in call) == sorted(set(TEXTS))
    assert [row.tobytes() for row in vectors] == alone


def test_known_vectors_are_not_embedded_again(alone: list[bytes]) -> None:
    recorder = Recorder()
    first, _ = embed_distinct(TEXTS[:3], recorder)
    from backends.models.embed_batch import text_key

    known = {text_key(t): first[i] for i, t in enumerate(TEXTS[:3])}
    recorder.calls.clear()
    vectors, embedded = embed_distinct(TEXTS, recorder, known=known)
    assert embedded == 2
    assert sorted(t for call in recorder.calls for t in call) == sorted({TEXTS[4], TEXTS[5]})
    assert [row.tobytes() for row in vectors] == alone


def test_batches_are_sorted_by_token_length() -> None:
    model = MiniLMEmbedder()
    tokenizer = model._model().tokenizer
    lengths = [len(e.ids) for e in tokenizer.encode_batch(TEXTS)]
    batches = length_batches(TEXTS, model, size=3)
    order = [i for batch in batches for i in batch]
    assert sorted(order) == list(range(len(TEXTS)))
    assert [lengths[i] for i in order] == sorted(lengths)
    assert [len(b) for b in batches] == [3, 3, 1]


@pytest.mark.parametrize("parallel", ["serial", "blas", "pool", "auto"])
def test_every_way_of_embedding_gives_the_same_bits(alone: list[bytes], parallel: Parallel) -> None:
    vectors = embed_texts(TEXTS, MiniLMEmbedder(), parallel=parallel)
    assert vectors.dtype == np.float32
    assert [row.tobytes() for row in vectors] == alone


def test_a_build_of_many_texts_sets_up_the_compiled_path_with_the_same_bits() -> None:
    """From ``POOL_MIN_TEXTS`` texts on, a build sets up the compiled forward pass (here, or in
    each worker as it starts) when numba is installed; the vectors are numpy's bits either way."""
    pytest.importorskip("numba")
    lines = (FIXTURES / "realtext" / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
    # Windows of 6 to 30 words: batches of 32 texts have hundreds of rows, and stay cheap.
    texts = [" ".join(json.loads(line)["text"].split()[: 6 + i % 25]) for i, line in enumerate(lines)][:POOL_MIN_TEXTS]
    assert len(set(texts)) == POOL_MIN_TEXTS
    model = MiniLMEmbedder()._model()
    expected = model.encode_batch(texts[:48], None).tobytes() + model.encode_batch(texts[48:], None).tobytes()
    vectors = embed_texts(texts, MiniLMEmbedder(), parallel="serial")
    assert vectors.tobytes() == expected
    assert model.compiled_path is not None
    embed_batch._start_worker(None)  # what each worker of the pool runs first
    assert embed_batch._WORKER is not None and embed_batch._WORKER._model().compiled_path is not None
