"""The event loop an engine's ``*_sync`` calls run on: one per engine, on a daemon thread.

A synchronous call hands its coroutine to that loop and waits; the loop stays up between calls,
so a cached receipt costs a thread hand-off, not an event loop's start and stop, and whatever an
adapter keeps per loop (connections, pools) lives as long as the engine. It works the same from
a thread that runs its own loop (a notebook, an async web handler): the caller's thread only
waits. The loop stops when the engine closes or is collected, and never keeps a process alive.
"""

from __future__ import annotations

import asyncio
import contextvars
import selectors
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import sniffio

_R = TypeVar("_R")


def _wake() -> None:
    """The callback whose hand-off wakes the loop; the call itself was started by then."""


class _Intake(selectors.DefaultSelector):
    """The loop's selector, which starts the calls handed in as soon as it returns: their tasks'
    first steps then run in the same turn of the loop as the wake-up, not in the turn after."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: deque[Callable[[], None]] = deque()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(timeout)
        self.start_pending()
        return ready

    def start_pending(self) -> None:
        pending = self.pending
        while pending:
            pending.popleft()()


class LoopThread:
    """An asyncio event loop running on its own daemon thread, started on first use."""

    def __init__(self, name: str = "race-engine") -> None:
        self._name = name
        self._loop: tuple[asyncio.AbstractEventLoop, _Intake] | None = None
        self._thread: threading.Thread | None = None
        self._ident: int | None = None
        self._lock = threading.Lock()

    def _started(self) -> tuple[asyncio.AbstractEventLoop, _Intake]:
        with self._lock:
            if self._loop is None:
                intake = _Intake()
                loop = asyncio.SelectorEventLoop(intake)
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread, self._ident = (loop, intake), thread, thread.ident
            return self._loop

    def call(self, make: Callable[[], Awaitable[_R]]) -> _R:
        """Run the coroutine ``make()`` returns on the loop and wait for its result. An interrupt
        of the waiting thread (Ctrl-C) cancels the coroutine.

        The hand-off is the least a thread switch allows: the call is queued on the loop's
        selector, which makes its task as the wake-up returns, so the task's first step (a cached
        run's only one) runs in that same turn of the loop; the task hands its outcome over and
        releases a plain lock the caller waits on, from inside its own last step (no concurrent
        future, no done callback, no turn of the loop after the task ends)."""
        if threading.get_ident() == self._ident:
            raise RuntimeError("a *_sync call from the engine's own loop would wait for itself: await the call")
        loop, intake = self._loop or self._started()
        # The coroutine sees the caller's context variables (a tracing span, a logging context),
        # as an awaited call would; only the async library's name is the engine loop's own.
        context = contextvars.copy_context()
        context.run(sniffio.current_async_library_cvar.set, None)
        done = threading.Lock()
        done.acquire()
        outcome: list[Any] = []  # [task], then [task, True, result] or [task, False, exception]

        async def main() -> None:
            try:
                outcome.extend((True, await make()))
            except asyncio.CancelledError as exc:
                outcome.extend((False, exc))
                raise
            except BaseException as exc:  # handed to the caller, raised there
                outcome.extend((False, exc))
            finally:
                done.release()

        try:  # an interrupt from here on, however early, cancels the call
            intake.pending.append(lambda: outcome.append(loop.create_task(main(), context=context)))
            loop.call_soon_threadsafe(_wake)
            done.acquire()
        except BaseException:

            def cancel() -> None:
                intake.start_pending()  # a call handed in is made before it is cancelled
                if outcome:
                    outcome[0].cancel()

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

    def stop(self) -> None:
        """Stop the loop (safe from any thread, twice, or before it started)."""
        with self._lock:
            running, thread = self._loop, self._thread
            self._loop, self._thread, self._ident = None, None, None
        if running is None or thread is None:
            return
        loop = running[0]
        loop.call_soon_threadsafe(loop.stop)
        if threading.current_thread() is not thread:
            thread.join(timeout=5.0)
            if not thread.is_alive():
                loop.close()
