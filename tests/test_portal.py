"""The loop an engine's ``*_sync`` calls run on (``race.portal``): outcomes, threads, interrupts."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import threading
import warnings
from asyncio import selector_events
from collections import deque
from collections.abc import Callable, Iterator

import anyio
import pytest

from race.engine import Engine
from race.portal import LoopThread
from rsc.errors import EngineClosed
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


# -- a call racing the loop's stop, and a stop while calls wait ----------------------------------


def _in_a_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """``call()`` on a thread of its own; the list gets what it returned or raised."""
    ended: list[object] = []

    def target() -> None:
        try:
            ended.append(call())
        except BaseException as exc:  # handed to the test's thread
            ended.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, ended


def test_a_stop_while_a_call_waits_ends_that_call_with_engine_closed(portal: LoopThread) -> None:
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    caller, ended = _in_a_thread(lambda: portal.call(forever))
    assert started.wait(timeout=30)
    portal.stop()
    caller.join(timeout=30)  # a bound on a hang, not a timing
    assert not caller.is_alive(), "the call still waits on a stopped loop"
    assert len(ended) == 1 and isinstance(ended[0], EngineClosed), ended


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_call_handed_in_as_the_loop_stops_answers_or_raises_engine_closed(portal: LoopThread, when: str) -> None:
    # The call has read the running loop when the stop comes: just before its hand-off (the loop
    # is gone by then), or just after (the loop may or may not have taken it).
    async def name() -> str:
        return threading.current_thread().name

    assert portal.call(name) == "race-test"
    loop = portal._loop
    assert loop is not None

    class StopAround(deque[Callable[[], None]]):
        def append(self, item: Callable[[], None]) -> None:
            if when == "before":
                portal.stop()
            super().append(item)
            if when == "after":
                portal.stop()

    loop[1].pending = StopAround()
    caller, ended = _in_a_thread(lambda: portal.call(name))
    caller.join(timeout=30)  # a bound on a hang, not a timing
    assert not caller.is_alive(), "the call waits on a loop that stopped"
    assert len(ended) == 1, ended
    if when == "before":
        assert isinstance(ended[0], EngineClosed), ended
    else:
        assert ended[0] == "race-test" or isinstance(ended[0], EngineClosed), ended
    assert portal.call(name) == "race-test"  # the next call starts the loop again


def test_closing_the_engine_while_a_sync_run_waits_ends_that_run_with_engine_closed(engine: Engine) -> None:
    started = threading.Event()

    async def stuck(*args: object, **kwargs: object) -> None:
        started.set()
        await asyncio.Event().wait()

    engine.run = stuck  # type: ignore[method-assign,assignment]
    caller, ended = _in_a_thread(lambda: engine.run_sync(roomy_plan("cascade_lexical.json")))
    assert started.wait(timeout=30)
    engine.close()  # does not wait for the run: it ends it
    caller.join(timeout=30)  # a bound on a hang, not a timing
    assert not caller.is_alive(), "run_sync still waits on a closed engine"
    assert len(ended) == 1 and isinstance(ended[0], EngineClosed), ended
    assert "closed" in str(ended[0])
    engine.close()  # twice is fine


# -- an interrupt while the loop's thread starts --------------------------------------------------


@pytest.mark.parametrize("when", ["before the thread starts", "as the thread starts", "while the loop is built"])
def test_an_interrupted_start_leaves_no_loop_behind_and_the_next_call_starts_one(
    monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        pytest.skip("Ctrl-C reaches the main thread only, as KeyboardInterrupt")
    name = f"race-interrupted-start {when}"
    pending = [True]  # one Ctrl-C, at the first start only

    def ctrl_c() -> None:
        if pending:
            pending.clear()
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    start = threading.Thread.start

    def interrupted_start(thread: threading.Thread) -> None:
        if thread.name == name and when == "before the thread starts":
            ctrl_c()
        start(thread)
        if thread.name == name and when == "as the thread starts":
            ctrl_c()

    make_self_pipe = selector_events.BaseSelectorEventLoop._make_self_pipe  # type: ignore[attr-defined]

    def interrupted_make_self_pipe(loop: asyncio.AbstractEventLoop) -> None:
        if when == "while the loop is built":
            ctrl_c()  # on whichever thread builds the loop; the interrupt reaches the main thread
        make_self_pipe(loop)

    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    monkeypatch.setattr(selector_events.BaseSelectorEventLoop, "_make_self_pipe", interrupted_make_self_pipe)
    portal = LoopThread(name)

    async def running_on() -> str:
        return threading.current_thread().name

    gc.collect()  # what earlier tests left to the collector is theirs to answer for, not this start's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        interrupted = False
        try:
            portal.call(running_on)
        except KeyboardInterrupt:
            interrupted = True
        assert interrupted and not pending
        assert portal.call(running_on) == name  # the next call starts the loop
        portal.stop()
        for thread in threading.enumerate():
            if thread.name == name:
                thread.join(timeout=30)  # a bound on a hang, not a timing
        assert [t for t in threading.enumerate() if t.name == name] == [], "a loop thread was left running"
        gc.collect()  # a half-built loop fails as it is collected
    assert unraisable == []
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_stop_as_the_loop_is_published_ends_its_thread_without_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop lands after the thread made its loop visible and before it reads the stop flag:
    both act on it (the thread skips the loop, the stop queues one), and the thread still ends
    cleanly, its loop closed, no exception in the thread."""
    from race.portal import _Serving

    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    published, go_on = threading.Event(), threading.Event()

    class Gate(threading.Event):
        def set(self) -> None:  # the thread's "ready", just after it publishes the loop
            super().set()
            published.set()
            go_on.wait(timeout=30)

    serving = _Serving("race-stop-as-published")
    serving.ready = Gate()
    serving.thread.start()
    assert published.wait(timeout=30)
    serving.stop()
    go_on.set()
    serving.thread.join(timeout=30)  # a bound on a hang, not a timing
    assert not serving.thread.is_alive() and serving.loop is not None and serving.loop.is_closed()
    assert errors == []


def test_a_second_stop_waits_for_the_same_thread_to_end(portal: LoopThread) -> None:
    """Two threads stopping the loop at once: each returns once its thread has ended, so a
    call after either finds no old loop still shutting down beside a new one."""
    release = threading.Event()

    async def slow_to_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.to_thread(release.wait, 30)  # the shutdown takes until released
            raise

    outcome: list[BaseException] = []

    def waiting_call() -> None:
        try:
            portal.call(slow_to_cancel)
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=waiting_call, daemon=True)
    caller.start()
    while not asyncio.all_tasks(portal.call(_loop_of)):
        threading.Event().wait(0.01)
    serving = portal._serving
    assert serving is not None
    first = threading.Thread(target=portal.stop, daemon=True)
    first.start()
    while portal._serving is not None:
        threading.Event().wait(0.01)
    second = threading.Thread(target=portal.stop, daemon=True)
    second.start()
    second.join(timeout=0.5)
    assert second.is_alive(), "the second stop returned while the loop's thread was still ending"
    release.set()
    for thread in (first, second, caller):
        thread.join(timeout=30)
    assert not serving.thread.is_alive()
    assert [type(exc) for exc in outcome] == [EngineClosed]


async def _loop_of() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()
