"""How a call's own task answers the run waiting on it (race.run.detached): its answer, its
exception, its deadline and its cancellation reach the caller as they would through
``asyncio.shield``, and the caller's cancellation never reaches the task."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from race.run.detached import CallPool

pytestmark = pytest.mark.anyio


async def test_the_answer_reaches_the_caller_once_the_task_has_ended() -> None:
    pool = CallPool()
    seen: list[asyncio.Task[object]] = []

    async def answer() -> str:
        task = asyncio.current_task()
        assert task is not None
        seen.append(task)
        await anyio.sleep(0)
        return "found"

    assert await pool.call("a", answer) == "found"
    assert seen[0].done() and pool.left_behind() == 0


async def test_an_exception_reaches_the_caller_as_it_was_raised() -> None:
    pool = CallPool()
    raised = LookupError("no such shard")

    async def fail() -> str:
        await anyio.sleep(0)
        raise raised

    with pytest.raises(LookupError) as caught:
        await pool.call("a", fail)
    assert caught.value is raised


async def test_a_call_past_the_callers_deadline_ends_the_wait_as_the_callers_timeout() -> None:
    pool = CallPool()
    left: dict[str, int] = {}

    async def slow() -> str:
        await anyio.sleep(5)
        return "late"

    with anyio.move_on_after(0.02) as scope:
        await pool.call("a", slow, left)
    assert scope.cancelled_caught
    await anyio.sleep(0.01)
    assert pool.left_behind() == 0  # the call met its own deadline and ended


async def test_a_task_cancelled_before_it_answers_cancels_the_wait() -> None:
    pool = CallPool()
    started = anyio.Event()

    async def waits() -> str:
        started.set()
        await anyio.sleep(5)
        return "never"

    async def cancel_the_call() -> None:
        await started.wait()
        (task,) = [t for t in pool._tasks if not t.done()]
        task.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_the_call)
        with pytest.raises(asyncio.CancelledError):
            await pool.call("a", waits)


async def test_the_callers_cancellation_never_reaches_the_call_and_it_is_left_behind() -> None:
    pool = CallPool()
    left: dict[str, int] = {}
    ended = anyio.Event()

    async def stubborn() -> str:
        try:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.1)
        finally:
            ended.set()
        return "ignored"

    with anyio.move_on_after(0.01):
        await pool.call("a", stubborn, left)
    assert left == {"a": 1} and pool.left_behind("a") == 1
    await ended.wait()
    await anyio.sleep(0)
    assert pool.left_behind() == 0
