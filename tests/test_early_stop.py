"""I9: early stop only where every input declares exact sorted and random access and the
aggregation is monotone; everywhere else full evaluation, and explain says which and why."""

from __future__ import annotations

from typing import Any

from planner import OperatorNode, compile_plan, plan_from_dict
from race.engine import Engine, known_contracts
from rsc import Contract
from tests.conftest import WrappedAdapter

GENERATIONS = {"tantivy": "t", "lancedb": "l", "graph": "g"}


def _plan() -> dict[str, Any]:
    def ob(ob_id: str, text: str) -> dict[str, Any]:
        return {
            "id": ob_id,
            "kind": "seek_support",
            "query": {"text": text},
            "query_class": "conceptual",
            "k": 4,
            "allow_contracts": ["lancedb.flat_prefilter"],
        }

    return {
        "schema_version": "race.plan/1",
        "root": "u",
        "obligations": [ob("a", "the broker ran out of memory"), ob("b", "disks filled up and the cluster slowed")],
        "operators": [{"id": "u", "op": "union", "inputs": ["a", "b"]}],
    }


def _with_random_access(contracts: tuple[Contract, ...]) -> tuple[Contract, ...]:
    return tuple(
        c.model_copy(update={"early_stop": c.early_stop.model_copy(update={"random_access": True})})
        if c.rsc_id == "lancedb.flat_prefilter"
        else c
        for c in contracts
    )


def test_shipped_contracts_are_evaluated_in_full_and_say_why(session_engine: Engine) -> None:
    explain = compile_plan(
        plan_from_dict(_plan()),
        contracts=known_contracts(),
        backend_generations=GENERATIONS,
        stats=session_engine.statistics(),
    )
    assert isinstance(explain.physical, OperatorNode)
    verdict = explain.physical.early_stop
    assert not verdict.admissible
    assert "lancedb.flat_prefilter@1.0.0 lack sorted+random access" in verdict.reason
    receipt = session_engine.run_sync(_plan())
    assert receipt.operators[0].early_stop == verdict.reason


def test_sorted_and_random_access_on_every_input_makes_it_admissible(session_engine: Engine) -> None:
    explain = compile_plan(
        plan_from_dict(_plan()),
        contracts=_with_random_access(known_contracts()),
        backend_generations=GENERATIONS,
        stats=session_engine.statistics(),
    )
    assert isinstance(explain.physical, OperatorNode)
    assert explain.physical.early_stop.admissible
    assert "monotone" in explain.physical.early_stop.reason


class _RandomAccessLance(WrappedAdapter):
    def contracts(self) -> tuple[Contract, ...]:  # type: ignore[override]
        return _with_random_access(self.inner.contracts())


def test_an_admissible_early_stop_never_changes_the_evidence(session_engine: Engine) -> None:
    """The receipt says the admissible operator was evaluated in full; the evidence is the
    same as with contracts that never allowed early stop."""
    full = Engine(dict(session_engine.adapters)).run_sync(_plan())
    adapters = dict(session_engine.adapters)
    adapters["lancedb"] = _RandomAccessLance(session_engine.adapters["lancedb"])
    admissible = Engine(adapters).run_sync(_plan())
    assert admissible.operators[0].early_stop.startswith("admissible (")
    assert admissible.operators[0].early_stop.endswith("evaluated in full")
    assert [i.key for i in admissible.evidence] == [i.key for i in full.evidence]
    assert [i.fusion for i in admissible.evidence] == [i.fusion for i in full.evidence]
