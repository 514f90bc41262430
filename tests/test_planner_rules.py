"""OrderCascadeByCost (a conformance-preserving reorder) and selectivity-driven choice.

Fixtures: ``fixtures/plans/cascade_equivalent_stages.json`` (two stages asking the same
thing through different contracts, the dearer one first in the plan) and
``fixtures/plans/selectivity_vector.json`` planned under ``fixtures/stats/selective.json``
and ``fixtures/stats/broad.json`` (1,000,000 rows; the filter keeps 0.1 % or 50 %).
ImplementOperator gives a fusion to exactly the operators the runtime fuses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner import (
    Explain,
    OperatorNode,
    ScanNode,
    Statistics,
    compile_plan,
    parse_plan,
    plan_from_dict,
    render_json,
    render_text,
)
from race.cli.main import main
from race.engine import Engine, known_contracts, load_statistics
from rsc import BackendStatistics, Contract, GapKind, ObligationStatus, SearchCoverage, load_contract
from tests.conftest import FIXTURES, ROOT

CASCADE = FIXTURES / "plans" / "cascade_equivalent_stages.json"
SELECTIVITY = FIXTURES / "plans" / "selectivity_vector.json"
SELECTIVE = FIXTURES / "stats" / "selective.json"
BROAD = FIXTURES / "stats" / "broad.json"
GENERATIONS = {"tantivy": "tantivy:test", "graph": "graph:test", "lancedb": "lancedb:test"}


def _plan(path: Path, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    data.update(changes)
    return data


def _compile(plan: dict[str, Any], stats: Statistics | None = None, contracts: tuple[Contract, ...] = ()) -> Explain:
    return compile_plan(
        plan_from_dict(plan),
        contracts=contracts or known_contracts(),
        backend_generations=GENERATIONS,
        stats=stats or Statistics(),
    )


def _group(explain: Explain, logical: str) -> Any:
    return next(g for g in explain.groups if g.logical == logical)


def _rule(explain: Explain, logical: str, rule: str) -> Any:
    return next(a for a in _group(explain, logical).alternatives if a.rule == rule)


# -- OrderCascadeByCost ---------------------------------------------------------------------


def test_equivalent_stages_run_stronger_reach_first_and_the_revision_is_explained() -> None:
    explain = _compile(_plan(CASCADE))
    root = explain.physical
    assert isinstance(root, OperatorNode) and root.node == "advisory-by-id"
    assert [c.node for c in root.children] == ["via-exact", "via-graph"]  # plan order is via-graph first
    chosen = _rule(explain, "advisory-by-id", "OrderCascadeByCost")
    plain = _rule(explain, "advisory-by-id", "ImplementOperator")
    stages = {c.node: c for c in root.children}
    exact, graph = stages["via-exact"], stages["via-graph"]
    assert isinstance(exact, ScanNode) and isinstance(graph, ScanNode)
    # The graph lookup is estimated cheaper, but tantivy.exact reaches further: it runs first,
    # as it did when it was also the cheaper one, so the cascade answers with the same coverage.
    assert graph.cost < exact.cost
    assert exact.reach.rank > graph.reach.rank >= SearchCoverage.HEURISTIC.rank
    assert chosen.chosen and not plain.eligible
    assert "stage via-graph (reach bounded_structural) would run before" in plain.rejected_because[0]
    assert chosen.reach == plain.reach
    [revision] = [r for r in explain.revisions if r.rule == "OrderCascadeByCost"]
    assert revision.logical == "advisory-by-id" and revision.group == 1
    assert "in order of reach (stronger first), then expected cost: via-exact" in revision.detail
    assert "plan order via-graph, via-exact" in revision.detail
    text = render_text(explain)
    assert "G1 advisory-by-id: OrderCascadeByCost: equivalent cascade stages run in order of reach" in text


def test_no_reorder_when_the_plan_order_already_runs_the_stronger_stage_first() -> None:
    plan = _plan(CASCADE)
    plan["operators"][0]["inputs"] = ["via-exact", "via-graph"]
    explain = _compile(plan)
    alt = _rule(explain, "advisory-by-id", "OrderCascadeByCost")
    assert not alt.eligible
    assert alt.rejected_because == ("stages are already in order of reach (stronger first), then expected cost",)
    assert _rule(explain, "advisory-by-id", "ImplementOperator").chosen
    assert not [r for r in explain.revisions if r.rule == "OrderCascadeByCost"]


def test_statistics_never_run_a_weaker_stage_first() -> None:
    # Measured latency makes tantivy.exact the dearer stage by far: it still runs first, since
    # the graph lookup reaches less (statistics choose; they never lower coverage, I2).
    slow_exact = Statistics(
        backends={"tantivy": BackendStatistics(backend="tantivy", rows=213, latency_ms={"tantivy.exact": 40.0})}
    )
    explain = _compile(_plan(CASCADE), stats=slow_exact)
    assert isinstance(explain.physical, OperatorNode)
    assert [c.node for c in explain.physical.children] == ["via-exact", "via-graph"]
    assert _rule(explain, "advisory-by-id", "OrderCascadeByCost").chosen
    assert not _rule(explain, "advisory-by-id", "ImplementOperator").eligible


def test_statistics_order_stages_of_equal_reach() -> None:
    # Both stages through tantivy.exact (one reach): measured latency alone cannot reorder
    # them, the plan order stands and costs decide nothing else.
    plan = _plan(CASCADE)
    plan["obligations"][0]["allow_contracts"] = ["tantivy.exact"]
    plan["obligations"][0].pop("strategy")
    explain = _compile(plan)
    alt = _rule(explain, "advisory-by-id", "OrderCascadeByCost")
    assert alt.rejected_because == ("stages are already in order of expected cost",)
    assert _rule(explain, "advisory-by-id", "ImplementOperator").chosen


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"k": 3}, "stage via-exact differs from via-graph in k"),
        ({"hard_filters": [{"field": "doc_type", "value": "advisory"}]}, "differs from via-graph in hard_filters"),
        ({"query": {"ids": ["ksa-2023-001"]}}, "differs from via-graph in query"),
        ({"kind": "seek_refutation"}, "differs from via-graph in kind"),
        ({"required_coverage": "exhaustive_for_declared_fragment"}, "differs from via-graph in required_coverage"),
    ],
)
def test_stages_that_are_not_equivalent_are_never_reordered(change: dict[str, Any], reason: str) -> None:
    plan = _plan(CASCADE)
    plan["obligations"][1].update(change)
    explain = _compile(plan)
    alt = _rule(explain, "advisory-by-id", "OrderCascadeByCost")
    assert not alt.eligible and not alt.chosen
    assert any(reason in r for r in alt.rejected_because), alt.rejected_because
    assert isinstance(explain.physical, OperatorNode)
    assert [c.node for c in explain.physical.children] == ["via-graph", "via-exact"]
    assert not [r for r in explain.revisions if r.rule == "OrderCascadeByCost"]


def test_a_stage_without_an_implementation_stops_the_revision() -> None:
    plan = _plan(CASCADE)
    plan["obligations"][0]["allow_contracts"] = ["no.such_contract"]
    plan["obligations"][1]["allow_contracts"] = ["no.such_contract"]
    explain = _compile(plan)
    alt = _rule(explain, "advisory-by-id", "OrderCascadeByCost")
    assert not alt.eligible
    assert any("has no implementation reaching its required heuristic" in r for r in alt.rejected_because)


def test_operator_stages_are_not_reordered() -> None:
    explain = _compile(json.loads((FIXTURES / "plans" / "cascade_lexical.json").read_text()))
    alt = _rule(explain, "c", "OrderCascadeByCost")
    assert not alt.eligible and alt.rejected_because == ("stage anywhere differs from advisories in hard_filters, k",)


def test_reordered_cascade_runs_in_the_new_order_and_the_receipt_says_so(engine: Engine) -> None:
    explain = engine.plan_sync(CASCADE)
    assert [r.rule for r in explain.revisions] == ["OrderCascadeByCost"]
    receipt = engine.run_sync(CASCADE)
    assert receipt.fingerprints.physical == explain.fingerprints.physical
    obligations = {o.id: o for o in receipt.obligations}
    # The cheaper stage ran first and was sufficient; the plan's first stage was not needed.
    assert obligations["via-exact"].status is ObligationStatus.SATISFIED
    assert obligations["via-exact"].served_by == ("tantivy.exact@1.1.0",)
    assert obligations["via-exact"].evidence_count >= 1
    assert obligations["via-graph"].status is ObligationStatus.NOT_ATTEMPTED
    [gap] = obligations["via-graph"].gaps
    assert gap.kind is GapKind.NOT_NEEDED and "stage via-exact was sufficient" in gap.detail
    [operator] = receipt.operators
    assert operator.id == "advisory-by-id" and operator.status is ObligationStatus.SATISFIED
    assert {o for e in receipt.evidence for o in e.obligations} == {"via-exact"}
    # Running it twice gives the same normalized bytes.
    again = engine.run_sync(CASCADE)
    assert again.normalized_bytes() == receipt.normalized_bytes()


def test_hostile_statistics_change_no_stage_order_nor_evidence(engine: Engine) -> None:
    """Statistics that make the stronger stage absurdly slow: the same stage runs, the same
    evidence and the same coverage come back (the receipt's bytes differ only by the
    statistics' fingerprint)."""
    slow_exact = Statistics(
        backends={"tantivy": BackendStatistics(backend="tantivy", rows=213, latency_ms={"tantivy.exact": 40.0})}
    )
    hostile = Engine(engine.adapters, statistics=slow_exact).run_sync(CASCADE)
    default = engine.run_sync(CASCADE)
    by_id = {o.id: o for o in hostile.obligations}
    assert by_id["via-exact"].status is ObligationStatus.SATISFIED
    assert by_id["via-graph"].status is ObligationStatus.NOT_ATTEMPTED
    assert hostile.coverage.statuses == default.coverage.statuses
    assert hostile.operators[0].search_coverage == default.operators[0].search_coverage
    assert [e.model_dump() for e in hostile.evidence] == [e.model_dump() for e in default.evidence]


# -- selectivity-driven choice --------------------------------------------------------------


def _lancedb_contracts() -> tuple[Contract, ...]:
    return tuple(load_contract(p) for p in sorted((ROOT / "backends" / "lancedb" / "rsc").glob("*.json")))


def _scan_alternatives(explain: Explain) -> dict[str, Any]:
    group = _group(explain, "advisory-concept")
    return {a.rsc.split("@")[0]: a for a in group.alternatives if a.rsc.startswith("lancedb.")}


def test_selectivity_decides_between_flat_and_ann() -> None:
    # The LanceDB contracts straight from their RSC files, registered or not.
    by_ref = {c.ref: c for c in (*known_contracts(), *_lancedb_contracts())}
    contracts = tuple(by_ref[ref] for ref in sorted(by_ref))
    plan = parse_plan(SELECTIVITY.read_bytes())
    explains = {
        name: compile_plan(plan, contracts=contracts, backend_generations=GENERATIONS, stats=load_statistics(path))
        for name, path in (("selective", SELECTIVE), ("broad", BROAD))
    }
    chosen = {}
    for name, explain in explains.items():
        assert isinstance(explain.physical, ScanNode)
        chosen[name] = explain.physical.rsc
    assert chosen == {"selective": "lancedb.flat_prefilter@1.1.0", "broad": "lancedb.ann_prefilter@1.1.0"}
    # Same logical plan, different physical plan; the statistics fingerprint says why.
    sel, broad = explains["selective"], explains["broad"]
    assert sel.fingerprints.logical == broad.fingerprints.logical
    assert sel.fingerprints.physical != broad.fingerprints.physical
    assert sel.fingerprints.statistics != broad.fingerprints.statistics

    flat, ann = _scan_alternatives(sel)["lancedb.flat_prefilter"], _scan_alternatives(sel)["lancedb.ann_prefilter"]
    assert flat.estimate.selectivity == pytest.approx(0.001)
    assert flat.estimate.basis == "doc_type: 1000/1000000 rows"
    assert flat.estimate.candidates == 1000
    assert flat.cost < ann.cost
    assert ann.rejected_because == (f"cost {ann.cost:.3f} ms > chosen {flat.cost:.3f} ms (ScanContract {flat.rsc})",)

    flat, ann = _scan_alternatives(broad)["lancedb.flat_prefilter"], _scan_alternatives(broad)["lancedb.ann_prefilter"]
    assert flat.estimate.selectivity == pytest.approx(0.5)
    assert flat.estimate.basis == "doc_type: 500000/1000000 rows"
    assert flat.estimate.candidates == 500_000
    assert ann.cost < flat.cost
    assert flat.rejected_because == (f"cost {flat.cost:.3f} ms > chosen {ann.cost:.3f} ms (ScanContract {ann.rsc})",)
    # Statistics only choose (I2): both alternatives claim what their contracts allow either way.
    for explain in explains.values():
        alts = _scan_alternatives(explain)
        assert alts["lancedb.flat_prefilter"].reach.value == "exhaustive_for_declared_fragment"
        assert alts["lancedb.ann_prefilter"].reach.value == "heuristic"

    text = render_text(sel)
    assert (
        "estimate: 1000000 rows x selectivity 0.001 (doc_type: 1000/1000000 rows) -> 1000 candidates"
        " (exact scan: rows x selectivity)" in text
    )
    assert "-> 316228 candidates (ANN probe" in text


@pytest.mark.skipif(
    "lancedb.flat_prefilter" not in {c.rsc_id for c in known_contracts()},
    reason="the LanceDB adapter is not registered in backends.LOCAL_ADAPTERS yet",
)
def test_race_plan_cli_chooses_by_the_stats_file(index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chosen = {}
    for name, path in (("selective", SELECTIVE), ("broad", BROAD)):
        argv = ["plan", str(SELECTIVITY), "--explain", "--json", "--stats", str(path), "--index", str(index_dir)]
        assert main(argv) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["physical"]["kind"] == "scan"
        chosen[name] = data["physical"]["rsc"]
        alts = {a["rsc"].split("@")[0]: a for a in data["groups"][0]["alternatives"] if a["rsc"].startswith("lancedb.")}
        flat, ann = alts["lancedb.flat_prefilter"], alts["lancedb.ann_prefilter"]
        assert flat["estimate"]["rows"] == 1_000_000
        assert flat["estimate"]["selectivity"] == (0.001 if name == "selective" else 0.5)
        loser = ann if name == "selective" else flat
        assert loser["rejected_because"][0].startswith(f"cost {loser['cost']:.3f} ms > chosen")
    assert chosen == {"selective": "lancedb.flat_prefilter@1.1.0", "broad": "lancedb.ann_prefilter@1.1.0"}


def test_stats_fixtures_are_valid_statistics_documents() -> None:
    for path in (SELECTIVE, BROAD):
        stats = load_statistics(path)
        lancedb = stats.backends["lancedb"]
        assert lancedb.rows == 1_000_000 == sum(lancedb.value_counts["doc_type"].values())
    assert render_json(_compile(_plan(CASCADE), stats=load_statistics(SELECTIVE)))


# The runtime fuses these by RRF; cascade and fallback concatenate their stages, and join,
# refine and freshen keep their input's order.
_RRF_FUSED = {"union", "intersect", "corroborate", "oppose"}
_OPERATOR_FIELDS: dict[str, dict[str, Any]] = {
    "union": {"inputs": ["a", "b"]},
    "intersect": {"inputs": ["a", "b"]},
    "corroborate": {"inputs": ["a", "b"]},
    "oppose": {"support": "a", "refutation": "b"},
    "cascade": {"inputs": ["a", "b"]},
    "fallback": {"inputs": ["a", "b"]},
    "join": {"left": "a", "right": "b", "via": "cites"},
    "refine": {"input": "a", "order_by": "date_desc"},
    "freshen": {"input": "a", "as_of": "2024-06-01"},
}


@pytest.mark.parametrize("kind", sorted(_OPERATOR_FIELDS))
def test_explain_names_the_fusion_the_runtime_applies(kind: str) -> None:
    fields = _OPERATOR_FIELDS[kind]
    leaves = ["a"] if "input" in fields else ["a", "b"]
    leaf = {"kind": "seek_support", "query": {"text": "raft replication"}, "query_class": "lexical"}
    plan = {
        "schema_version": "race.plan/1",
        "root": "top",
        "obligations": [{"id": node, **leaf} for node in leaves],
        "operators": [{"id": "top", "op": kind, **fields}],
    }
    explain = _compile(plan)
    assert isinstance(explain.physical, OperatorNode) and explain.physical.op.value == kind
    fusion = explain.physical.fusion
    if kind in _RRF_FUSED:
        assert fusion is not None and (fusion.method, fusion.k, fusion.top_k) == ("rrf", 60, None)
        assert f"{kind} top [G1] fusion=rrf(k=60)" in render_text(explain)
    else:
        assert fusion is None


# -- hybrid legs at scale -------------------------------------------------------------------


@pytest.mark.parametrize(("rows", "vector"), [(213, "lancedb.exact_matrix"), (1_000_000, "lancedb.ann")])
def test_a_hybrids_vector_leg_is_chosen_by_its_own_cost_at_every_scale(rows: int, vector: str) -> None:
    """BM25's cost grows a few ns a row (benchmarks/results/growth.md), so at 1M chunks the
    lexical leg no longer hides the vector legs' costs: the cheaper ANN leg is chosen there,
    and the exact matrix where the table is small."""
    plan = {
        "schema_version": "race.plan/1",
        "root": "q",
        "obligations": [
            {
                "id": "q",
                "kind": "seek_support",
                "query": {"text": "rotate broker credentials"},
                "query_class": "broad_question",
            }
        ],
    }
    stats = Statistics(backends={b: BackendStatistics(backend=b, rows=rows) for b in ("tantivy", "lancedb")})
    explain = _compile(plan, stats=stats)
    chosen = next(a for a in _group(explain, "q").alternatives if a.chosen)
    assert chosen.rule == "HybridRrf"
    lexical, dense = chosen.rsc.split(" + ")
    assert lexical.startswith("tantivy.bm25") and dense.startswith(vector), chosen.rsc
    if rows > 100_000:
        bm25 = next(
            a for a in _group(explain, "q").alternatives if a.rsc.startswith("tantivy.bm25") and " + " not in a.rsc
        )
        ann = next(a for a in _group(explain, "q").alternatives if a.rsc.startswith(dense))
        exact = next(a for a in _group(explain, "q").alternatives if a.rsc.startswith("lancedb.exact_matrix"))
        # The lexical leg is cheaper than either vector leg, so it hides neither's cost.
        assert bm25.cost < ann.cost < exact.cost
