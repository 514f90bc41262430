"""Deadline-aware choice: among alternatives that keep the required coverage, one estimated
past the group's remaining budget (its leg deadline, capped by the plan's) loses to one within
it, and explain says why. Statistics choose; they never widen what a plan may claim (I2)."""

from __future__ import annotations

from typing import Any

from planner import Explain, ScanNode, Statistics, compile_plan, plan_from_dict, render_text
from race.engine import known_contracts
from rsc import BackendStatistics, SearchCoverage

VECTOR = ("lancedb.ann_postfilter", "lancedb.ann_prefilter", "lancedb.exact_matrix", "lancedb.flat_prefilter")


def _plan(deadline_ms: int, required: str = "heuristic") -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "q",
        "obligations": [
            {
                "id": "q",
                "kind": "seek_support",
                "query": {"text": "the broker ran out of memory"},
                "query_class": "broad_question",
                "k": 5,
                "deadline_ms": deadline_ms,
                "required_coverage": required,
            }
        ],
        "operators": [],
    }


def _compile(plan: dict[str, Any], latency: dict[str, float]) -> Explain:
    backends: dict[str, dict[str, float]] = {}
    for rsc_id, ms in latency.items():
        backends.setdefault(rsc_id.split(".")[0], {})[rsc_id] = ms
    stats = Statistics(
        backends={b: BackendStatistics(backend=b, rows=1000, latency_ms=lat) for b, lat in sorted(backends.items())}
    )
    return compile_plan(plan_from_dict(plan), contracts=known_contracts(), backend_generations={}, stats=stats)


SLOW_VECTOR = {**dict.fromkeys(VECTOR, 120.0), "tantivy.bm25": 0.5}


def test_an_alternative_past_the_budget_loses_to_one_within_it() -> None:
    explain = _compile(_plan(80), SLOW_VECTOR)
    assert isinstance(explain.physical, ScanNode)
    assert explain.physical.rsc == "tantivy.bm25@1.0.0"
    hybrids = [a for a in explain.groups[0].alternatives if a.rule == "HybridRrf"]
    assert hybrids and all(not a.chosen for a in hybrids)
    assert all(any("> remaining budget 80 ms" in r for r in a.rejected_because) for a in hybrids)
    text = render_text(explain)
    # The hybrid on the exact matrix: 120 ms measured, its 1000 candidates and one model call.
    exact = next(a for a in hybrids if a.rsc.endswith("lancedb.exact_matrix@1.0.0"))
    scan = next(a for a in explain.groups[0].alternatives if a.rsc == "lancedb.exact_matrix@1.0.0")
    assert scan.estimate is not None and scan.estimate.candidates == 1000
    assert exact.cost >= scan.cost > 120.0 + 6.0
    assert f"rejected: estimate {exact.cost:g} ms > remaining budget 80 ms" in text
    assert "every alternative of hybrid is estimated past the remaining budget 80 ms" in text
    # The alternative chosen keeps the coverage the obligation requires.
    chosen = next(a for a in explain.groups[0].alternatives if a.chosen)
    assert chosen.reach.rank >= SearchCoverage.HEURISTIC.rank


def test_with_room_in_the_budget_the_policy_strategy_is_kept() -> None:
    explain = _compile(_plan(5_000), SLOW_VECTOR)
    assert explain.physical.kind == "hybrid"
    assert "remaining budget" not in render_text(explain)


def test_the_budget_never_buys_a_weaker_coverage() -> None:
    # Only an ANN leg with a post-filter (heuristic at best) fits in 80 ms; the obligation asks
    # for exhaustive coverage, so the hybrid stays chosen, past its budget.
    latency = {**dict.fromkeys(VECTOR, 120.0), "lancedb.ann_postfilter": 0.1, "tantivy.bm25": 120.0}
    explain = _compile(_plan(80, required="exhaustive_for_declared_fragment"), latency)
    assert explain.physical.kind == "hybrid"
    assert explain.physical.reach is SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT
    assert not explain.revisions


def test_the_choice_is_the_same_bytes_every_time() -> None:
    first = render_text(_compile(_plan(80), SLOW_VECTOR))
    assert first == render_text(_compile(_plan(80), SLOW_VECTOR))
