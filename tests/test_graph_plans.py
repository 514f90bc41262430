"""Graph-served obligations and the operators that need source dependence (I10, I13, I17)."""

from __future__ import annotations

from race.engine import Engine
from rsc import EvidenceStatus, GapKind, ObligationStatus, SearchCoverage
from tests.conftest import load_plan


def _gaps(receipt, node):  # type: ignore[no-untyped-def]
    return [g for g in receipt.gaps if g.obligation == node]


def test_dependency_chain_is_answered_without_model_calls(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(load_plan("dependency_chain.json"))
    ob = receipt.obligations[0]
    assert ob.model_calls == 0 and ob.status is ObligationStatus.SATISFIED
    assert ob.search_coverage is SearchCoverage.BOUNDED_STRUCTURAL
    keys = [i.key for i in receipt.evidence]
    assert keys == ["entity:libkestrel", "entity:kframe-codec", "entity:quill-compress"]
    assert [i.hits[0].custody.score for i in receipt.evidence] == [1.0, 2.0, 3.0]
    assert all(i.status is EvidenceStatus.DERIVED_RELATION for i in receipt.evidence)


def test_reposts_of_one_origin_do_not_corroborate(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(load_plan("corroborate_reposts.json"))
    op = receipt.operators[0]
    assert op.independent_origins == ("ksa-2024-003-rev2",)
    assert op.status is ObligationStatus.PARTIAL
    weak = [g for g in _gaps(receipt, "c") if g.kind is GapKind.WEAK_SOURCE]
    assert weak and "3 documents come from 1" in weak[0].detail
    assert not any(i.status is EvidenceStatus.CORROBORATED_FACT for i in receipt.evidence)
    assert {i.origin for i in receipt.evidence} == {"ksa-2024-003-rev2"}


def test_independent_origins_corroborate(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(load_plan("corroborate_independent.json"))
    op = receipt.operators[0]
    assert len(op.independent_origins or ()) == 2
    assert op.status is ObligationStatus.SATISFIED
    assert not [g for g in receipt.gaps if g.kind is GapKind.WEAK_SOURCE]
    assert op.origin_rule is not None and "none stated" in op.origin_rule
    assert all(i.status is EvidenceStatus.CORROBORATED_FACT for i in receipt.evidence)


def test_a_traversal_that_meets_its_node_budget_says_so(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(load_plan("node_budget.json"))
    ob = receipt.obligations[0]
    assert ob.status is ObligationStatus.PARTIAL
    assert ob.support_closure.value == "resource_limited"
    assert GapKind.RESOURCE_LIMITED in {g.kind for g in ob.gaps}
    assert ob.search_coverage.rank < SearchCoverage.BOUNDED_STRUCTURAL.rank


def test_join_keeps_documents_that_cite_a_superseded_one(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(load_plan("join_cites_superseded.json"))
    assert receipt.evidence
    graph = session_engine.adapters["graph"]
    for item in receipt.evidence:
        assert item.relations, item.key
        for relation in item.relations:
            verb, target = relation.split(" -> ")
            assert verb == "cites"
            assert target in graph.related([item.hits[0].doc_id], "cites", "out")[item.hits[0].doc_id]  # type: ignore[attr-defined]
