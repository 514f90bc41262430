"""Operator semantics and the completion-order invariant (I5)."""

from __future__ import annotations

import itertools
import random

import anyio
import pytest

from race.engine import Engine
from rsc import EvidenceStatus, GapKind, GapSeverity, SearchCoverage
from tests.conftest import load_plan, roomy_plan, wrapped_engine

PLAN = "operators_lexical.json"


@pytest.fixture(scope="module")
def receipt(index_dir):  # type: ignore[no-untyped-def]
    return Engine.open(index_dir).run_sync(load_plan(PLAN))


def _op(receipt, op_id):  # type: ignore[no-untyped-def]
    return next(o for o in receipt.operators if o.id == op_id)


def test_intersect_keeps_documents_found_by_every_input(receipt) -> None:  # type: ignore[no-untyped-def]
    both = [i for i in receipt.evidence if {"stall-incident", "stall-official"} <= set(i.obligations)]
    assert both
    for item in both:
        assert item.hits[0].metadata["authority"] == "official"


def test_refine_after_top_k_is_a_postfilter(receipt) -> None:  # type: ignore[no-untyped-def]
    recent = _op(receipt, "recent")
    assert recent.search_coverage is SearchCoverage.HEURISTIC
    assert [g.kind for g in recent.gaps] == [GapKind.POSTFILTER_ONLY_FILTER]


def test_oppose_keeps_both_legs_and_reports_opposition_coverage(receipt) -> None:  # type: ignore[no-untyped-def]
    debate = _op(receipt, "debate")
    assert debate.opposition_coverage is SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT
    refuting = [i for i in receipt.evidence if "fsync-refute" in i.obligations]
    supporting = [i for i in receipt.evidence if i.obligations == ("fsync-claim",)]
    assert refuting and supporting
    # Found by the refutation leg alone: a candidate; found by both legs: an established conflict.
    for item in refuting:
        both = "fsync-claim" in item.obligations
        expected = EvidenceStatus.CONFLICTING_EVIDENCE if both else EvidenceStatus.CANDIDATE_REFUTATION
        assert item.status is expected or item.status is EvidenceStatus.STALE_EVIDENCE, item.key
    assert any(i.status is EvidenceStatus.CANDIDATE_REFUTATION for i in refuting)
    assert all(i.status is EvidenceStatus.CANDIDATE_FACT for i in supporting)
    assert receipt.coverage.opposition_coverage is SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT


def test_oppose_without_refuting_hits_never_claims_no_defeater(engine: Engine) -> None:
    plan = load_plan(PLAN)
    for ob in plan["obligations"]:
        if ob["id"] == "fsync-refute":
            ob["query"] = {"text": "zyzzyva quokka"}
    receipt = engine.run_sync(plan)
    debate = next(o for o in receipt.operators if o.id == "debate")
    gap = next(g for g in debate.gaps if g.kind is GapKind.MISSING_EVIDENCE)
    assert "not evidence that no defeater exists" in gap.detail


def test_freshen_drop_removes_stale_evidence_and_says_so(receipt) -> None:  # type: ignore[no-untyped-def]
    fresh_items = [i for i in receipt.evidence if "old-defaults" in i.obligations]
    assert fresh_items
    for item in fresh_items:
        assert item.hits[0].metadata["date"] >= "2024-11-30"
        assert item.hits[0].metadata.get("status") != "superseded"
    gap = next(g for g in _op(receipt, "fresh").gaps if g.kind is GapKind.STALE_EVIDENCE)
    assert "adr-0006 is superseded" in gap.detail and gap.severity is GapSeverity.CAVEAT


def test_coverage_never_exceeds_the_weakest_required_input(receipt) -> None:  # type: ignore[no-untyped-def]
    assert receipt.coverage.search_coverage.rank <= min(o.search_coverage.rank for o in receipt.operators)


def _legs() -> list[str]:
    return [o["id"] for o in load_plan(PLAN)["obligations"]]


async def _run_with_order(base: Engine, order: tuple[str, ...]) -> bytes:
    delays = {ob: 0.004 * i for i, ob in enumerate(order)}
    engine, _ = wrapped_engine(base, delays=delays)
    receipt = await engine.run(load_plan(PLAN))
    return receipt.normalized_bytes()


def test_completion_order_never_changes_the_receipt(index_dir) -> None:  # type: ignore[no-untyped-def]
    """Every permutation of which of the five legs finishes first gives identical bytes."""
    base = Engine.open(index_dir)
    reference = anyio.run(_run_with_order, base, tuple(_legs()))
    orders = list(itertools.permutations(_legs()))
    assert len(orders) == 120

    async def all_orders() -> list[bytes]:
        return [await _run_with_order(base, order) for order in orders]

    results = anyio.run(all_orders)
    assert all(r == reference for r in results)


def test_random_jitter_never_changes_the_receipt(index_dir) -> None:  # type: ignore[no-untyped-def]
    base = Engine.open(index_dir)
    rng = random.Random(7)
    legs = _legs()

    async def jittered() -> list[bytes]:
        out = []
        for _ in range(80):
            engine, _ = wrapped_engine(base, delays={leg: rng.random() * 0.003 for leg in legs})
            out.append((await engine.run(load_plan(PLAN))).normalized_bytes())
        return out

    results = anyio.run(jittered)
    assert len(set(results)) == 1


def test_a_changed_generation_is_always_a_cache_miss(engine: Engine) -> None:
    cold = engine.run_sync(load_plan(PLAN))
    assert cold.operational.result_cache["hit"] == 0
    warm = engine.run_sync(load_plan(PLAN))
    assert warm.operational.receipt_cache == "hit"
    tantivy = engine.adapters["tantivy"]
    real = tantivy.generation

    def bumped() -> str:
        return real() + "+1"

    tantivy.generation = bumped  # type: ignore[method-assign]
    try:
        after = engine.run_sync(load_plan(PLAN))
    finally:
        tantivy.generation = real  # type: ignore[method-assign]
    assert after.operational.receipt_cache == "miss"
    assert after.operational.result_cache["hit"] == 0
    assert after.fingerprints.plan != cold.fingerprints.plan


def test_result_cache_on_disk_survives_a_new_engine(index_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    first = Engine.open(index_dir, cache_dir=tmp_path / "cache")
    cold = first.run_sync(roomy_plan(PLAN))  # a leg timed out on a busy machine would not be cached
    second = Engine.open(index_dir, cache_dir=tmp_path / "cache")
    warm = second.run_sync(roomy_plan(PLAN))
    assert warm.operational.result_cache["hit"] == len(warm.operational.legs)
    assert warm.normalized_bytes() == cold.normalized_bytes()
