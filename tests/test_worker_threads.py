"""The worker threads adapters' blocking work runs on (``backends.threads``): daemon threads, so
that a call left behind never holds the process open at exit, reused when idle, made anew in a
forked child, which has none of its parent's threads."""

from __future__ import annotations

import multiprocessing
import sys
import threading
from concurrent.futures import Future

import anyio
import pytest

from backends.threads import _answer, blocking, on_worker


def test_blocking_work_runs_on_daemon_threads() -> None:
    found = [on_worker(threading.current_thread).result(timeout=60) for _ in range(5)]
    assert all(t is not threading.current_thread() and t.daemon for t in found)
    assert all(t.name.startswith("race-blocking-") for t in found)


def test_a_call_raises_on_its_caller_and_a_cancelled_call_not_started_never_runs() -> None:
    async def fail() -> None:
        await blocking(int, "not a number")

    with pytest.raises(ValueError):
        anyio.run(fail)
    ran: list[int] = []
    dropped: Future[None] = Future()
    assert dropped.cancel()  # its caller gave up before a thread took it
    _answer(dropped, lambda: ran.append(1))
    on_worker(ran.append, 2).result(timeout=60)
    assert ran == [2]


def test_calls_that_never_return_leave_no_other_call_waiting() -> None:
    """100 calls stuck on their threads (a backend that does not answer): the next call still
    gets a thread of its own at once, whatever the other calls do."""
    release = threading.Event()
    stuck = [on_worker(release.wait, 120) for _ in range(100)]
    try:
        assert on_worker(lambda: 7).result(timeout=30) == 7
    finally:
        release.set()
    assert all(f.result(timeout=60) for f in stuck)


def test_a_library_exiting_fails_the_call_not_the_process() -> None:
    def exits() -> None:
        raise SystemExit(3)

    async def call() -> None:
        await blocking(exits)

    with pytest.raises(RuntimeError, match="raised SystemExit: 3"):
        anyio.run(call)


def _child(answers: multiprocessing.Queue[int]) -> None:
    answers.put(on_worker(lambda: 7).result(timeout=60))


@pytest.mark.skipif(sys.platform != "linux", reason="fork is the Linux start method")
def test_a_forked_child_starts_its_own_worker_threads() -> None:
    on_worker(int).result(timeout=60)  # the parent has a worker thread
    context = multiprocessing.get_context("fork")
    answers: multiprocessing.Queue[int] = context.Queue()
    child = context.Process(target=_child, args=(answers,))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and answers.get(timeout=5) == 7
