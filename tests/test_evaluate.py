"""`race eval`: strategies scored by ir-measures against the labelled Kestrel query set."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from race.cli.main import main
from race.engine import Engine
from race.evaluation.evaluate import EvalQuery, Ranking, load_judgments, load_queries, work_orders
from race.evaluation.stats import EvalReport, per_query_scores
from race.indexing.bundled import BUNDLED_CORPUS
from race.indexing.catalog import index_catalog
from rsc import InputError
from tests.conftest import FIXTURES

EVAL = FIXTURES / "eval" / "kestrel"


def test_the_query_set_covers_every_category_and_cites_its_passages() -> None:
    queries = load_queries(EVAL / "queries.jsonl")
    assert len(queries) >= 60
    counts = {
        c: sum(q.category == c for q in queries) for c in ("exact_handle", "vocabulary", "competing", "freshness")
    }
    assert min(counts.values()) >= 10, counts
    judged = load_judgments(EVAL / "qrels.jsonl")
    assert {j.query for j in judged} == {q.id for q in queries}
    for j in judged:
        assert j.grade in (1, 2) and j.passages
        for passage in j.passages:
            lines = (BUNDLED_CORPUS / passage["path"]).read_text(encoding="utf-8").splitlines()
            first, last = passage["lines"]
            assert passage["quote"] in "\n".join(lines[first - 1 : last]), (j.query, j.doc)
            assert f"id: {j.doc}" in lines[:3] or f"id: {j.doc}" in "\n".join(lines[:12])
    trec = load_judgments(EVAL / "qrels.trec")
    assert {(j.query, j.doc, j.grade) for j in trec} == {(j.query, j.doc, j.grade) for j in judged}


def test_measures_come_from_ir_measures() -> None:
    relevant = {"a": {"d1": 2, "d2": 1}, "b": {"d3": 1}}
    scores = per_query_scores({"a": ["d2", "x", "d1"], "b": []}, relevant, ["RR", "R@10", "P@5", "nDCG@10"])
    assert scores["a"]["RR"] == 1.0 and scores["a"]["R@10"] == 1.0 and scores["a"]["P@5"] == pytest.approx(0.4)
    assert 0 < scores["a"]["nDCG@10"] < 1
    assert scores["b"] == {"RR": 0.0, "R@10": 0.0, "P@5": 0.0, "nDCG@10": 0.0}


def test_work_orders_say_what_lost_each_missed_document() -> None:
    query = EvalQuery(id="q", text="t", hard_filters=({"field": "doc_type", "op": "eq", "value": "adr"},))
    meta = {"low": {"doc_type": "adr"}, "gone": {"doc_type": "adr"}, "blog": {"doc_type": "blog"}}
    legs = {"lexical": Ranking(docs=("low", "gone", "blog"), status="satisfied", metadata=meta)}
    answer = Ranking(docs=(*(f"d{i}" for i in range(10)), "low"), status="satisfied")
    relevant = {"low": 2, "gone": 1, "blog": 1, "d0": 2}
    orders = {o.doc: o for o in work_orders(query, "hybrid", answer, legs, relevant, cutoff=10)}
    assert set(orders) == {"low", "gone", "blog"}
    assert orders["low"].cause == "truncation" and orders["low"].ranks == {"lexical": 1, "hybrid": 11}
    assert orders["blog"].cause == "filter"
    assert orders["gone"].cause == "ranking" and orders["gone"].ranks["hybrid"] is None
    failed = answer.model_copy(update={"status": "partial", "shortfalls": ("resource_limited",)})
    assert work_orders(query, "exact", failed, legs, {"gone": 1}, cutoff=10)[0].cause == "gap"


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    keep = {"q01", "q17", "q38", "q49"}
    root = tmp_path_factory.mktemp("eval")
    rows = [r for r in (EVAL / "queries.jsonl").read_text().splitlines() if json.loads(r)["id"] in keep]
    (root / "queries.jsonl").write_text("\n".join(rows) + "\n")
    return root / "queries.jsonl", EVAL / "qrels.trec"


def test_engine_evaluate_scores_every_strategy_with_intervals_and_paired_tests(
    session_engine: Engine, small_set: tuple[Path, Path]
) -> None:
    queries, qrels = load_queries(small_set[0]), load_judgments(small_set[1])

    async def run() -> EvalReport:
        report: EvalReport = await session_engine.evaluate(queries, qrels, samples=200, seed=3)
        return report

    report = anyio.run(run)
    assert report.strategies == ("lexical", "conceptual", "hybrid", "exact") and report.queries == 4
    for strategy in report.strategies:
        for iv in report.overall[strategy].values():
            assert 0.0 <= iv.low <= iv.mean <= iv.high <= 1.0
    assert {(t.a, t.b) for t in report.paired} >= {("lexical", "hybrid"), ("conceptual", "hybrid")}
    assert all(0 < t.p_value <= 1 for t in report.paired)
    # The exact lookup of a CVE handle finds the advisory; on a paraphrase it finds nothing.
    assert report.per_query["q01"]["exact"]["R@10"] > 0 and report.per_query["q17"]["exact"]["R@10"] == 0
    assert any(o.strategy == "exact" and o.query == "q17" and o.cause == "ranking" for o in report.work_orders)
    assert set(report.by_category) == {"exact_handle", "vocabulary", "competing", "freshness"}


def test_cli_eval_writes_json_markdown_and_png(
    index_dir: Path, small_set: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(small_set[0]), str(small_set[1]), "--index", str(index_dir), "--strategies", "lexical,conceptual"]
    assert main(["eval", *args, "--samples", "100", "--out", str(tmp_path), "--name", "small"]) == 0
    table = capsys.readouterr().out
    assert "| lexical |" in table and "| conceptual |" in table and "Paired tests" in table
    report = json.loads((tmp_path / "small.json").read_text())
    assert report["schema_version"] == "race.eval/1" and report["strategies"] == ["lexical", "conceptual"]
    assert (tmp_path / "small.md").read_text() == table
    assert (tmp_path / "small.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["eval", *args, "--strategies", "fuzzy"]) == 2


def test_cli_eval_runs_on_a_catalog(
    index_dir: Path, small_set: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = tmp_path / "index.json"
    catalog.write_text(json.dumps(index_catalog(index_dir).model_dump(mode="json")))
    args = [str(small_set[0]), str(small_set[1]), "--strategies", "lexical,hybrid", "--samples", "100", "--json"]
    assert main(["eval", *args, "--index", str(index_dir)]) == 0
    by_index = json.loads(capsys.readouterr().out)
    assert main(["eval", *args, "--catalog", str(catalog)]) == 0
    by_catalog = json.loads(capsys.readouterr().out)
    assert by_catalog["overall"] == by_index["overall"] and by_catalog["per_query"] == by_index["per_query"]
    assert main(["eval", *args, "--catalog", str(catalog), "--index", str(index_dir)]) == 2


def test_labelled_plans_are_scored_beside_the_strategies(
    session_engine: Engine, small_set: tuple[Path, Path], tmp_path: Path
) -> None:
    from race.evaluation.evaluate import LabelledPlan, strategy_plan

    queries, qrels = load_queries(small_set[0]), load_judgments(small_set[1])
    # A plan of one's own: BM25 restricted to official documents.
    plans = []
    for q in queries:
        plan = strategy_plan(q, "lexical", k=40)
        plan["obligations"][0]["hard_filters"] = [{"field": "authority", "op": "eq", "value": "official"}]
        plans.append(LabelledPlan(query=q.id, strategy="official-bm25", plan=plan))

    async def run(chosen: list[LabelledPlan]) -> EvalReport:
        report: EvalReport = await session_engine.evaluate(
            queries, qrels, strategies=("lexical",), plans=chosen, samples=100
        )
        return report

    report = anyio.run(run, plans)
    assert report.strategies == ("lexical", "official-bm25")
    assert report.overall["official-bm25"]["R@10"].mean <= report.overall["lexical"]["R@10"].mean
    with pytest.raises(InputError, match="plans for 3 of 4 queries"):
        anyio.run(run, plans[1:])


def test_the_committed_results_are_one_report() -> None:
    from race.evaluation.report import markdown

    results = FIXTURES.parent / "benchmarks" / "results"
    report = EvalReport.model_validate_json((results / "eval_kestrel.json").read_text())
    assert report.queries == len(load_queries(EVAL / "queries.jsonl"))
    assert (
        markdown(report, title="Retrieval quality on the Kestrel corpus") == (results / "eval_kestrel.md").read_text()
    )
    assert (results / "eval_kestrel.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
