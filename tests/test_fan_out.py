"""An operator starts at most FAN_OUT of its inputs at once, in plan order (race.run.context)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from race.run.context import FAN_OUT, gather


def test_gather_runs_at_most_the_limit_at_once_and_answers_in_call_order() -> None:
    running, most, started = 0, 0, []

    def call(i: int) -> Callable[[], Awaitable[int]]:
        async def one() -> int:
            nonlocal running, most
            started.append(i)
            running += 1
            most = max(most, running)
            # Later calls finish first: the answers must still come back in call order.
            await anyio.sleep(0.001 * ((200 - i) % 7))
            running -= 1
            return i

        return one

    results = anyio.run(gather, [call(i) for i in range(200)])
    assert results == tuple(range(200))
    assert most == FAN_OUT
    assert started[:FAN_OUT] == list(range(FAN_OUT))  # the first FAN_OUT start at once, in order
    assert sorted(started) == list(range(200))


def test_a_small_limit_is_kept() -> None:
    running, most = 0, 0

    async def one() -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await anyio.sleep(0)
        running -= 1
        return "x"

    assert anyio.run(gather, [one] * 10, 3) == ("x",) * 10
    assert most == 3
