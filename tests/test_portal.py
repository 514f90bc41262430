"""The loop an engine's ``*_sync`` calls run on (``race.portal``): outcomes, threads, interrupts."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator

import anyio
import pytest

from race.engine import Engine
from race.portal import LoopThread
from tests.conftest import roomy_plan


@pytest.fixture
def portal() -> Iterator[LoopThread]:
    loop = LoopThread("race-test")
    try:
        yield loop
    finally:
        loop.stop()


def test_a_call_that_finishes_in_one_step_and_one_that_suspends_both_answer(portal: LoopThread) -> None:
    async def at_once() -> str:
        return threading.current_thread().name

    async def suspends() -> tuple[str, str]:
        await asyncio.sleep(0)
        async with anyio.create_task_group() as group:  # a cancel scope spans the suspension
            group.start_soon(anyio.sleep, 0)
        worker = await anyio.to_thread.run_sync(lambda: threading.current_thread().name)
        return threading.current_thread().name, worker

    assert portal.call(at_once) == "race-test"
    assert portal.call(suspends)[0] == "race-test" != portal.call(suspends)[1]


def test_errors_reach_the_caller_raised_before_or_after_a_suspension(portal: LoopThread) -> None:
    async def at_once() -> None:
        raise KeyError("at once")

    async def later() -> None:
        await asyncio.sleep(0)
        raise ValueError("later")

    with pytest.raises(KeyError, match="at once"):
        portal.call(at_once)
    with pytest.raises(ValueError, match="later"):
        portal.call(later)


def test_a_call_from_the_loop_itself_is_refused(portal: LoopThread) -> None:
    async def noop() -> None:
        return None

    async def inner() -> None:
        portal.call(noop)

    with pytest.raises(RuntimeError, match="would wait for itself"):
        portal.call(inner)


def test_a_stopped_loop_starts_again_on_the_next_call(portal: LoopThread) -> None:
    async def name() -> str:
        return threading.current_thread().name

    assert portal.call(name) == "race-test"
    portal.stop()
    assert portal.call(name) == "race-test"


def test_an_interrupt_of_the_waiting_thread_cancels_the_call(portal: LoopThread) -> None:
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        pytest.skip("Ctrl-C reaches the main thread only, as KeyboardInterrupt")
    started, cancelled = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def interrupt() -> None:
        started.wait()
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    interrupter = threading.Thread(target=interrupt)
    interrupter.start()
    with pytest.raises(KeyboardInterrupt):
        portal.call(forever)
    interrupter.join()
    assert cancelled.wait(timeout=120)  # set on the loop by the cancelled call (a bound on a hang)

    async def name() -> str:
        return threading.current_thread().name

    assert portal.call(name) == "race-test"  # the loop serves the next call


def test_sync_calls_from_many_threads_at_once_each_get_their_own_receipt(engine: Engine) -> None:
    plans = [roomy_plan("cascade_lexical.json"), engine.plan_for_search("broker memory", strategy="lexical")]
    expected = [engine.run_sync(plan).normalized_bytes() for plan in plans]
    loop_threads: set[str] = set()
    original = engine.run

    async def run_noting_the_thread(*args: object, **kwargs: object) -> object:
        loop_threads.add(threading.current_thread().name)
        return await original(*args, **kwargs)  # type: ignore[arg-type]

    engine.run = run_noting_the_thread  # type: ignore[method-assign]
    found: dict[tuple[int, int], bytes] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def caller(n: int) -> None:
        try:
            barrier.wait()
            for i in range(10):
                which = (n + i) % len(plans)
                found[(n, i)] = engine.run_sync(plans[which]).normalized_bytes()
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(found[(n, i)] == expected[(n + i) % len(plans)] for n in range(8) for i in range(10))
    assert loop_threads == {"race-engine"}
    engine.close()


def test_the_call_sees_the_callers_context_but_the_engine_loops_library(portal: LoopThread) -> None:
    # A span or a logging context set by the caller reaches the call, as it would an awaited one;
    # the async library is the engine loop's, whatever the caller's thread runs (trio, say).
    import contextvars

    import sniffio

    span: contextvars.ContextVar[str] = contextvars.ContextVar("span", default="unset")

    async def seen() -> tuple[str, str]:
        await anyio.sleep(0)
        return span.get(), sniffio.current_async_library()

    token, library = span.set("caller"), sniffio.current_async_library_cvar.set("trio")
    try:
        assert portal.call(seen) == ("caller", "asyncio")
    finally:
        span.reset(token)
        sniffio.current_async_library_cvar.reset(library)
    assert portal.call(seen) == ("unset", "asyncio")
