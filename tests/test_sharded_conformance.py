"""The backend conformance suite (tests/backends/test_conformance.py) over sharded instances: the
bundled corpus split into the shards of fixtures/sharded/instances.json, as tantivy indexes and
as LanceDB tables, each served by a ``ShardedAdapter`` named after its kind (so the suite's
samples, keyed by the kind's contract ids, apply). The LanceDB shards reuse the vectors of the
session's index (the same MiniLM vectors, embedded once)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from backends import Adapter, load_corpus
from backends.lancedb import LanceAdapter
from backends.lancedb.build import chunk_text
from backends.lancedb.query import VECTOR
from backends.models.embedding import FloatArray, MiniLMEmbedder
from backends.sharding.sharded import ShardedAdapter
from backends.tantivy import TantivyAdapter
from tests.backends.test_conformance import (  # noqa: F401 - collected here over the sharded adapters
    test_every_contract_has_a_sample_and_names_its_backend,
    test_every_operator_is_applied_as_declared_or_declared_impossible,
    test_filter_support_classes_are_honest,
    test_ordering_score_kind_model_calls_and_custody,
    test_random_access_scores_named_rows_as_sorted_access_does,
    test_same_request_same_result,
    test_sorted_access_is_the_exact_top_d,
)
from tests.conftest import FIXTURES
from tests.test_sharded import SPEC, _part


class _Seeded(MiniLMEmbedder):
    """MiniLM with the session index's chunk vectors already known, by the text they embed."""

    def __init__(self, known: dict[str, FloatArray]) -> None:
        super().__init__()
        self._known = known

    def embed(self, texts: Sequence[str]) -> FloatArray:
        if texts and all(t in self._known for t in texts):
            return np.stack([self._known[t] for t in texts])
        return super().embed(texts)


@pytest.fixture(scope="module")
def sharded(index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Adapter]:
    spec = SPEC["bm25"]
    corpus = load_corpus(FIXTURES / spec["corpus"])
    table = LanceAdapter.open(index_dir).snapshot().table.search().select(["chunk_id", VECTOR]).limit(None).to_arrow()
    by_id = dict(zip(table.column("chunk_id").to_pylist(), table.column(VECTOR).to_pylist(), strict=True))
    embedder = _Seeded({chunk_text(c): np.asarray(by_id[c.chunk_id], dtype=np.float32) for c in corpus.chunks})
    root = tmp_path_factory.mktemp("sharded-conformance")
    tantivy, lance = [], []
    for label, docs in spec["shards"].items():
        part = _part(corpus, docs, label)
        TantivyAdapter.build(part, root / label)
        LanceAdapter.build(part, root / label, embedder=embedder)
        tantivy.append(TantivyAdapter.open(root / label))
        lance.append(LanceAdapter.open(root / label, embedder=embedder))
    return {"tantivy": ShardedAdapter("tantivy", tantivy), "lancedb": ShardedAdapter("lancedb", lance)}


@pytest.fixture(params=["tantivy", "lancedb"])
def adapter(request: pytest.FixtureRequest, sharded: dict[str, Adapter]) -> Adapter:
    return sharded[str(request.param)]
