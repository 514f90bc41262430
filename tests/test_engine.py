"""End to end over the tantivy index of the bundled corpus: statuses, gaps, operators."""

from __future__ import annotations

import json

import pytest

from race.engine import Engine
from rsc import GapKind, ObligationStatus, SearchCoverage
from tests.conftest import FIXTURES, load_plan, roomy_plan, unavailable, wrapped_engine


def _ob(receipt, ob_id):  # type: ignore[no-untyped-def]
    return next(o for o in receipt.obligations if o.id == ob_id)


def _kinds(receipt, ob_id):  # type: ignore[no-untyped-def]
    return {g.kind for g in _ob(receipt, ob_id).gaps}


SYMBOLIC = {"cve-id": "tantivy.exact", "fixed-release": "tantivy.bm25", "python-deps": "graph.traverse"}


def test_showcase_counts_model_calls_only_where_a_model_ran(engine: Engine) -> None:
    """I10: exact, lexical and graph paths make no model call; each query embedding is one."""
    receipt = engine.run_sync(load_plan("showcase.json"))
    plan = load_plan("showcase.json")
    assert sorted(o.id for o in receipt.obligations) == sorted(o["id"] for o in plan["obligations"])
    for ob in receipt.obligations:
        assert ob.status is ObligationStatus.SATISFIED, ob
        if ob.id in SYMBOLIC:
            assert ob.model_calls == 0 and ob.served_by[0].startswith(SYMBOLIC[ob.id]), ob
        else:
            assert ob.model_calls == 1 and any(s.startswith("lancedb.") for s in ob.served_by), ob
    assert receipt.operational.model_calls_made == 2
    assert [m["name"] for m in receipt.models] == ["sentence-transformers/all-MiniLM-L6-v2"]
    for item in receipt.evidence:
        for hit in item.hits:
            c = hit.custody
            assert c.source_hash.startswith("sha256:") and c.line_start <= c.line_end
            if hit.key.startswith("chunk:"):
                source = (FIXTURES / "corpus" / c.source_path).read_text()
                assert source[c.char_start : c.char_end] == hit.text


def test_same_inputs_same_bytes(index_dir) -> None:  # type: ignore[no-untyped-def]
    one = Engine.open(index_dir).run_sync(roomy_plan("showcase.json"))
    two = Engine.open(index_dir).run_sync(roomy_plan("showcase.json"))
    assert one.normalized_bytes() == two.normalized_bytes()
    assert one.lineage == two.lineage


def test_result_cache_hit_gives_the_same_normalized_bytes(engine: Engine) -> None:
    cold = engine.run_sync(roomy_plan("showcase.json"))
    warm = engine.run_sync(roomy_plan("showcase.json"))
    assert cold.operational.receipt_cache == "miss"
    assert warm.operational.receipt_cache == "hit" and warm.operational.plan_cache == "hit"
    assert warm.normalized_bytes() == cold.normalized_bytes()
    engine.clear_receipt_cache()
    legs = engine.run_sync(roomy_plan("showcase.json"))
    assert legs.operational.result_cache["hit"] == len(cold.operational.legs)
    assert legs.normalized_bytes() == cold.normalized_bytes()


def test_union_fuses_by_rrf_with_provenance(engine: Engine) -> None:
    receipt = engine.run_sync(load_plan("showcase.json"))
    fused = [i for i in receipt.evidence if i.fusion.method == "rrf"]
    assert fused
    for item in fused:
        assert item.fusion.k == 60 and item.fusion.tie_break == "key"
        expected = sum(1 / (60 + r) for r in item.fusion.ranks.values())
        assert item.fusion.score == pytest.approx(expected, abs=1e-12)
    scores = [(-(i.fusion.score or 0.0), i.key) for i in receipt.evidence if i.fusion.method == "rrf"]
    assert scores == sorted(scores)


def test_cascade_stops_at_the_first_sufficient_stage(engine: Engine) -> None:
    receipt = engine.run_sync(load_plan("cascade_lexical.json"))
    assert _ob(receipt, "advisories").status is ObligationStatus.SATISFIED
    later = _ob(receipt, "anywhere")
    assert later.status is ObligationStatus.NOT_ATTEMPTED
    assert [g.kind for g in later.gaps] == [GapKind.NOT_NEEDED]
    assert "anywhere/tantivy.bm25@1.0.0" not in receipt.operational.legs


def test_cascade_runs_the_next_stage_when_insufficient(engine: Engine) -> None:
    receipt = engine.run_sync(load_plan("cascade_insufficient.json"))
    assert _ob(receipt, "adr-only").evidence_count < 2
    assert _ob(receipt, "anywhere").status is ObligationStatus.SATISFIED
    assert _ob(receipt, "anywhere").evidence_count == 5


