"""I9: early stop only where every input declares exact sorted and random access and the
aggregation is monotone; everywhere else full evaluation, and explain and the receipt say
which and why. Where it stops early, the top k is exactly that of full evaluation."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from backends import Adapter
from planner import OperatorNode, compile_plan, plan_from_dict, render_text
from race.engine import Engine, known_contracts
from race.receipt import Receipt
from rsc import GapKind, ScanRequest, ScanResult, SearchCoverage
from tests.conftest import FIXTURES, WrappedAdapter, load_plan, roomy_plan, unavailable

GENERATIONS = {"tantivy": "t", "lancedb": "l", "graph": "g"}
CASES: list[dict[str, Any]] = json.loads((FIXTURES / "cases" / "early_stop.json").read_text())["cases"]


def _union(
    inputs: list[dict[str, Any]], *, k: int | None, contract: str = "lancedb.flat_prefilter", ob_k: int = 4
) -> dict[str, Any]:
    obligations = [
        {
            "id": f"q{i}",
            "kind": "seek_support",
            "query": {"text": spec["text"]},
            "query_class": "conceptual",
            "hard_filters": spec.get("filters", []),
            "k": ob_k,
            "allow_contracts": [contract],
        }
        for i, spec in enumerate(inputs)
    ]
    union: dict[str, Any] = {"id": "u", "op": "union", "inputs": [o["id"] for o in obligations]}
    if k is not None:
        union["k"] = k
    return {
        "schema_version": "race.plan/1",
        "root": "u",
        "obligations": obligations,
        "operators": [union],
        # What is compared is what the union returns, not how fast: no leg may time out on a busy machine.
        "budget": {"deadline_ms": 300_000, "leg_timeout_ms": 120_000},
    }


def _root(plan: dict[str, Any], engine: Engine) -> OperatorNode:
    explain = compile_plan(
        plan_from_dict(plan), contracts=known_contracts(), backend_generations=GENERATIONS, stats=engine.statistics()
    )
    assert isinstance(explain.physical, OperatorNode)
    return explain.physical


TWO = [{"text": "the broker ran out of memory"}, {"text": "disks filled up and the cluster slowed"}]


@pytest.mark.parametrize(
    ("plan", "admissible", "fusion", "reason"),
    [
        (_union(TWO, k=5), True, "score_sum", "threshold algorithm"),
        (_union(TWO, k=None), False, "score_sum", "union without k"),
        (_union(TWO, k=5, contract="lancedb.ann_prefilter"), False, "score_sum", "lack exact sorted access"),
        (_union(TWO, k=5, contract="tantivy.bm25"), False, "rrf", "RRF fuses ranks"),
        (load_plan("cascade_lexical.json"), False, None, "cascade is not a top-k aggregation"),
    ],
    ids=["flat-union-k", "union-without-k", "ann-union-k", "bm25-union-k", "cascade"],
)
def test_explain_says_which_and_why(
    session_engine: Engine, plan: dict[str, Any], admissible: bool, fusion: str | None, reason: str
) -> None:
    root = _root(plan, session_engine)
    assert root.early_stop.admissible is admissible
    assert reason in root.early_stop.reason
    assert (root.fusion.method if root.fusion else None) == fusion
    text = render_text(session_engine.plan_sync(plan))
    assert f"early stop: {'admissible' if admissible else 'no'} (" in text


def test_a_hybrid_obligation_is_evaluated_in_full(session_engine: Engine) -> None:
    plan = load_plan("showcase.json")
    explain = session_engine.plan_sync(plan)
    text = render_text(explain)
    assert "RRF fuses ranks of uncalibrated scores (bm25, cosine_distance)" in text


def _ranked(receipt: Receipt) -> list[tuple[str, Any, dict[str, Any]]]:
    return [(i.key, i.fusion.score, dict(i.fusion.similarities)) for i in receipt.evidence]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_the_threshold_algorithm_returns_the_top_k_of_full_evaluation(index_dir: Path, case: dict[str, Any]) -> None:
    plan = _union(case["inputs"], k=case["k"])
    early = Engine.open(index_dir).run_sync(plan)
    full = Engine.open(index_dir, early_stop=False).run_sync(plan)
    assert _ranked(early) == _ranked(full)
    assert len(early.evidence) == min(case["k"], len(full.evidence))
    for item in early.evidence:
        assert item.fusion.method == "score_sum"
        assert set(item.fusion.similarities) == {
            f"q{i}/lancedb.flat_prefilter@1.1.0" for i in range(len(case["inputs"]))
        }
        assert item.hits, "every fused score is backed by a hit with custody"
    (union,) = early.operators
    assert union.early_stop.startswith(("threshold algorithm stopped at depth", "full evaluation: every input"))
    assert full.operators[0].early_stop.startswith("admissible (") and "switched off" in full.operators[0].early_stop
    assert union.search_coverage is SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT
    stops = [g for g in early.gaps if g.kind is GapKind.EARLY_STOP]
    if union.early_stop.startswith("threshold"):
        assert len(stops) == 1 and stops[0].obligation == "u" and stops[0].severity.value == "caveat"
    # Each input's own answer is the same either way: early stop changes only how deep the union reads.
    assert [o.model_dump() for o in early.obligations] == [o.model_dump() for o in full.obligations]


def test_early_stop_reads_less_than_the_table(index_dir: Path) -> None:
    receipt = Engine.open(index_dir).run_sync(roomy_plan("early_stop_union.json"))
    note = receipt.operators[0].early_stop
    assert note.startswith("threshold algorithm stopped at depth"), note
    depth = int(note.split("depth ")[1].split(" ")[0])
    assert depth < 213
    (gap,) = [g for g in receipt.gaps if g.kind is GapKind.EARLY_STOP]
    assert f"read {depth} rows per input (of up to 213)" in gap.detail


def test_the_same_plan_gives_the_same_bytes_whatever_finishes_first(index_dir: Path) -> None:
    plan = _union(CASES[2]["inputs"], k=CASES[2]["k"])
    base = Engine.open(index_dir)
    seen = set()
    for order in itertools.permutations(range(3)):
        delays = {f"q{i}": 0.01 * rank for rank, i in enumerate(order)}
        engine = Engine({n: WrappedAdapter(a, delays=delays) for n, a in base.adapters.items()})
        seen.add(engine.run_sync(plan).normalized_bytes())
    assert len(seen) == 1


def test_a_failed_input_is_a_gap_and_no_early_stop(session_engine: Engine) -> None:
    plan = _union(TWO, k=5)
    adapters = {
        n: WrappedAdapter(a, failures={"q1": unavailable("injected outage")})
        for n, a in session_engine.adapters.items()
    }
    receipt = Engine(adapters).run_sync(plan)
    (union,) = receipt.operators
    assert union.early_stop.startswith("not applied: q1 failed")
    assert union.search_coverage is SearchCoverage.UNKNOWN  # never better than the failed input
    assert any(g.kind is GapKind.BACKEND_ERROR and g.obligation == "q1" for g in receipt.gaps)
    assert not any(g.kind is GapKind.EARLY_STOP for g in receipt.gaps)
    assert len(receipt.evidence) <= 5


def test_a_union_without_k_orders_what_its_inputs_found_by_score(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(_union(TWO, k=None))
    per_input = {o.id: o.evidence_count for o in receipt.obligations}
    assert per_input == {"q0": 4, "q1": 4}
    scores = [i.fusion.score for i in receipt.evidence]
    assert scores == sorted(scores, reverse=True)
    # Every similarity was read: by sorted access, or by random access where an input's answer lacked the row.
    assert all(len(i.fusion.similarities) == 2 for i in receipt.evidence)
    assert receipt.operators[0].early_stop == "union without k keeps everything its inputs found; full evaluation"


def test_approximate_inputs_are_read_to_the_end(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(_union(TWO, k=3, contract="lancedb.ann_prefilter"))
    note = receipt.operators[0].early_stop
    assert "lack exact sorted access" in note and "every input read to the end" in note
    assert not any(g.kind is GapKind.EARLY_STOP for g in receipt.gaps)


def test_an_early_stopped_run_replays_byte_for_byte(index_dir: Path, tmp_path: Path) -> None:
    engine = Engine.open(index_dir)
    receipt = engine.run_sync(roomy_plan("early_stop_union.json"), retain=tmp_path / "kept")
    replayed = engine.replay_sync(receipt, tmp_path / "kept")
    assert replayed.normalized_bytes() == receipt.normalized_bytes()
    full = Engine.open(index_dir, early_stop=False)
    kept_full = full.run_sync(roomy_plan("early_stop_union.json"), retain=tmp_path / "full")
    assert full.replay_sync(kept_full, tmp_path / "full").normalized_bytes() == kept_full.normalized_bytes()


class _NoRandomAccess(WrappedAdapter):
    """A real backend whose random accesses fail, as a remote one might mid-plan."""

    async def scan(self, request: ScanRequest) -> ScanResult:
        if request.params.get("access") == "random":
            raise unavailable("random access refused")
        return await self.inner.scan(request)


def test_a_failed_random_access_stops_the_union_with_a_gap(session_engine: Engine) -> None:
    adapters: dict[str, Adapter] = dict(session_engine.adapters)
    adapters["lancedb"] = _NoRandomAccess(session_engine.adapters["lancedb"])
    receipt = Engine(adapters).run_sync(roomy_plan("early_stop_union.json"))
    (union,) = receipt.operators
    assert union.early_stop.startswith("stopped: random access to"), union.early_stop
    assert union.search_coverage is SearchCoverage.PARTIAL_BACKEND
    assert any(g.kind is GapKind.BACKEND_ERROR and "random access refused" in g.detail for g in receipt.gaps)
    assert not any(g.kind is GapKind.EARLY_STOP for g in receipt.gaps)
    # What it returns has every similarity read; nothing is ranked on a guessed score.
    for item in receipt.evidence:
        assert len(item.fusion.similarities) == 3
    assert all(o.status.value == "satisfied" for o in receipt.obligations)


class _SlowDeepReads(WrappedAdapter):
    """Answers each input's own request at once and every deeper or random read slowly."""

    async def scan(self, request: ScanRequest) -> ScanResult:
        if request.k > 5 or request.params.get("access") == "random":
            await anyio.sleep(600.0)  # never answers in time: only the plan deadline ends it
        return await self.inner.scan(request)


def test_the_plan_deadline_bounds_the_threshold_rounds(session_engine: Engine) -> None:
    plan = roomy_plan("early_stop_union.json")
    # The deadline leaves the inputs' own reads time to answer on this machine, as busy as it
    # is now: several times what the whole plan, deeper reads included, takes without them slowed.
    started = time.monotonic()
    Engine(dict(session_engine.adapters)).run_sync(plan)
    deadline_ms = max(800, round(4 * (time.monotonic() - started) * 1000.0))
    plan["budget"] = {"deadline_ms": deadline_ms, "leg_timeout_ms": 120_000}
    adapters: dict[str, Adapter] = dict(session_engine.adapters)
    adapters["lancedb"] = _SlowDeepReads(session_engine.adapters["lancedb"])
    receipt = Engine(adapters).run_sync(plan)
    (union,) = receipt.operators
    assert union.early_stop.startswith("stopped: sorted access to"), union.early_stop
    assert union.search_coverage is SearchCoverage.PARTIAL_BACKEND
    # The slow read was cancelled at the plan deadline, not waited out: a gap, not absence (I7).
    assert any(g.kind is GapKind.CANCELLED and g.obligation == "answer" for g in receipt.gaps)
    # Each input's own answer arrived in time and stands.
    assert all(o.status.value == "satisfied" for o in receipt.obligations)
