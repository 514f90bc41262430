"""The reserves a run keeps back grow with how late its event loop runs (operational only).

The legs stop starting at the legs' deadline and the executor stops evaluating at its cut
(``race.planning.RunClock``); what comes after each (combining what was read; recording the
nodes not reached and building the receipt) is budgeted for a loop that wakes on time. On a
busy machine every step of it starts late by as much as the loop does. So, for the length of
a run, a ticker watches how late the loop wakes, and both instants move earlier by the largest
lateness seen so far: each reserve grows by it, to at most ``MAX_GROWTH`` times its size.
Nothing here enters the normalized receipt; a run whose legs were refused for want of time is
never cached (``Executor.limited``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import sniffio

TICK_S = 0.01
"""How often the ticker wakes: 100 times a second, a few microseconds of the loop each."""
MAX_GROWTH = 4.0
"""The largest a reserve grows, as a multiple of its size on an idle machine."""


class Lateness:
    """The legs' deadline and the cut of one run, moved earlier as its loop runs late."""

    def __init__(self, *, legs: float, cut: float, end: float) -> None:
        self.legs, self.cut, self.end = legs, cut, end
        self.late_s = 0.0
        """The largest lateness of a wake-up seen so far in the run."""

    def moved(self) -> tuple[float, float]:
        """The legs' deadline and the cut for the lateness seen so far."""
        receipt, combine = self.end - self.cut, self.cut - self.legs
        cut = self.cut - min(self.late_s, (MAX_GROWTH - 1.0) * receipt)
        return cut - min(combine + self.late_s, MAX_GROWTH * combine), cut

    def start(self, moved: Callable[[float, float], None]) -> Callable[[], None]:
        """Tick on the running loop until the returned call stops it; on each new largest
        lateness, tell ``moved`` the new instants. A timer, not a task: stopping it cancels one
        handle, where a task's cancellation cost a run more than all its ticks."""
        ticker = _Ticker(self, moved, asyncio.get_running_loop())
        ticker.arm()
        return ticker.stop


class _Ticker:
    """The timer of one run. An object, not two closures that call each other: such closures
    are a reference cycle that kept a run's executor, and all it read, until the next garbage
    collection. The armed handle holds the ticker only until it is cancelled."""

    def __init__(self, lateness: Lateness, moved: Callable[[float, float], None], loop: asyncio.AbstractEventLoop):
        self.lateness, self.moved, self.loop = lateness, moved, loop
        self.started = 0.0
        self.armed: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        self.started = time.monotonic()
        self.armed = self.loop.call_later(TICK_S, self.tick)

    def tick(self) -> None:
        late = time.monotonic() - self.started - TICK_S
        lateness = self.lateness
        if late > lateness.late_s:
            lateness.late_s = late
            # A timer's callback runs in no task, where anyio (through sniffio) cannot tell
            # which loop it is on; the callback's context says so for ``moved``.
            token = sniffio.current_async_library_cvar.set("asyncio")
            try:
                self.moved(*lateness.moved())
            finally:
                sniffio.current_async_library_cvar.reset(token)
        self.arm()

    def stop(self) -> None:
        if self.armed is not None:
            self.armed.cancel()
