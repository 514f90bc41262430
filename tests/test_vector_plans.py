"""Vector and hybrid obligations end to end: model calls, paraphrases only vectors find,
and the filter support classes of I4 as a user meets them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from race.engine import Engine
from rsc import GapKind, GapSeverity, ObligationStatus, SearchCoverage
from tests.conftest import FIXTURES, load_plan

SCENARIOS = [
    s
    for s in json.loads((FIXTURES / "corpus" / "facts.json").read_text())["scenarios"]
    if s["kind"] == "vector_paraphrase"
]


def _plan(text: str, query_class: str, k: int = 5) -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [
            {"id": "o", "kind": "seek_support", "query": {"text": text}, "query_class": query_class, "k": k}
        ],
    }


def _docs(receipt: Any) -> list[str]:
    return [item.hits[0].doc_id for item in receipt.evidence]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_a_conceptual_query_finds_its_paraphrase(session_engine: Engine, scenario: dict[str, Any]) -> None:
    receipt = session_engine.run_sync(_plan(scenario["query"], "conceptual"))
    ob = receipt.obligations[0]
    assert ob.model_calls == 1 and ob.served_by[0].startswith("lancedb.")
    assert scenario["doc"] in _docs(receipt)
    for item in receipt.evidence:
        assert item.hits[0].custody.score_kind.value == "cosine_distance"


def test_vectors_find_what_keywords_miss(session_engine: Engine) -> None:
    missed_by_keywords = []
    for scenario in SCENARIOS:
        lexical = session_engine.run_sync(_plan(scenario["query"], "lexical"))
        assert lexical.obligations[0].model_calls == 0
        if scenario["doc"] not in _docs(lexical):
            missed_by_keywords.append(scenario["name"])
    assert len(missed_by_keywords) >= 3, missed_by_keywords


def test_a_broad_question_fuses_bm25_and_vectors(session_engine: Engine) -> None:
    scenario = next(s for s in SCENARIOS if s["name"] == "vp_oom_killed")
    receipt = session_engine.run_sync(_plan(scenario["query"], "broad_question"))
    ob = receipt.obligations[0]
    assert ob.model_calls == 1
    assert sorted(s.split(".")[0] for s in ob.served_by) == ["lancedb", "tantivy"]
    assert scenario["doc"] == _docs(receipt)[0]
    both = [i for i in receipt.evidence if len(i.fusion.ranks) == 2]
    assert both, "some evidence is found by both legs"
    for item in both:
        kinds = {h.custody.score_kind.value for h in item.hits}
        assert kinds == {"bm25", "cosine_distance"}, "each hit keeps its own native score kind (I11)"
        assert item.fusion.method == "rrf" and item.fusion.k == 60


def test_postfilter_only_accepted_at_heuristic_coverage_says_so(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(load_plan("postfilter_heuristic.json"))
    ob = receipt.obligations[0]
    assert ob.served_by == ("lancedb.ann_postfilter@1.1.0",)
    assert ob.search_coverage is SearchCoverage.HEURISTIC
    gaps = [g for g in ob.gaps if g.kind is GapKind.POSTFILTER_ONLY_FILTER]
    assert gaps and "cannot be exhaustive" in gaps[0].detail
    assert all(i.hits[0].metadata["doc_type"] == "incident" for i in receipt.evidence)


def test_an_exhaustive_requirement_never_runs_on_a_postfilter(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(load_plan("postfilter_exhaustive.json"))
    ob = receipt.obligations[0]
    assert ob.status is ObligationStatus.UNSATISFIED
    assert ob.served_by == ()
    assert [g.kind for g in ob.gaps] == [GapKind.POSTFILTER_ONLY_FILTER]
    assert ob.gaps[0].severity is GapSeverity.SHORTFALL
    assert receipt.operational.calls == {}


def test_an_exhaustive_filtered_vector_search_uses_the_exact_matrix(session_engine: Engine) -> None:
    # Both exact contracts reach the coverage; the matrix is the cheaper one.
    receipt = session_engine.run_sync(load_plan("exhaustive_vector.json"))
    ob = receipt.obligations[0]
    assert ob.status is ObligationStatus.SATISFIED
    assert ob.served_by == ("lancedb.exact_matrix@1.0.0",)
    assert ob.search_coverage is SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT
