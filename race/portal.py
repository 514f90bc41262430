"""The event loop an engine's ``*_sync`` calls run on: one per engine, on a daemon thread.

A synchronous call hands its coroutine to that loop and waits; the loop stays up between calls,
so a cached receipt costs a thread hand-off, not an event loop's start and stop, and whatever an
adapter keeps per loop (connections, pools) lives as long as the engine. It works the same from
a thread that runs its own loop (a notebook, an async web handler): the caller's thread only
waits. The loop stops when the engine closes or is collected, and never keeps a process alive.

A stop does not wait for the calls in flight: each still waiting then raises ``EngineClosed``
(its coroutine cancelled on the loop, as the loop shuts down), and so does a call that reaches
a loop already stopping; a call that finished first returns as usual. The next call after a
stop starts a new loop. The loop is built on its own thread, so an interrupt (Ctrl-C) of the
thread starting it leaves it either started or stopped again, never half-built.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import selectors
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import sniffio

from rsc.errors import EngineClosed

_R = TypeVar("_R")


def _wake() -> None:
    """The callback whose hand-off wakes the loop; the call itself was started by then."""


class _Intake(selectors.DefaultSelector):
    """The loop's selector, which starts the calls handed in as soon as it returns: their tasks'
    first steps then run in the same turn of the loop as the wake-up, not in the turn after."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: deque[Callable[[], None]] = deque()
        # Set on the loop's thread as the loop shuts down, before its last intake: a call
        # handed in after then is refused, by the loop or, if it is too late for the loop, by
        # the caller itself (``LoopThread._withdrawn``).
        self.closed = False

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(timeout)
        self.start_pending()
        return ready

    def start_pending(self) -> None:
        pending = self.pending
        while pending:
            pending.popleft()()


def _closed() -> EngineClosed:
    return EngineClosed("the engine was closed (its event loop stopped) before this call finished")


class _Serving:
    """One loop on one daemon thread, from its start to its close. The loop is built on that
    thread, and closed there as the thread ends, so an interrupt of the thread that starts it
    leaves no loop half-built in that thread's hands."""

    def __init__(self, name: str) -> None:
        self.ready = threading.Event()
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.intake: _Intake | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def _serve(self) -> None:
        try:
            intake = _Intake()
            try:
                loop = asyncio.SelectorEventLoop(intake)
            except BaseException:
                intake.close()
                raise
        except BaseException as exc:  # handed to the starting thread
            self.error = exc
            self.ready.set()
            return
        self.loop, self.intake = loop, intake
        self.ready.set()
        try:
            if not self.stopping:  # read after the loop is published: see stop()
                loop.run_forever()
        finally:
            try:
                intake.closed = True
                _cancel_every_task(loop)
                intake.start_pending()  # refuses what is left
            finally:
                loop.close()

    def stop(self) -> None:
        """Ask the loop to stop, from any thread, whether it runs yet or not. The flag is set
        before the loop is read, and the thread publishes the loop before it reads the flag:
        either the thread sees the flag, or this sees the loop."""
        self.stopping = True
        loop = self.loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # closed: stopped already
                loop.call_soon_threadsafe(loop.stop)


def _cancel_every_task(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks left on a stopped loop and let them end (each waiting call's task hands
    its caller ``EngineClosed``). One turn of the loop first lets every task made take its first
    step: a task cancelled before it never reaches the code that answers its caller."""
    _run_until_complete(loop, asyncio.sleep(0))
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        _run_until_complete(loop, asyncio.gather(*tasks, return_exceptions=True))


def _run_until_complete(loop: asyncio.AbstractEventLoop, awaitable: Awaitable[object]) -> None:
    """``loop.run_until_complete``, run on when a stop queued before the loop ever ran (a stop
    racing the start, which both the thread and ``stop()`` then act on) ends the first turn."""
    future = asyncio.ensure_future(awaitable, loop=loop)
    for _ in range(2):  # one queued stop at most: stop() queues one per serving it sees
        with contextlib.suppress(RuntimeError):
            loop.run_until_complete(future)
        if future.done():
            return
    loop.run_until_complete(future)  # what a second early stop would mean: raise it


class LoopThread:
    """An asyncio event loop running on its own daemon thread, started on first use."""

    def __init__(self, name: str = "race-engine") -> None:
        self._name = name
        # Read without the lock by every call (the hot path); written under it, last of three.
        self._loop: tuple[asyncio.AbstractEventLoop, _Intake] | None = None
        self._serving: _Serving | None = None
        self._retiring: _Serving | None = None  # the last one stopped
        self._ident: int | None = None
        self._lock = threading.Lock()

    def _started(self) -> tuple[asyncio.AbstractEventLoop, _Intake]:
        with self._lock:
            if self._loop is None:
                serving = _Serving(self._name)
                try:  # an interrupt from here until the loop is recorded stops it again
                    serving.thread.start()
                    serving.ready.wait()
                    if serving.loop is None or serving.intake is None:
                        raise RuntimeError("the engine's event loop did not start") from serving.error
                    self._serving, self._ident = serving, serving.thread.ident
                    self._loop = (serving.loop, serving.intake)
                except BaseException:
                    self._loop, self._serving, self._ident = None, None, None
                    serving.stop()
                    raise
            return self._loop

    def call(self, make: Callable[[], Awaitable[_R]]) -> _R:
        """Run the coroutine ``make()`` returns on the loop and wait for its result. An interrupt
        of the waiting thread (Ctrl-C) cancels the coroutine; a stop of the loop before the
        coroutine ends raises ``EngineClosed`` here.

        The hand-off is the least a thread switch allows: the call is queued on the loop's
        selector, which makes its task as the wake-up returns, so the task's first step (a cached
        run's only one) runs in that same turn of the loop; the task hands its outcome over and
        releases a plain lock the caller waits on, from inside its own last step (no concurrent
        future, no done callback, no turn of the loop after the task ends). No lock is taken on
        the way: a stop that races the call is seen through the intake's ``closed`` flag."""
        if threading.get_ident() == self._ident:
            raise RuntimeError("a *_sync call from the engine's own loop would wait for itself: await the call")
        loop, intake = self._loop or self._started()
        # The coroutine sees the caller's context variables (a tracing span, a logging context),
        # as an awaited call would; only the async library's name is the engine loop's own.
        context = contextvars.copy_context()
        context.run(sniffio.current_async_library_cvar.set, None)
        done = threading.Lock()
        done.acquire()
        # [task], then [task, True, result] or [task, False, exception]; [None, False, EngineClosed]
        # for a call the loop never started
        outcome: list[Any] = []

        async def main() -> None:
            try:
                outcome.extend((True, await make()))
            except asyncio.CancelledError as exc:
                outcome.extend((False, _closed() if intake.closed else exc))
                raise
            except BaseException as exc:  # handed to the caller, raised there
                outcome.extend((False, exc))
            finally:
                done.release()

        def start() -> None:  # on the loop's thread
            if intake.closed:
                outcome.extend((None, False, _closed()))
                done.release()
            else:
                outcome.append(loop.create_task(main(), context=context))

        try:  # an interrupt from here on, however early, cancels the call
            intake.pending.append(start)
            try:
                loop.call_soon_threadsafe(_wake)
            except RuntimeError:  # the loop is closed: so is the intake, seen below
                if not intake.closed:
                    raise
            if intake.closed and self._withdrawn(intake, start):
                outcome.extend((None, False, _closed()))
            else:
                done.acquire()
        except BaseException:

            def cancel() -> None:
                intake.start_pending()  # a call handed in is made before it is cancelled
                if outcome and outcome[0] is not None:
                    outcome[0].cancel()

            with contextlib.suppress(RuntimeError):  # closed: the call was refused, or cancelled
                loop.call_soon_threadsafe(cancel)
            raise
        if outcome[1]:
            return cast(_R, outcome[2])
        error: BaseException | None = outcome[2]
        outcome.clear()
        try:
            raise cast(BaseException, error)
        finally:
            error = None  # no cycle through the traceback

    @staticmethod
    def _withdrawn(intake: _Intake, start: Callable[[], None]) -> bool:
        """Whether a call handed to a loop that is shutting down was taken back before the loop
        took it; if the loop took it, the loop answers it (its result, or ``EngineClosed``)."""
        try:
            intake.pending.remove(start)  # atomic, as the loop's popleft is
        except ValueError:
            return False
        return True

    def stop(self) -> None:
        """Stop the loop (safe from any thread, twice, or before it started). Calls still waiting
        raise ``EngineClosed``; this waits a few seconds at most for the loop's thread to end."""
        with self._lock:
            # A stop racing another waits for the same thread to end, not for nothing.
            serving = self._serving or self._retiring
            self._loop, self._serving, self._ident = None, None, None
            self._retiring = serving
        if serving is None:
            return
        serving.stop()
        if threading.current_thread() is not serving.thread:
            serving.thread.join(timeout=5.0)
