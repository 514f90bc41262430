"""`race eval`: strategies scored by ir-measures against the labelled Kestrel query set."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import anyio
import numpy as np
import pytest

from race.cli.main import main
from race.engine import Engine
from race.evaluation.evaluate import EvalQuery, Ranking, load_judgments, load_queries, work_orders
from race.evaluation.stats import EvalReport, Scored, per_query_scores, score_runs
from race.indexing.bundled import BUNDLED_CORPUS
from race.indexing.catalog import index_catalog
from rsc import BackendTimeout, InputError, ScanRequest, ScanResult, canonical_pretty
from tests.conftest import FIXTURES
from tests.faults.injector import FaultyAdapter, raise_task

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
            assert iv is not None
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
    official, lexical = report.overall["official-bm25"]["R@10"], report.overall["lexical"]["R@10"]
    assert official is not None and lexical is not None and official.mean <= lexical.mean
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


@dataclass(eq=False)
class SlowOn(FaultyAdapter):
    """The real adapter, except that a scan of one of ``texts`` sleeps past the leg deadline."""

    texts: frozenset[str] = frozenset()

    async def scan(self, request: ScanRequest) -> ScanResult:
        if request.query.text in self.texts:
            await anyio.sleep(LEG_TIMEOUT_S + 1.0)
        return await self.inner.scan(request)


LEG_TIMEOUT_S = 5.0  # the default budget.leg_timeout_ms of the plans race eval makes


def _measured(report: EvalReport, strategy: str, measure: str) -> float:
    iv = report.overall[strategy][measure]
    assert iv is not None
    return iv.mean


def test_a_run_past_its_leg_deadline_is_not_scored(session_engine: Engine, small_set: tuple[Path, Path]) -> None:
    from race.evaluation.report import markdown

    queries, qrels = load_queries(small_set[0]), load_judgments(small_set[1])
    slow = next(q for q in queries if q.id == "q17")
    adapters = dict(session_engine.adapters)
    adapters["lancedb"] = SlowOn(adapters["lancedb"], texts=frozenset({slow.text}))
    strategies = ("lexical", "conceptual", "hybrid")

    async def run(engine: Engine) -> EvalReport:
        report: EvalReport = await engine.evaluate(queries, qrels, strategies=strategies, samples=200)
        return report

    report, clean = anyio.run(run, Engine(adapters)), anyio.run(run, session_engine)
    # The dense leg of q17 timed out in the conceptual and the hybrid run; BM25 never asked it.
    assert report.scored["lexical"] == Scored(scored=4)
    for strategy in ("conceptual", "hybrid"):
        assert report.scored[strategy] == Scored(scored=3, not_scored={"timeout": 1})
        assert report.not_scored[strategy]["q17"].startswith("timeout: ")
        assert "leg deadline" in report.not_scored[strategy]["q17"]
        assert strategy not in report.per_query["q17"]
    assert "lexical" not in report.not_scored and clean.not_scored == {}
    scored = ["q01", "q38", "q49"]
    for strategy in strategies:
        for measure in report.settings["measures"]:
            # The mean is over the scored queries, whose values are those of a run with no fault.
            ids = scored if strategy != "lexical" else [*scored, "q17"]
            expected = np.mean([clean.per_query[q][strategy][measure] for q in ids])
            assert _measured(report, strategy, measure) == pytest.approx(expected, abs=1e-12)
            assert _measured(clean, strategy, measure) == pytest.approx(
                np.mean([clean.per_query[q][strategy][measure] for q in sorted(clean.per_query)]), abs=1e-12
            )
    # Paired tests compare two strategies on the queries both were scored on.
    lexical_vs_dense = next(t for t in report.paired if (t.a, t.b, t.measure) == ("lexical", "conceptual", "R@10"))
    assert lexical_vs_dense.wins + lexical_vs_dense.losses + lexical_vs_dense.ties == 3
    table = markdown(report)
    assert "| strategy | scored | not scored | nDCG@10 |" in table
    assert "| conceptual | 3 | 1 (1 timeout) | " in table and "| lexical | 4 | 0 | " in table
    assert "over the scored queries only" in table and "over the scored queries only" not in markdown(clean)


def test_a_strategy_with_no_scored_run_is_not_measured(
    session_engine: Engine, small_set: tuple[Path, Path], tmp_path: Path
) -> None:
    from race.evaluation.report import markdown, plot

    queries, qrels = load_queries(small_set[0]), load_judgments(small_set[1])
    adapters = dict(session_engine.adapters)
    adapters["lancedb"] = FaultyAdapter(adapters["lancedb"], {"q": raise_task(BackendTimeout("backend timed out"))})

    async def run() -> EvalReport:
        report: EvalReport = await Engine(adapters).evaluate(
            queries, qrels, strategies=("lexical", "conceptual"), samples=100
        )
        return report

    report = anyio.run(run)
    assert report.scored["conceptual"] == Scored(scored=0, not_scored={"timeout": 4})
    assert all(iv is None for iv in report.overall["conceptual"].values())
    assert all(v is None for cat in report.by_category.values() for v in cat["conceptual"].values())
    assert all("conceptual" not in row for row in report.per_query.values())
    assert report.paired == ()  # nothing to compare lexical with
    table = markdown(report)
    assert "| conceptual | 0 | 4 (4 timeout) | " + " | ".join(["not measured"] * 4) + " |" in table
    as_json = json.loads(canonical_pretty(report))
    assert as_json["overall"]["conceptual"] == {m: None for m in report.settings["measures"]}
    assert json.loads(canonical_pretty(EvalReport.model_validate(as_json))) == as_json
    plot(report, tmp_path / "eval.png")
    assert (tmp_path / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scores_leave_out_the_runs_not_scored_whatever_the_reason() -> None:
    rng = np.random.default_rng(11)
    relevant = {f"q{i:02}": {f"d{i}": 2, f"e{i}": 1} for i in range(12)}
    pool = [f"{p}{i}" for i in range(12) for p in "de"] + ["x", "y", "z"]
    runs = {s: {q: [str(d) for d in rng.permutation(pool)[:10]] for q in relevant} for s in ("a", "b", "c")}
    not_scored = {
        "a": {"q01": "resource_limited: plan deadline 10000 ms passed before the leg started", "q05": "cancelled: x"},
        "b": {"q05": "timeout: y", "q07": "timeout: z", "q99": "timeout: a query without judgments"},
    }
    measures = ("nDCG@10", "R@10")
    settings = {"measures": measures, "samples": 500, "seed": 3}
    report = score_runs(
        runs,
        relevant,
        {q: "odd" if int(q[1:]) % 2 else "even" for q in relevant},
        [],
        settings=settings,
        not_scored=not_scored,
    )
    every = score_runs(runs, relevant, {}, [], settings=settings)
    assert report.scored == {
        "a": Scored(scored=10, not_scored={"cancelled": 1, "resource_limited": 1}),
        "b": Scored(scored=10, not_scored={"timeout": 2}),
        "c": Scored(scored=12),
    }
    for s in runs:
        kept = [q for q in relevant if q not in not_scored.get(s, {})]
        for m in measures:
            values = np.array([every.per_query[q][s][m] for q in kept])
            iv = report.overall[s][m]
            assert iv is not None and iv.mean == pytest.approx(values.mean(), abs=1e-12)
            assert iv.low <= iv.mean <= iv.high
            odd = np.array([every.per_query[q][s][m] for q in kept if int(q[1:]) % 2])
            assert report.by_category["odd"][s][m] == pytest.approx(odd.mean(), abs=1e-12)
    ab = next(t for t in report.paired if (t.a, t.b, t.measure) == ("a", "b", "R@10"))
    both = [q for q in relevant if q not in ("q01", "q05", "q07")]
    x = np.array([every.per_query[q]["a"]["R@10"] for q in both])
    y = np.array([every.per_query[q]["b"]["R@10"] for q in both])
    assert ab.mean_difference == pytest.approx((x - y).mean(), abs=1e-12) and ab.wins + ab.losses + ab.ties == 9
