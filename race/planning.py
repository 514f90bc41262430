"""A run's clock and its planning: the plan deadline covers the whole run (I17).

The clock starts when ``Engine.run`` is called. Reading the backends' generations, planning
(a plan-cache lookup, or a compile off the event loop) and every node's work count against
the plan's deadline; only the backends' set-up (imports, opens, model weights, matrices:
``race.facts.set_up``) is not charged to it, and the clock is moved by exactly the time it
took. A plan whose compile does not finish within its deadline is refused (``BoundExceeded``).

Every generation read and every pin has its own bound (``RunClock.read_bound``), a share of
the deadline, so that one backend that cannot answer leaves the others and the legs their
time. The executor's legs stop starting a little before the deadline (``RunClock.legs_deadline``)
and the executor stops evaluating at ``RunClock.cut`` (``race.run.deadline``): early enough that
the nodes not reached are recorded as ``resource_limited`` gaps and the receipt is built
within the deadline, however many nodes the plan has.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from planner import Explain, LogicalPlan, compile_plan, plan_digest
from race.facts import BackendFacts
from race.indexing.indexing import check_plan_filters
from race.state.cache import PlanCache
from race.tracing import span
from rsc import BoundExceeded

_log = logging.getLogger(__name__)

READ_SHARE = 0.25
"""The share of the plan deadline one generation read, or one pin, may take."""
FINISH_SHARE = 0.25
"""The largest share of the deadline each of the two reserves below may keep back."""
FINISH_PER_NODE_S = 0.00025
"""What each node of a plan is allowed for its share of the receipt, and again for the
operators to combine what was read after its last leg."""
FINISH_MIN_S = 0.05
"""The least the operators' reserve keeps back, whatever the plan's size: unwinding the legs
cancelled at the legs' deadline and combining what they read takes a few turns of a busy loop."""


@dataclass
class RunClock:
    """The plan deadline of one run, as a ``time.monotonic`` instant."""

    started: float
    deadline_ms: int
    setup_s: float = 0.0

    @property
    def deadline(self) -> float:
        return self.started + self.setup_s + self.deadline_ms / 1000.0

    @property
    def read_bound(self) -> float:
        return self.deadline_ms / 1000.0 * READ_SHARE

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def cut(self, nodes: int) -> float:
        """When the executor stops evaluating nodes: the deadline less the receipt's reserve,
        0.25 ms a node (at most a quarter of the deadline)."""
        return self.deadline - min(nodes * FINISH_PER_NODE_S, self._share)

    def legs_deadline(self, nodes: int) -> float:
        """When the legs stop starting (and running legs are cancelled): before the cut by the
        operators' reserve, 0.25 ms a node but at least 50 ms (at most a quarter of the
        deadline), so that what was read is combined before the cut."""
        return self.cut(nodes) - min(max(nodes * FINISH_PER_NODE_S, FINISH_MIN_S), self._share)

    @property
    def _share(self) -> float:
        return self.deadline_ms / 1000.0 * FINISH_SHARE

    def wall_ms(self) -> float:
        """The time the deadline budgets: since the run started, set-up excepted."""
        return round((time.monotonic() - self.started - self.setup_s) * 1000.0, 3)


class Planning(BackendFacts):
    """Plans made with the facts of a set of generations, kept in the plan cache."""

    plan_cache: PlanCache[Explain]
    absent: tuple[tuple[Any, str], ...] = ()

    def _plan(
        self, plan: LogicalPlan, generations: Mapping[str, str], where: str, key: Any = None
    ) -> tuple[Explain, bool]:
        # The plan's own canonical digest, computed once per plan object, stands for the plan.
        # The key is the tuple of every input itself, compared whole: as exact as a fingerprint
        # of them (it is what one would hash) and a fraction of the cost on every run.
        key = self._plan_key(plan, generations) if key is None else key
        cached = self.plan_cache.get(key)
        with span("race.plan", where=where, cache_hit=cached is not None) as traced:
            explain = cached if cached is not None else self._compile(plan, generations, where, key)
            traced.set(fingerprint=explain.fingerprints.plan, physical=explain.fingerprints.physical)
        _log.debug("%s: plan %s %s", where, explain.fingerprints.plan, "cache hit" if cached else "compiled")
        return explain, cached is not None

    def _plan_key(self, plan: LogicalPlan, generations: Mapping[str, str]) -> Any:
        return (plan_digest(plan), self.statistics_fingerprint(generations), tuple(sorted(generations.items())))

    def _compile(self, plan: LogicalPlan, generations: Mapping[str, str], where: str, key: Any) -> Explain:
        check_plan_filters(plan, self.adapters.values(), where=where)
        explain = compile_plan(
            plan,
            contracts=self.contracts_at(generations),
            backend_generations=generations,
            stats=self.statistics(generations),
            where=where,
            absent=self.absent,
        )
        self.plan_cache.put(key, explain)
        return explain

    async def _plan_within(
        self, plan: LogicalPlan, generations: Mapping[str, str], where: str, clock: RunClock
    ) -> tuple[Explain, bool]:
        """``_plan`` within the run's deadline: a plan in the cache at once; a compile on a worker
        thread, refused with ``BoundExceeded`` when it has not finished by the deadline."""
        key = self._plan_key(plan, generations)
        if self.plan_cache.get(key) is not None:
            return self._plan(plan, generations, where, key)
        with anyio.move_on_after(max(clock.remaining(), 0.0)):
            return await anyio.to_thread.run_sync(self._plan, plan, generations, where, key, abandon_on_cancel=True)
        raise BoundExceeded(
            f"not planned within the plan deadline of {clock.deadline_ms} ms "
            f"({len(plan.obligations)} obligations, {len(plan.operators)} operators); "
            "raise budget.deadline_ms, or plan it ahead with Engine.warm",
            where=where,
        )
