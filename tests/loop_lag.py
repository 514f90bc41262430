"""How late the event loop ran while a block of a test ran: the tolerance of a deadline check.

A test whose subject is a deadline ("returns within the plan deadline + 100 ms") measures the
engine, not the machine. On a machine whose cores are busy with other work, every wake-up of
the loop comes late, the engine's included, and by as much as a ticker beside it sees. So::

    async with LoopLag() as lag:
        receipt = await engine.run(plan)
    assert wall_ms <= deadline_ms + SLACK_MS + lag.max_ms

allows the deadline, the engine's own slack, and the largest delay the loop itself suffered
during that same run; on an idle machine ``lag.max_ms`` is a few milliseconds.
"""

from __future__ import annotations

import time
from types import TracebackType

import anyio
from anyio.abc import TaskGroup

TICK_S = 0.005


class LoopLag:
    """A ticker task that sleeps ``TICK_S`` at a time and records how late each wake-up was."""

    def __init__(self) -> None:
        self.lags_ms: list[float] = []
        self._group: TaskGroup | None = None
        self._since = 0.0

    @property
    def max_ms(self) -> float:
        return max(self.lags_ms, default=0.0)

    async def _tick(self) -> None:
        while True:
            self._since = time.monotonic()
            await anyio.sleep(TICK_S)
            self._record()

    def _record(self) -> None:
        self.lags_ms.append(max(0.0, (time.monotonic() - self._since - TICK_S) * 1000.0))

    async def __aenter__(self) -> LoopLag:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._tick)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._group is not None
        self._record()  # the tick in flight: a stall just before the block returned counts too
        self._group.cancel_scope.cancel()
        return await self._group.__aexit__(exc_type, exc, tb)
