"""The little the operators of one run share: the plan, the leg runner, the graph's lineage,
and how to evaluate a child. Operators read it; only the executor records receipts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import anyio

from planner import LogicalPlan, Obligation, OperatorNode, PhysicalNode, ScanNode, walk
from race.receipt import Roles
from race.run.freshness import Lineage
from race.run.legs import Answer, LegRunner
from race.run.outcome import Outcome
from race.run.roles import DEFAULT_ROLES

_T = TypeVar("_T")


@dataclass(frozen=True)
class RunContext:
    plan: LogicalPlan
    legs: LegRunner
    lineage: Lineage | None
    early_stop: bool
    evaluate: Callable[[PhysicalNode], Awaitable[Outcome]]
    """The outcome of a physical node; a node read by several parents runs once."""
    skip: Callable[[PhysicalNode, str], None]
    """Note that the obligations under a node were not run by this parent, and why."""
    roles: Roles = DEFAULT_ROLES
    """The fields and relations the index's schema gives RACE's roles (staleness, origins)."""

    def obligation(self, node_id: str) -> Obligation:
        ob = self.plan.obligation(node_id)
        if ob is None:  # pragma: no cover - the planner names only obligations of the plan
            raise LookupError(f"physical node {node_id} serves no obligation")
        return ob

    def obligations_under(self, node: PhysicalNode) -> list[Obligation]:
        found = (self.plan.obligation(n.node) for n in walk(node) if not isinstance(n, OperatorNode))
        return [ob for ob in found if ob is not None]

    async def inputs(self, nodes: Sequence[PhysicalNode]) -> tuple[Outcome, ...]:
        """Every node's outcome, run concurrently, in plan order (never completion order)."""
        return await gather([partial(self.evaluate, child) for child in nodes])

    async def fetch_all(self, reads: Sequence[tuple[ScanNode, str, str]]) -> tuple[Answer, ...]:
        """Every ``(scan, obligation, label)`` read at once, answers in the order asked."""
        return await gather([partial(self.legs.fetch, *read) for read in reads])


FAN_OUT = 64
"""At most this many calls of one ``gather`` run at once; the next starts as one ends. A very
wide operator then starts its first legs at once, instead of giving every node its first step
before any leg can answer, and a run cut short has that many calls to unwind, not thousands."""


async def gather(calls: Sequence[Callable[[], Awaitable[_T]]], limit: int = FAN_OUT) -> tuple[_T, ...]:
    """Run the calls concurrently, ``limit`` at a time, started in call order; results in call
    order (never completion order). Each call contains its own faults."""
    if len(calls) == 1:
        return (await calls[0](),)
    results: list[_T | None] = [None] * len(calls)
    cursor = iter(range(len(calls)))

    async def worker() -> None:
        # Each worker takes the next call not started yet: a plan-order queue, no task per call.
        for i in cursor:
            results[i] = await calls[i]()

    async with anyio.create_task_group() as tg:
        for _ in range(min(limit, len(calls))):
            tg.start_soon(worker)
    return tuple(r for r in results if r is not None)
