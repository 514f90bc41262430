"""Where a run's time went: set-up, plan, pins, legs, fusion, receipt (operational only).

The engine marks each phase as it ends (set-up, which the deadline does not count, is the
deadline clock's: ``race.planning.RunClock``); the executor's fusion time is taken out of the
legs' phase. The figures go to ``operational``, never into the normalized receipt.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal, Protocol

from planner import Explain, Statistics
from race.analysis import analyze
from race.receipt import Operational, Receipt
from race.run.executor import Executor
from rsc import Contract

Phase = Literal["plan", "setup", "pins", "legs", "receipt"]


class Timing(Protocol):
    """The run's deadline clock (``race.planning.RunClock``): its set-up and its wall time."""

    setup_s: float

    def wall_ms(self) -> float: ...


class RunPhases:
    """The run's phases, each marked as it ends, from the start of the run."""

    def __init__(self) -> None:
        self.started = self._last = time.monotonic()
        self.phases: dict[str, float] = {}

    def mark(self, phase: Phase) -> None:
        """The time since the last mark (or the start) was spent in ``phase``."""
        now = time.monotonic()
        self.phases[phase] = round((now - self._last) * 1000.0, 3)
        self._last = now

    def operational(
        self,
        clock: Timing,
        plan_hit: bool,
        receipt_cache: Literal["hit", "miss", "none"],
        executor: Executor | None = None,
        still_running: dict[str, int] | None = None,
    ) -> Operational:
        """The run's operational figures; with ``executor``, its legs, calls, caches, the calls
        it left behind and its fusion time. Set-up is the deadline clock's."""
        setup_ms = round(clock.setup_s * 1000.0, 3)
        phases = {**self.phases, "setup": setup_ms}
        common = {
            "wall_ms": clock.wall_ms(),
            "setup_ms": setup_ms,
            "plan_cache": "hit" if plan_hit else "miss",
            "receipt_cache": receipt_cache,
        }
        if executor is None:
            return Operational(**common, phases=dict(sorted(phases.items())))
        fusion = round(executor.fusion_seconds * 1000.0, 3)
        if "legs" in phases:
            phases["legs"] = round(max(phases["legs"] - fusion, 0.0), 3)
        phases["fusion"] = fusion
        return Operational(
            **common,
            legs={k: vars(v) for k, v in sorted(executor.legs.items())},
            calls=dict(sorted(executor.calls.items())),
            result_cache=dict(executor.cache_counts),
            model_calls_made=executor.model_calls_made,
            left_behind=executor.left_behind,
            still_running=still_running or {},
            phases=dict(sorted(phases.items())),
        )

    def replayed(self, executor: Executor, artifacts: int) -> Operational:
        """A replay's figures: its time, legs and calls, and the retained responses it read."""
        return Operational(
            wall_ms=round((time.monotonic() - self.started) * 1000.0, 3),
            legs={k: vars(v) for k, v in sorted(executor.legs.items())},
            calls=dict(sorted(executor.calls.items())),
            replayed_artifacts=artifacts,
        )


def with_analysis(
    operational: Operational,
    explain: Explain,
    receipt: Receipt,
    contracts: Sequence[Contract],
    statistics: Statistics,
) -> Operational:
    """``operational`` with the analysis of the run it measured (``race.analysis.analyze``)."""
    analysis = analyze(
        explain,
        legs=operational.legs,
        contracts={c.ref: c for c in contracts},
        statistics=statistics,
        phases=operational.phases,
        wall_ms=operational.wall_ms,
        gaps=tuple(f"{g.obligation}: {g.kind.value} {g.detail}" for g in receipt.gaps),
    )
    return operational.model_copy(update={"analysis": analysis})