def test_fallback_moves_on_only_after_an_error(engine: Engine) -> None:
    fine = engine.run_sync(load_plan("fallback_lexical.json"))
    assert _ob(fine, "secondary").status is ObligationStatus.NOT_ATTEMPTED
    failing, _ = wrapped_engine(engine, failures={"primary": unavailable("disk on fire")})
    receipt = failing.run_sync(load_plan("fallback_lexical.json"))
    primary = _ob(receipt, "primary")
    assert primary.status is ObligationStatus.UNSATISFIED
    assert GapKind.BACKEND_ERROR in _kinds(receipt, "primary")
    assert any("disk on fire" in g.detail for g in primary.gaps)
    assert _ob(receipt, "secondary").status is ObligationStatus.SATISFIED
    assert receipt.evidence and all("secondary" in i.obligations for i in receipt.evidence)


@pytest.mark.anyio
async def test_a_slow_leg_is_a_timeout_gap_not_an_empty_result(engine: Engine) -> None:
    plan = load_plan("showcase.json")
    # Only the slow leg has a short deadline: every other leg has room to answer on a busy machine.
    plan["budget"] = {"deadline_ms": 120_000, "leg_timeout_ms": 60_000}
    next(o for o in plan["obligations"] if o["id"] == "tls-defeater")["deadline_ms"] = 150
    slow, _ = wrapped_engine(engine, delays={"tls-defeater": 60.0})
    receipt = await slow.run(plan)
    # The run (set-up apart: operational.setup_ms) did not wait for the slow answer.
    assert receipt.operational.wall_ms < 60_000
    ob = _ob(receipt, "tls-defeater")
    assert ob.status is ObligationStatus.UNSATISFIED
    assert ob.search_coverage is SearchCoverage.UNKNOWN
    assert GapKind.TIMEOUT in _kinds(receipt, "tls-defeater")
    assert _ob(receipt, "cve-id").status is ObligationStatus.SATISFIED
    assert receipt.coverage.search_coverage is SearchCoverage.UNKNOWN


@pytest.mark.anyio
async def test_the_plan_deadline_cancels_running_legs(engine: Engine) -> None:
    plan = load_plan("showcase.json")
    plan["budget"] = {"deadline_ms": 200, "leg_timeout_ms": 60_000}
    slow, _ = wrapped_engine(engine, delays={"fixed-release": 60.0})
    receipt = await slow.run(plan)
    assert GapKind.CANCELLED in _kinds(receipt, "fixed-release")
    assert any("plan deadline" in g.detail for g in _ob(receipt, "fixed-release").gaps)


def test_unsupported_hard_filter_makes_the_obligation_unsatisfied(engine: Engine) -> None:
    receipt = engine.run_sync(load_plan("unsupported_filter.json"))
    ob = _ob(receipt, "o1")
    assert ob.status is ObligationStatus.UNSATISFIED
    assert GapKind.UNSUPPORTED_FILTER in _kinds(receipt, "o1")
    assert receipt.evidence == ()


def test_query_text_cannot_set_filters_or_metadata(engine: Engine) -> None:
    """I14: 'doc_type:advisory' and 'SYSTEM: mark … pinned, mandatory' in text are just words."""
    receipt = engine.run_sync(load_plan("adversarial_text.json"))
    injected = _ob(receipt, "injected")
    assert injected.mandatory is False
    doc_types = {i.hits[0].metadata.get("doc_type") for i in receipt.evidence if "injected" in i.obligations}
    assert doc_types - {"advisory"}, "text must not have filtered to advisories"
    for item in receipt.evidence:
        for hit in item.hits:
            assert hit.custody.filters_pushed == ()
    blob = json.dumps(receipt.normalized())
    for word in ("pinned", "trusted", "attention"):
        assert f'"{word}"' not in blob
    adversarial = [i for i in receipt.evidence if i.hits[0].doc_id == "blog-2024-12-16-cve-2024-31337-tls-is-enough"]
    assert adversarial and all(i.status.value != "corroborated_fact" for i in adversarial)


def test_superseded_evidence_is_marked_stale_and_never_satisfies(engine: Engine) -> None:
    receipt = engine.run_sync(load_plan("freshness_superseded.json"))
    stale = [i for i in receipt.evidence if i.status.value == "stale_evidence"]
    assert stale and all(i.hits[0].metadata.get("status") == "superseded" for i in stale)
    current = [i for i in receipt.evidence if i.status.value != "stale_evidence"]
    assert [i.rank for i in current] == list(range(1, len(current) + 1)), "current evidence ranks first"
    assert GapKind.STALE_EVIDENCE in _kinds(receipt, "o1")
    assert receipt.coverage.support_closure.value == "stale"


def test_every_obligation_appears_in_the_receipt(engine: Engine) -> None:
    for path in sorted((FIXTURES / "plans").glob("*.json")):
        plan = json.loads(path.read_text())
        if any(o.get("egress") == "remote_ok" for o in plan["obligations"]):
            continue
        receipt = engine.run_sync(plan)
        assert sorted(o.id for o in receipt.obligations) == sorted(o["id"] for o in plan["obligations"]), path.name
        for ob in receipt.obligations:
            if ob.status is not ObligationStatus.SATISFIED:
                assert ob.gaps, f"{path.name}: {ob.id} is {ob.status.value} without a gap"
