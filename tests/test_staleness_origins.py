"""Staleness and origins, defined once (I13, I16): every hit read, any letter case, undated
documents named, supersession unchecked without the graph said so, only current and relevant
origins counted, and refutation hits kept as candidates until a conflict is established."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from race.engine import Engine
from race.run.freshness import stale_reasons
from race.run.outcome import Item
from rsc import EvidenceStatus, GapKind, GapSeverity, Hit, ObligationStatus
from tests.conftest import FIXTURES, load_plan


def _hit(doc: str, **metadata: Any) -> Hit:
    return Hit.model_validate(
        {
            "key": f"chunk:{doc}#0",
            "doc_id": doc,
            "chunk_id": f"{doc}#0",
            "metadata": metadata,
            "custody": {
                "source_path": f"{doc}.md",
                "line_start": 1,
                "line_end": 2,
                "source_hash": "sha256:00",
                "chunk_id": f"{doc}#0",
                "corpus_revision": "r",
                "index_identity": "i",
                "index_generation": "g",
                "backend": "tantivy",
                "rsc": "tantivy.bm25@1.0.0",
                "request": "q",
                "rank": 1,
                "score": 1.0,
                "score_kind": "bm25",
            },
        }
    )


def _item(*hits: Hit) -> Item:
    return Item(hits[0].key, hits)


class _Graph:
    def __init__(self, superseded: dict[str, tuple[str, ...]] | None = None, fail: bool = False) -> None:
        self.superseded = superseded or {}
        self.fail = fail

    def origins(self, node_ids: Any) -> dict[str, str]:
        return {n: n for n in node_ids}

    def related(self, ids: Any, relation: str, direction: str) -> dict[str, tuple[str, ...]]:
        if self.fail:
            raise KeyError("graph snapshot gone")
        return {i: self.superseded.get(i, ()) for i in ids}


def _reasons(items: list[Item], graph: Any = None, max_age_days: int | None = None) -> Any:
    return stale_reasons(items, as_of="2026-11-30", max_age_days=max_age_days, lineage=graph, node="o")


def test_status_is_read_in_any_case_and_on_every_hit() -> None:
    capital = _item(_hit("a", status="Superseded", date="2026-01-01"))
    second = _item(_hit("b", status="published"), _hit("b", status="RETRACTED"))
    current = _item(_hit("c", status="published", date="2026-01-01"))
    reasons, gaps = _reasons([capital, second, current], _Graph())
    assert reasons == {"chunk:a#0": "a is superseded", "chunk:b#0": "b is retracted"}
    assert gaps == ()


def test_an_undated_document_under_an_age_bound_is_named() -> None:
    undated = _item(_hit("u", status="published"))
    old = _item(_hit("o", date="2020-01-01"))
    reasons, gaps = _reasons([undated, old], _Graph(), max_age_days=365)
    assert list(reasons) == ["chunk:o#0"]
    (gap,) = gaps
    assert gap.kind is GapKind.UNKNOWN_AGE and gap.severity is GapSeverity.CAVEAT and "u" in gap.detail


def test_supersession_unchecked_without_the_graph_or_when_it_fails() -> None:
    item = _item(_hit("a", date="2026-01-01"))
    assert _reasons([item], _Graph({"a": ("b",)}))[0] == {"chunk:a#0": "a is superseded by b"}
    (absent,) = _reasons([item], None)[1]
    assert absent.kind is GapKind.UNCHECKED_SUPERSESSION and absent.severity is GapSeverity.CAVEAT
    (failed,) = _reasons([item], _Graph(fail=True))[1]
    assert failed.kind is GapKind.UNCHECKED_SUPERSESSION and failed.severity is GapSeverity.SHORTFALL
    assert "KeyError" in failed.detail


def test_a_freshness_obligation_without_the_graph_says_supersession_was_unchecked(index_dir: Path) -> None:
    base = Engine.open(index_dir)
    engine = Engine({k: v for k, v in base.adapters.items() if k != "graph"})
    receipt = engine.run_sync(load_plan("freshness_superseded.json"))
    kinds = {g.kind for o in receipt.obligations for g in o.gaps}
    assert GapKind.UNCHECKED_SUPERSESSION in kinds


def test_corroborate_counts_only_current_origins(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(load_plan("corroborate_stale_origin.json"))
    (op,) = receipt.operators
    assert op.independent_origins == ("adr-0012",)
    assert op.status is ObligationStatus.PARTIAL
    left_out = [g for g in op.gaps if g.severity is GapSeverity.CAVEAT and "left out" in g.detail]
    assert left_out and "stale: adr-0006" in left_out[0].detail
    assert not any(i.status is EvidenceStatus.CORROBORATED_FACT for i in receipt.evidence)


def test_corroborate_counts_only_origins_above_the_stated_floor(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(load_plan("corroborate_relevance_floor.json"))
    (op,) = receipt.operators
    assert op.origin_rule is not None and "oom-reports: top 1" in op.origin_rule
    assert len(op.independent_origins or ()) == 2
    corroborated = {i.key for i in receipt.evidence if i.status is EvidenceStatus.CORROBORATED_FACT}
    assert len(corroborated) == 2
    below = next(g for g in op.gaps if "below the relevance floor" in g.detail)
    assert below.severity is GapSeverity.CAVEAT


@pytest.mark.parametrize(
    ("floors", "message"),
    [
        ([{"input": "nobody", "top_n": 1}], "not an input"),
        ([{"input": "oom-reports"}], "needs 'top_n' and/or 'native_score'"),
    ],
)
def test_a_bad_relevance_floor_is_bad_input(session_engine: Engine, floors: Any, message: str) -> None:
    from rsc import InputError

    plan = load_plan("corroborate_relevance_floor.json")
    plan["operators"][0]["floors"] = floors
    with pytest.raises(InputError, match=message):
        session_engine.run_sync(plan)


def test_refutation_hits_are_candidates(session_engine: Engine) -> None:
    plan = load_plan("operators_lexical.json")
    plan["root"] = "fsync-refute"
    plan["operators"] = []
    plan["obligations"] = [o for o in plan["obligations"] if o["id"] == "fsync-refute"]
    receipt = session_engine.run_sync(plan)
    assert receipt.evidence
    assert {i.status for i in receipt.evidence} <= {EvidenceStatus.CANDIDATE_REFUTATION, EvidenceStatus.STALE_EVIDENCE}


def test_fixture_plans_still_parse() -> None:
    for path in sorted((FIXTURES / "plans").glob("*.json")):
        Engine.parse(path)
