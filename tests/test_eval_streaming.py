"""The streaming evaluation (``race.evaluation.streaming``): documents from chunk hits (MaxP, read
until k documents), memory flat in the number of queries, bypassing the receipt cache, resumable
from its state file, TREC runs that ir-measures scores as the report does, ir-measures syntax."""

from __future__ import annotations

import copy
import json
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from race.evaluation import stats
from race.evaluation.evaluate import EvalQuery, Judgment
from race.evaluation.stats import MEASURES, EvalReport, Interval, bootstraps, sign_flip_tests
from race.evaluation.streaming import default_k, documents, evaluate, parse_measures
from race.receipt import Receipt
from rsc import InputError, canonical_json
from tests.conftest import FIXTURES

SHOWCASE = FIXTURES / "golden" / "receipts" / "showcase.receipt.json"


def _receipt_data(chunks: int, per_doc: int) -> dict[str, Any]:
    """A receipt of ``chunks`` evidence items, ``per_doc`` consecutive chunks of each document."""
    data: dict[str, Any] = json.loads(SHOWCASE.read_text())
    data["lineage"] = {"id": "test", "mode": "live"}
    items = sorted(data["evidence"], key=lambda e: e["rank"])
    evidence = []
    for i in range(chunks):
        item = copy.deepcopy(items[i % len(items)])
        item["rank"] = i + 1
        item["hits"][0]["doc_id"] = f"d{i // per_doc:03d}"
        evidence.append(item)
    data["evidence"] = evidence
    return data


class Fake:
    """An engine whose every run answers the first ``k`` chunks of one receipt (parsed anew each
    time, as a run builds a new one); it counts its runs and refuses the receipt cache."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.asked: list[int] = []

    async def run(self, plan: Any, *, where: str = "plan", cache: bool = True) -> Receipt:
        assert cache is False, "an evaluation's receipts bypass the receipt cache"
        k = int(plan["obligations"][0]["k"]) if "obligations" in plan else 10
        self.asked.append(k)
        await anyio.sleep(0)
        data = dict(self.data, evidence=self.data["evidence"][:k])
        return Receipt.model_validate(data)

    def generations(self) -> dict[str, str]:
        return {"index": "test"}


def _queries(n: int) -> tuple[list[EvalQuery], list[Judgment]]:
    queries = [EvalQuery(id=f"q{i:04d}", text=f"query {i}") for i in range(n)]
    # One document found at rank 2, one never found: every query has a work order, so legs run.
    judgments = [Judgment(query=q.id, doc=d, grade=1) for q in queries for d in ("d001", "missing")]
    return queries, judgments


def test_documents_rank_by_best_chunk_reading_until_k_documents() -> None:
    engine = Fake(_receipt_data(chunks=120, per_doc=5))
    query = EvalQuery(id="q", text="t")
    answer, read = anyio.run(lambda: documents(engine, query, "lexical", k=10))
    # 30 chunks held 6 documents: the strategy read 60 (12 documents) and returns the first 10.
    assert engine.asked == [30, 60] and read == 60
    assert answer.docs == tuple(f"d{i:03d}" for i in range(10))
    engine.asked.clear()
    answer, read = anyio.run(lambda: documents(engine, query, "lexical", k=30))
    # 90, then 180 asked: the backends had 120 chunks (24 documents) and no more.
    assert engine.asked == [90, 180] and read == 180 and len(answer.docs) == 24


def _peak(n: int, data: dict[str, Any]) -> tuple[int, EvalReport]:
    queries, judgments = _queries(n)
    engine = Fake(data)

    async def run() -> EvalReport:
        return await evaluate(
            engine, queries, judgments, strategies=("lexical", "hybrid"), k=10, samples=20, concurrency=2
        )

    tracemalloc.start()
    try:
        report = anyio.run(run)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, report


def test_memory_stays_flat_in_the_number_of_queries() -> None:
    data = _receipt_data(chunks=120, per_doc=5)
    tracemalloc.start()
    receipt = Receipt.model_validate(data)
    one_receipt, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del receipt
    _peak(4, data)  # imports and first-use caches are not the evaluation's
    small, _ = _peak(10, data)
    large, report = _peak(80, data)
    assert report.queries == 80 and report.scored["hybrid"].scored == 80
    # 70 queries more, each of 4 runs and 2 legs (420 receipts): the peak grows by less than
    # two receipts (what 70 reduced records and the 80-query report weigh), not by 420.
    assert large - small < 2 * one_receipt, (small, large, one_receipt)


def test_a_state_file_resumes_the_evaluation(tmp_path: Path) -> None:
    queries, judgments = _queries(6)
    state = tmp_path / "state.jsonl"

    def run(engine: Fake, chosen: list[EvalQuery]) -> EvalReport:
        async def go() -> EvalReport:
            return await evaluate(engine, chosen, judgments, strategies=("lexical",), k=10, samples=20, state=state)

        return anyio.run(go)

    first = Fake(_receipt_data(chunks=120, per_doc=5))
    report = run(first, queries)
    assert len(state.read_text().splitlines()) == 6 and first.asked
    again = Fake(_receipt_data(chunks=120, per_doc=5))
    assert canonical_json(run(again, queries)) == canonical_json(report) and again.asked == []
    # A torn last record and a changed query run again; the others are kept.
    lines = state.read_bytes().split(b"\n")
    state.write_bytes(b"\n".join(lines[:-2]) + b"\n" + lines[-2][:40])
    changed = [*queries[:2], queries[2].model_copy(update={"text": "another"}), *queries[3:]]
    third = Fake(_receipt_data(chunks=120, per_doc=5))
    run(third, changed)
    # Two queries (at once, by default): each the run (10 documents) and its 40-deep leg.
    assert sorted(third.asked) == sorted([30, 60, 120, 240] * 2)
    assert len(state.read_text().splitlines()) == 6


def test_measures_are_ir_measures_syntax() -> None:
    assert parse_measures(["nDCG@10", "R@100", "RR@10", "P@5"]) == ("nDCG@10", "R@100", "RR@10", "P@5")
    for bad in ("nDCG@x", "bogus@3"):
        with pytest.raises(InputError, match=bad) as info:
            parse_measures([bad])
        assert info.value.where == "--metrics"
    assert default_k(["nDCG@10", "R@100"]) == 100 and default_k(None) == 10 and default_k(list(MEASURES)) == 10


EVAL = FIXTURES / "eval" / "kestrel"


def test_cli_eval_exports_trec_runs_that_ir_measures_scores_alike(
    index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from race.cli.main import main
    from race.evaluation.report import markdown
    from race.evaluation.stats import ir_measures as library

    ir_measures = library()

    rows = [r for r in (EVAL / "queries.jsonl").read_text().splitlines() if json.loads(r)["id"] in {"q01", "q38"}]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join([*rows, json.dumps({"id": "zz-unjudged", "text": "idle connections"})]) + "\n")
    runs = tmp_path / "runs"
    args = ["eval", str(queries), str(EVAL / "qrels.trec"), "--index", str(index_dir), "--strategies", "lexical"]
    measures = ["nDCG@10", "R@20", "RR@10"]
    assert main([*args, "--metrics", " ".join(measures), "--export-runs", str(runs), "--samples", "50", "--json"]) == 0
    report = EvalReport.model_validate_json(capsys.readouterr().out)
    assert report.settings["k"] == 20 and report.settings["documents"] == "MaxP"
    assert report.settings["unjudged_queries"] == ["zz-unjudged"] and set(report.per_query) == {"q01", "q38"}
    assert "1 queries have no judgments and are not scored: zz-unjudged." in markdown(report)
    run = list(ir_measures.read_trec_run(str(runs / "lexical.run")))
    assert {r.query_id for r in run} == {"q01", "q38"} and len(run) == 40
    qrels = list(ir_measures.read_trec_qrels(str(EVAL / "qrels.trec")))
    checked = 0
    for metric in ir_measures.iter_calc([ir_measures.parse_measure(m) for m in measures], qrels, run):
        if metric.query_id in report.per_query:
            assert report.per_query[metric.query_id]["lexical"][str(metric.measure)] == pytest.approx(metric.value)
            checked += 1
    assert checked == 6
    assert main([*args, "--metrics", "nDCG@10 Bogus@5"]) == 2
    assert "--metrics: not an ir-measures measure: 'Bogus@5'" in capsys.readouterr().err


def test_an_evaluation_leaves_the_receipt_and_result_caches_as_they_were(session_engine: Any) -> None:
    from race.evaluation.evaluate import load_judgments, load_queries

    queries = [q for q in load_queries(EVAL / "queries.jsonl") if q.id == "q38"]
    before = len(session_engine.receipt_cache), len(session_engine.result_cache)

    async def run() -> EvalReport:
        report: EvalReport = await session_engine.evaluate(
            queries, load_judgments(EVAL / "qrels.trec"), strategies=("lexical",), samples=20
        )
        return report

    assert anyio.run(run).queries == 1
    assert (len(session_engine.receipt_cache), len(session_engine.result_cache)) == before


def _resampled(n: int, samples: int) -> tuple[int, dict[str, dict[str, Interval | None]], list[float]]:
    """The bootstrap and the sign-flip tests of three strategies over ``n`` queries, and their peak."""
    values = np.random.default_rng(n)
    matrix = {s: {m: values.random(n) for m in MEASURES} for s in ("a", "b", "c")}
    scored = {s: values.random(n) > 0.1 for s in matrix}
    pairs = [
        (matrix[a][m][both], matrix[b][m][both], both)
        for a, b in (("a", "b"), ("a", "c"), ("b", "c"))
        for m in MEASURES
        if (both := scored[a] & scored[b]).any()
    ]
    tracemalloc.start()
    try:
        rng = np.random.default_rng(7)
        overall = bootstraps(rng, samples, n, matrix, scored)
        p_values = sign_flip_tests(rng, samples * 5, pairs, n)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, overall, p_values


def test_the_resampling_memory_is_flat_in_the_number_of_queries() -> None:
    _resampled(50, 10)
    small, _, _ = _resampled(250, 1000)
    large, overall, p_values = _resampled(4000, 1000)
    assert overall["a"]["nDCG@10"] is not None and len(p_values) == 3 * len(MEASURES)
    # 16 times the queries: the whole matrices would weigh 16 times as much (160 MB of signs
    # at 4,000 queries); drawn a block at a time, the peak is the same within a quarter.
    assert large < 1.25 * small, (small, large)


def test_the_blocks_give_the_figures_of_one_draw_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    n, samples = 37, 300
    monkeypatch.setattr(stats, "BLOCK_CELLS", 5)  # 1 resample a block
    _, blocked, blocked_p = _resampled(n, samples)
    monkeypatch.setattr(stats, "BLOCK_CELLS", 50 * n)  # 50, with a shorter last block
    _, mid, mid_p = _resampled(n, samples)
    assert blocked == mid and blocked_p == mid_p
    # The whole matrices drawn at once, as the reference formula reads them.
    values = np.random.default_rng(n)
    matrix = {s: {m: values.random(n) for m in MEASURES} for s in ("a", "b", "c")}
    scored = {s: values.random(n) > 0.1 for s in matrix}
    rng = np.random.default_rng(7)
    indices = rng.integers(0, n, size=(samples, n))
    signs = rng.choice(np.array([-1.0, 1.0]), size=(samples * 5, n))
    for s in matrix:
        drawn = scored[s][indices].sum(axis=1)
        for m in MEASURES:
            means = np.where(scored[s], matrix[s][m], 0.0)[indices].sum(axis=1)[drawn > 0] / drawn[drawn > 0]
            low, high = np.percentile(means, [2.5, 97.5])
            assert blocked[s][m] == Interval(mean=float(matrix[s][m][scored[s]].mean()), low=low, high=high)
    both = scored["a"] & scored["b"]
    diff = matrix["a"]["nDCG@10"][both] - matrix["b"]["nDCG@10"][both]
    flipped = np.abs((signs[:, both] * diff).mean(axis=1))
    reference = (np.count_nonzero(flipped >= abs(diff.mean()) - 1e-12) + 1) / (samples * 5 + 1)
    assert blocked_p[MEASURES.index("nDCG@10")] == reference
