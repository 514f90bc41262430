"""The LanceDB adapter on the fixture corpus: exactness of the flat mode, honesty of the ANN
modes (postfilter shortfalls and skipped unindexed rows are gaps), fresh generations."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest

from backends.ingest.corpus import METADATA_FIELDS, Chunk, Corpus, load_corpus
from backends.lancedb import LanceAdapter
from backends.lancedb.build import ANN_PROFILE, chunk_rows, chunk_text
from backends.lancedb.query import TABLE
from backends.models.embedding import EmbedderIdentity, MiniLMEmbedder
from rsc import (
    BackendUnavailable,
    CoverageClaim,
    Filter,
    FilterOp,
    FilterSupportClass,
    GapKind,
    IndexMissingError,
    Query,
    ScanRequest,
    ScanResult,
    ScoreKind,
)

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "fixtures" / "corpus" / "docs"
FACTS = ROOT / "fixtures" / "corpus" / "facts.json"
BENCH = ROOT / "benchmarks" / "results" / "filtered_vectors.json"
RSC_BY_MODE = {
    "vector_flat": "lancedb.flat_prefilter",
    "vector_ann_prefilter": "lancedb.ann_prefilter",
    "vector_ann_postfilter": "lancedb.ann_postfilter",
    "vector_exact_matrix": "lancedb.exact_matrix",
}

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus(CORPUS)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, corpus: Corpus) -> tuple[Path, str, list[tuple[int, int]]]:
    index_dir = tmp_path_factory.mktemp("lance") / "index"
    calls: list[tuple[int, int]] = []
    generation = LanceAdapter.build(corpus, index_dir, lambda done, total: calls.append((done, total)))
    return index_dir, generation, calls


@pytest.fixture(scope="module")
def adapter(built: tuple[Path, str, list[tuple[int, int]]]) -> LanceAdapter:
    return LanceAdapter.open(built[0])


def request(
    mode: str, text: str, *, k: int = 5, pushed: tuple[Filter, ...] = (), params: dict[str, Any] | None = None
) -> ScanRequest:
    return ScanRequest(
        obligation="o1",
        rsc_id=RSC_BY_MODE[mode],
        rsc_version="1.1.0",
        backend="lancedb",
        mode=mode,
        query=Query(text=text),
        k=k,
        pushed=pushed,
        params=params or {},
    )


def stored(adapter: LanceAdapter) -> tuple[list[dict[str, Any]], np.ndarray]:
    table = adapter.snapshot().table.to_arrow()
    rows = table.drop_columns(["vector"]).to_pylist()
    vectors = np.asarray(table.column("vector").to_pylist(), dtype=np.float32)
    return rows, vectors


def brute_force(adapter: LanceAdapter, text: str, filters: tuple[Filter, ...], k: int) -> list[tuple[str, float]]:
    rows, vectors = stored(adapter)
    keep = [i for i, row in enumerate(rows) if all(f.matches(json.loads(row["metadata_json"])) for f in filters)]
    query = MiniLMEmbedder().embed([text])[0]
    distances = 1.0 - vectors[keep] @ query
    ranked = sorted(zip(distances.tolist(), (rows[i]["chunk_id"] for i in keep), strict=True))
    return [(chunk_id, distance) for distance, chunk_id in ranked[:k]]


# -- contracts --------------------------------------------------------------------------------


def test_contracts_declare_one_honest_class_per_mode() -> None:
    contracts = {c.rsc_id: c for c in LanceAdapter.contracts()}
    assert set(contracts) == set(RSC_BY_MODE.values())
    expected_support = {
        "lancedb.flat_prefilter": FilterSupportClass.NATIVE_PREFILTER_EXACT,
        "lancedb.ann_prefilter": FilterSupportClass.NATIVE_FILTERED_ANN,
        "lancedb.ann_postfilter": FilterSupportClass.POSTFILTER_ONLY,
        "lancedb.exact_matrix": FilterSupportClass.NATIVE_PREFILTER_EXACT,
    }
    for mode, rsc_id in RSC_BY_MODE.items():
        contract = contracts[rsc_id]
        assert contract.mode == mode and contract.backend == "lancedb"
        assert contract.model_calls == 1
        assert contract.score_kind is ScoreKind.COSINE_DISTANCE and contract.ordering == "distance_asc"
        assert contract.query_parts == ("text", "vector")  # the query text, or a caller vector
        assert set(contract.filters) == {*METADATA_FIELDS, "doc_id", "chunk_id"}
        for name, support in contract.filters.items():
            assert support.support is expected_support[rsc_id]
            assert (FilterOp.RANGE in support.ops) == (name == "date")
    assert contracts["lancedb.flat_prefilter"].coverage.claim is CoverageClaim.EXHAUSTIVE_TOPK
    assert contracts["lancedb.exact_matrix"].coverage.claim is CoverageClaim.EXHAUSTIVE_TOPK


def test_ann_recall_is_the_committed_benchmark_figure() -> None:
    measured = json.loads(BENCH.read_text(encoding="utf-8"))
    ann = next(c for c in LanceAdapter.contracts() if c.rsc_id == "lancedb.ann_prefilter")
    assert ann.coverage.claim is CoverageClaim.APPROXIMATE
    assert ann.coverage.recall == measured["rsc_recall"]
    assert all(f.recall == measured["rsc_recall"] and f.profile == ANN_PROFILE for f in ann.filters.values())
    assert measured["rsc_recall"] <= measured["ann_prefilter_recall_min"]
    assert measured["run_id"] in ann.description


# -- build, generation, statistics --------------------------------------------------------------


def test_build_reports_progress_generation_and_statistics(
    built: tuple[Path, str, list[tuple[int, int]]], adapter: LanceAdapter, corpus: Corpus
) -> None:
    _, generation, calls = built
    rows = len(corpus.chunks)
    assert calls[-1] == (rows, rows)
    assert generation == adapter.generation()
    assert f":indexed={rows}:unindexed=0:" in generation
    stats = adapter.statistics()
    assert stats.backend == "lancedb" and stats.rows == rows
    assert sum(stats.value_counts["doc_type"].values()) == sum(1 for c in corpus.chunks if "doc_type" in c.metadata)
    assert "ANNIvfPartition" in adapter.native_plan(request("vector_ann_prefilter", "x"))
    assert "ANNIvfPartition" in adapter.native_plan(request("vector_ann_postfilter", "x"))
    flat_plan = adapter.native_plan(request("vector_flat", "x"))
    assert "KNNVectorDistance" in flat_plan and "ANN" not in flat_plan


async def test_open_fails_closed(tmp_path: Path, built: tuple[Path, str, list[tuple[int, int]]]) -> None:
    with pytest.raises(IndexMissingError):
        LanceAdapter.open(tmp_path)

    class OtherWeights(MiniLMEmbedder):
        @property
        def identity(self) -> EmbedderIdentity:
            return EmbedderIdentity(name="other", dims=384, weights_sha256="sha256:" + "0" * 64)

    # Other weights are found at the first query, not at open (a lexical plan loads no model).
    other = LanceAdapter.open(built[0], embedder=OtherWeights())
    with pytest.raises(IndexMissingError, match="rebuild"):
        await other.scan(request("vector_flat", "x"))


# -- scans --------------------------------------------------------------------------------------


def paraphrases() -> list[dict[str, Any]]:
    scenarios = json.loads(FACTS.read_text(encoding="utf-8"))["scenarios"]
    items = scenarios.values() if isinstance(scenarios, dict) else scenarios
    return [s for s in items if s.get("kind") == "vector_paraphrase"]


async def test_conceptual_paraphrase_finds_the_chunk(adapter: LanceAdapter) -> None:
    found = 0
    cases = paraphrases()
    assert cases, "facts.json has no vector_paraphrase scenario"
    for case in cases:
        result = await adapter.scan(request("vector_flat", case["query"], k=5))
        assert result.model_calls == 1
        docs = [h.doc_id for h in result.hits]
        found += case["doc"] in docs
    # Every paraphrase shares no content word with its chunk; the embedding must carry most.
    assert found >= len(cases) - 1
    result = await adapter.scan(request("vector_flat", "the broker ran out of memory and was killed", k=3))
    assert result.hits[0].doc_id == "incident-2024-11-28-idle-connection-oom"


async def test_hits_carry_custody_in_distance_order(adapter: LanceAdapter) -> None:
    result = await adapter.scan(request("vector_ann_prefilter", "fsync policy and power loss", k=7))
    assert isinstance(result, ScanResult) and result.model_calls == 1
    assert result.generation == adapter.generation()
    assert [h.custody.rank for h in result.hits] == list(range(1, 8))
    scores = [h.custody.score for h in result.hits]
    assert scores == sorted(scores)
    for hit in result.hits:
        assert hit.custody.score_kind is ScoreKind.COSINE_DISTANCE
        assert hit.custody.rsc == "lancedb.ann_prefilter@1.1.0"
        assert hit.custody.index_generation == result.generation
        assert hit.custody.source_hash.startswith("sha256:")
        assert hit.metadata["doc_id"] == hit.doc_id


async def test_flat_prefilter_is_the_exact_filtered_topk(adapter: LanceAdapter) -> None:
    text = "acknowledged writes lost after a crash"
    filters = (
        Filter(field="doc_type", op=FilterOp.IN, values=("incident", "blog", "mail")),
        Filter(field="date", op=FilterOp.RANGE, gte="2024-01-01", lte="2025-12-31"),
    )
    result = await adapter.scan(request("vector_flat", text, k=8, pushed=filters))
    expected = brute_force(adapter, text, filters, 8)
    assert [h.chunk_id for h in result.hits] == [chunk_id for chunk_id, _ in expected]
    for hit, (_, distance) in zip(result.hits, expected, strict=True):
        assert abs(hit.custody.score - distance) <= 1e-5
        assert all(f.matches(hit.metadata) for f in filters)
    assert result.total_matches == sum(
        1 for row in stored(adapter)[0] if all(f.matches(json.loads(row["metadata_json"])) for f in filters)
    )
    assert not result.gaps


async def test_filter_values_are_data_not_sql(adapter: LanceAdapter) -> None:
    sneaky = Filter(field="doc_type", value="adr' OR '1'='1")
    result = await adapter.scan(request("vector_flat", "storage", pushed=(sneaky,)))
    assert result.hits == () and result.total_matches == 0
    typed = Filter(field="version", value=3)  # stored versions are strings: never equal
    assert (await adapter.scan(request("vector_flat", "storage", pushed=(typed,)))).hits == ()


@pytest.mark.parametrize("as_residual", [True, False], ids=["residual", "pushed"])
async def test_postfilter_shortfall_is_a_gap(adapter: LanceAdapter, corpus: Corpus, as_residual: bool) -> None:
    text = "the broker ran out of memory and was killed"
    selective = (Filter(field="doc_type", value="changelog"),)
    placed: dict[str, Any] = {"residual": selective} if as_residual else {"pushed": selective}
    post = request("vector_ann_postfilter", text, k=10).model_copy(update=placed)
    assert "LanceRead" in adapter.native_plan(post) and "FilterExec: doc_type" in adapter.native_plan(post)
    result = await adapter.scan(post)
    assert len(result.hits) < 10
    assert all(h.metadata["doc_type"] == "changelog" for h in result.hits)
    (gap,) = result.gaps
    assert gap.kind is GapKind.POSTFILTER_ONLY_FILTER and gap.backend == "lancedb"
    assert f"{len(result.hits)} of 10 candidates survived" in gap.detail
    changelog_rows = sum(1 for c in corpus.chunks if c.metadata.get("doc_type") == "changelog")
    assert f"{changelog_rows} rows in table version" in gap.detail
    prefiltered = await adapter.scan(request("vector_ann_prefilter", text, k=10, pushed=selective))
    assert len(prefiltered.hits) == 10 and not prefiltered.gaps
    unfiltered = await adapter.scan(request("vector_ann_postfilter", text, k=10))
    assert len(unfiltered.hits) == 10 and not unfiltered.gaps


async def test_residual_filter_in_a_prefilter_mode_is_applied_and_reported(adapter: LanceAdapter) -> None:
    residual = (Filter(field="doc_type", value="changelog"),)
    text = "the broker ran out of memory and was killed"
    plain = request("vector_flat", text, k=10)
    result = await adapter.scan(plain.model_copy(update={"residual": residual}))
    unfiltered = await adapter.scan(plain)
    kept = [h.chunk_id for h in unfiltered.hits if h.metadata.get("doc_type") == "changelog"]
    assert [h.chunk_id for h in result.hits] == kept
    assert all(h.custody.filters_residual == ("doc_type = 'changelog'",) for h in result.hits)
    (gap,) = result.gaps
    assert gap.kind is GapKind.POSTFILTER_ONLY_FILTER


async def test_unknown_mode_and_missing_text_are_backend_errors(adapter: LanceAdapter) -> None:
    bad = request("vector_flat", "x").model_copy(update={"mode": "fts"})
    with pytest.raises(BackendUnavailable):
        await adapter.scan(bad)
    ids_only = request("vector_flat", "x").model_copy(update={"query": Query(ids=("adr-0002",))})
    with pytest.raises(BackendUnavailable):
        await adapter.scan(ids_only)


# -- versions written by another handle ---------------------------------------------------------


async def test_new_version_from_another_handle_is_seen_and_unindexed_rows_reported(
    tmp_path: Path, built: tuple[Path, str, list[tuple[int, int]]], corpus: Corpus
) -> None:
    index_dir = tmp_path / "index"
    shutil.copytree(built[0], index_dir)
    adapter = LanceAdapter.open(index_dir)
    before = adapter.generation()
    rows_before = adapter.statistics().rows
    text = "Zebra migration telemetry shows herds crossing the river at dawn."
    template = corpus.chunks[0]
    late = Chunk(
        **{
            **template.model_dump(),
            "chunk_id": "late-note#0",
            "doc_id": "late-note",
            "title": "Late note",
            "section": "",
            "text": text,
            "metadata": {"doc_id": "late-note", "doc_type": "mail"},
        }
    )
    embedder = MiniLMEmbedder()
    writer = lancedb.connect(str(index_dir / "lancedb")).open_table(TABLE)
    writer.add(chunk_rows([late], embedder.embed([chunk_text(late)]), corpus.revision, 384))

    after = adapter.generation()
    assert after != before
    assert ":unindexed=1:" in after
    assert adapter.statistics().rows == rows_before + 1

    query = "herds of zebras crossing a river"
    for mode in ("vector_flat", "vector_ann_prefilter"):
        result = await adapter.scan(request(mode, query, k=3))
        assert result.hits[0].chunk_id == "late-note#0", mode
        assert result.generation == after and not result.gaps

    fast = await adapter.scan(request("vector_ann_prefilter", query, k=3, params={"fast_search": True}))
    assert "late-note#0" not in [h.chunk_id for h in fast.hits]
    (gap,) = fast.gaps
    assert gap.kind is GapKind.UNINDEXED_ROWS_SKIPPED
    assert f"skipped 1 of {rows_before + 1} rows" in gap.detail
