"""A node read by several parents is one immutable value (I5; docs/invariants.md#shared-nodes).

Each plan under fixtures/plans/shared/ has an obligation that feeds two or three operators
(freshen + cascade, corroborate + union, oppose + intersect). Every order in which the legs
and the operators finish gives the same normalized receipt bytes: delays are injected in
front of every leg and every operator, over all their permutations.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest

import race.run.executor
from planner import OperatorNode, walk
from race.engine import Engine
from race.run.operators import OPERATORS, Operator
from race.run.outcome import Outcome
from rsc import EvidenceStatus, ObligationStatus
from tests.conftest import FIXTURES, wrapped_engine

SHARED = sorted((FIXTURES / "plans" / "shared").glob("*.json"))
STEP = 0.02


def _delayed(delays: Mapping[str, float]) -> dict[Any, Operator]:
    import anyio

    def wrap(inner: Operator) -> Operator:
        async def run(node: OperatorNode, op: Any, ctx: Any) -> Outcome:
            outcome = await inner(node, op, ctx)
            # The operator's parent sees it finish later: the order parents resume in changes.
            await anyio.sleep(delays.get(node.node, 0.0))
            return outcome

        return run

    return {kind: wrap(fn) for kind, fn in OPERATORS.items()}


def _orders(base: Engine, path: Any) -> list[tuple[dict[str, float], dict[str, float]]]:
    explain = base.plan_sync(path)
    nodes = walk(explain.physical)
    legs = sorted({n.node for n in nodes if not isinstance(n, OperatorNode)})
    ops = sorted({n.node for n in nodes if isinstance(n, OperatorNode) and n.node != explain.physical.node})
    cases = []
    for leg_order in itertools.permutations(range(len(legs))):
        for op_order in itertools.permutations(range(len(ops))):
            cases.append(
                (
                    {leg: STEP * i for leg, i in zip(legs, leg_order, strict=True)},
                    {op: STEP * i for op, i in zip(ops, op_order, strict=True)},
                )
            )
    return cases


@pytest.mark.parametrize("path", SHARED, ids=[p.stem for p in SHARED])
def test_every_completion_order_gives_the_same_bytes(
    index_dir: Any, path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = Engine.open(index_dir)
    seen: dict[bytes, str] = {}
    for leg_delays, op_delays in _orders(base, path):
        engine, _ = wrapped_engine(base, delays=leg_delays)
        monkeypatch.setattr(race.run.executor, "OPERATORS", _delayed(op_delays))
        receipt = engine.run_sync(path)
        seen.setdefault(receipt.normalized_bytes(), f"legs {leg_delays}, operators {op_delays}")
    assert len(seen) == 1, f"{path.name}: {len(seen)} different receipts: {list(seen.values())}"


def test_freshen_does_not_mark_what_a_cascade_reads(index_dir: Any) -> None:
    """The cascade judges the shared stage by its own answer: freshen's marks are freshen's."""
    receipt = Engine.open(index_dir).run_sync(FIXTURES / "plans" / "shared" / "freshen_cascade.json")
    by_id = {o.id: o for o in receipt.operators}
    defaults = next(o for o in receipt.obligations if o.id == "defaults")
    assert defaults.status is ObligationStatus.SATISFIED
    assert any(g.kind.value == "stale_evidence" for g in by_id["fresh"].gaps)
    # The shared obligation marked nothing stale itself: it carries no freshness requirement.
    assert not any(g.kind.value == "stale_evidence" for g in defaults.gaps)


def test_oppose_marks_its_own_copy_of_the_refutation(index_dir: Any) -> None:
    """The oppose marks conflicts in what it returns; the intersect's copy of the same
    refutation answer is unmarked, and the root keeps the strongest status of the two."""
    receipt = Engine.open(index_dir).run_sync(FIXTURES / "plans" / "shared" / "oppose_intersect.json")
    refuting = [i for i in receipt.evidence if "refute" in i.obligations]
    assert refuting
    for item in refuting:
        both = "claim" in item.obligations
        assert item.status is (EvidenceStatus.CONFLICTING_EVIDENCE if both else EvidenceStatus.CANDIDATE_REFUTATION)
