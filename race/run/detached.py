"""Backend calls the run can leave behind: the coordinator, not the adapter, keeps the deadline.

Every call RACE makes into an adapter during a run (a leg's ``scan``, a generation read, a
pin) runs as its own task, and the run waits for that task's answer, not for the task. When
the run stops waiting (the leg timeout, the plan deadline, or the run itself cancelled), it
moves on at once, whatever the call is doing: a worker thread that does not come back, a C
call holding its thread, a client that shields itself from cancellation. The task left
behind is asked to cancel (a cooperative adapter then stops), is counted until it ends, and
whatever it answers later is dropped: nothing reads, records or caches it.

Left-behind calls are bounded, per backend: ``CallPool.capacity`` calls may be left running
at once. A backend whose pool is full gets no new call until one of them ends; the leg that
meets it is a ``resource_limited`` gap saying so, and the other backends are untouched.

RACE runs on asyncio (``race.portal``): a left-behind call is an asyncio task outside the
run's task groups, kept referenced here until it ends. A call that is one blocking function
(an adapter's ``scan_call``) needs no task: the caller waits on its worker thread's future, and
a thread left behind is counted the same way until it returns (``call_blocking``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar

import anyio

from backends.threads import on_worker, warn_left_behind

_T = TypeVar("_T")

DEFAULT_CAPACITY = 16
"""How many calls one backend may have left running at once before its legs are refused."""


class CallPool:
    """The calls of one engine's runs, per backend: how many were left behind and still run."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("a call pool holds at least one call")
        self.capacity = capacity
        self._left: dict[str, set[asyncio.Task[Any] | Future[Any]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def left_behind(self, backend: str | None = None) -> int:
        """Calls left behind that still run: of ``backend``, or of every backend."""
        if backend is not None:
            return len(self._left.get(backend, ()))
        return sum(len(tasks) for tasks in self._left.values())

    def left_by_backend(self) -> dict[str, int]:
        return {name: len(tasks) for name, tasks in sorted(self._left.items()) if tasks}

    def full(self, backend: str) -> bool:
        return self.left_behind(backend) >= self.capacity

    async def call(self, backend: str, fn: Callable[[], Awaitable[_T]], left: dict[str, int] | None = None) -> _T:
        """``await fn()`` as a task of its own; when the caller is cancelled the task is left
        behind (asked to cancel, counted under ``backend`` until it ends, its answer dropped)
        and, given ``left``, counted there too (a run's own record)."""
        # The call sees the caller's deadline as its own (``anyio.current_effective_deadline``):
        # a cooperative adapter plans with it and is cancelled at it, in its own task.
        deadline = anyio.current_effective_deadline()
        loop = asyncio.get_running_loop()
        # The caller waits on a future of its own, as behind ``asyncio.shield``: its cancellation
        # never reaches the task. The task answers it as its last step, so the caller wakes in
        # the same turn of the loop as the task ends, not in the turn after; a task that ends
        # any other way (raising, cancelled) answers it from its done callback.
        answered: asyncio.Future[_T | _Expired] = loop.create_future()
        task: asyncio.Task[_T | _Expired] = loop.create_task(_run(fn, deadline, answered))
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        task.add_done_callback(partial(_pass_on, answered))
        try:
            answer = await answered
            if isinstance(answer, _Expired):
                # The call met the caller's deadline first: the caller's own cancellation is due
                # now, and it is what ends the wait (a timeout or the plan deadline, as ever).
                await anyio.sleep_forever()
            assert not isinstance(answer, _Expired)
            return answer
        except BaseException:
            if not task.done():
                self._leave(backend, task)
                if left is not None:
                    left[backend] = left.get(backend, 0) + 1
            raise

    async def call_blocking(self, backend: str, fn: Callable[[], _T], left: dict[str, int] | None = None) -> _T:
        """``fn()`` on a worker thread, the caller waiting on its future: what ``call`` gives a
        call that is one blocking function, without a task. When the caller is cancelled, a call
        not started is dropped, and a running one is left behind (counted under ``backend``
        until its thread returns, its answer dropped) and, given ``left``, counted there too."""
        future = on_worker(fn)
        try:
            return await asyncio.wrap_future(future)
        except BaseException:
            # A call that had not started never will; one that runs is left behind.
            if not future.cancel() and not future.done():
                warn_left_behind(fn)
                self._leave_thread(backend, future)
                if left is not None:
                    left[backend] = left.get(backend, 0) + 1
            raise

    async def settle(
        self, calls: Mapping[str, Callable[[], Awaitable[_T]]], seconds: float | None
    ) -> dict[str, tuple[bool, _T | BaseException | None]]:
        """Every call of ``calls`` (backend -> call) at once, as tasks of their own, waited for
        ``seconds`` at most (``None``: until all end). Per backend: ``(True, answer or the
        exception raised)`` or, for a call that did not end in time, ``(False, None)``: that
        call is left behind. One turn of the loop when every call answers at once."""
        loop = asyncio.get_running_loop()
        tasks: dict[str, asyncio.Task[_T | _Expired]] = {}
        deadline = anyio.current_effective_deadline()
        if seconds is not None:
            deadline = min(deadline, anyio.current_time() + seconds)
        for name, fn in calls.items():
            task = tasks[name] = loop.create_task(_run(fn, deadline))
            self._tasks.add(task)
            task.add_done_callback(self._ended)
        try:
            if tasks:
                await asyncio.wait(tasks.values(), timeout=seconds)
        finally:
            for name, task in tasks.items():
                if not task.done():
                    self._leave(name, task)
        out: dict[str, tuple[bool, _T | BaseException | None]] = {}
        for name, task in tasks.items():
            if not task.done() or task.cancelled() or isinstance(answer := _answer(task), _Expired):
                out[name] = (False, None)
            else:
                out[name] = (True, answer)
        return out

    def _leave(self, backend: str, task: asyncio.Task[Any]) -> None:
        self._left.setdefault(backend, set()).add(task)
        task.add_done_callback(lambda t: self._left.get(backend, set()).discard(t))
        task.cancel()

    def _leave_thread(self, backend: str, future: Future[Any]) -> None:
        held = self._left.setdefault(backend, set())
        held.add(future)
        # Called on the worker thread as it returns: one set operation, atomic under the GIL.
        future.add_done_callback(held.discard)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        # The answer of a task nobody waits for any more is dropped: read its outcome here so
        # that asyncio does not report an exception as never retrieved.
        if not task.cancelled():
            task.exception()


class _Expired:
    """What a call that met its deadline inside its own task answers."""


_EXPIRED = _Expired()


def _answer(task: asyncio.Task[_T | _Expired]) -> _T | _Expired | BaseException:
    error = task.exception()
    return error if error is not None else task.result()


async def _run(
    fn: Callable[[], Awaitable[_T]], deadline: float, answered: asyncio.Future[_T | _Expired] | None = None
) -> _T | _Expired:
    with anyio.CancelScope(deadline=deadline):
        answer = await fn()
        if answered is not None and not answered.done():
            answered.set_result(answer)
        return answer
    if answered is not None and not answered.done():
        answered.set_result(_EXPIRED)
    return _EXPIRED


def _pass_on(answered: asyncio.Future[Any], task: asyncio.Task[Any]) -> None:
    """What a task that did not answer ``answered`` itself ended with, passed on to it (as
    ``asyncio.shield`` passes it on): its exception, or its cancellation."""
    if answered.done():
        return
    if task.cancelled():
        answered.cancel()
    elif (error := task.exception()) is not None:
        answered.set_exception(error)
    else:
        answered.set_result(task.result())
