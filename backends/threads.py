"""The worker threads adapters run their blocking work on, and the one way to wait for it.

An adapter's blocking call (a tantivy search, a LanceDB query, a graph walk) runs on a worker
thread while the event loop serves everything else; a caller that stops waiting (a leg's
deadline, the plan's) moves on at once, and the thread's late answer is dropped (I7, I17).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar

import anyio
import sniffio

_R = TypeVar("_R")

_log = logging.getLogger("backends.base")
"""Left-behind calls are a WARNING of ``backends.base``, where adapters log what they degrade."""

IDLE_SECONDS = 30.0
"""A worker thread idle this long ends; the next call that finds none idle starts one."""


class _Workers:
    """Daemon threads, made as calls need them and reused when idle. Daemon, unlike
    ``concurrent.futures``' workers (joined at interpreter exit): a call left behind never holds
    the process open after its caller has moved on, as ``anyio.to_thread``'s did not when a
    daemon thread (an engine's loop) made them. A call left behind keeps its thread until it
    returns; the call pool bounds how many a backend may leave (``race.run.detached``).

    There is no upper bound on threads: a call that finds no idle thread starts one, so a
    backend whose calls never return cannot hold the others' calls in a queue behind them (a
    bound of 64 let one stuck LanceDB leave a healthy tantivy leg without a thread, and its
    leg timed out). How many calls run at once is the call pool's bound, per backend."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._started = 0

    def submit(self, fn: Callable[[], _R]) -> Future[_R]:
        future: Future[_R] = Future()
        self._calls.put((future, fn))
        if not self._idle.acquire(blocking=False):
            with self._lock:
                self._started += 1
                name = f"race-blocking-{self._started}"
            threading.Thread(target=self._work, name=name, daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            try:
                call = self._calls.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                if self._idle.acquire(blocking=False):  # still counted idle: no call is ours
                    return
                continue  # a caller just counted on this thread: its call is on its way
            _answer(*call)  # nothing of the call is held while the thread is idle
            self._idle.release()


def _answer(future: Future[_R], fn: Callable[[], _R]) -> None:
    # A call whose caller gave up before it started is dropped here.
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn()
    except Exception as exc:
        future.set_exception(exc)
    except BaseException as exc:  # SystemExit from a library: the call failed, the caller's process did not
        failure = RuntimeError(f"the blocking call raised {type(exc).__name__}: {exc}")
        future.set_exception(failure.with_traceback(exc.__traceback__))
    else:
        future.set_result(result)


_WORKERS = _Workers()


def _forked() -> None:
    """A child process has none of its parent's threads: it starts its own."""
    global _WORKERS
    _WORKERS = _Workers()


os.register_at_fork(after_in_child=_forked)


def on_worker(fn: Callable[..., _R], *args: Any) -> Future[_R]:
    """``fn(*args)`` submitted to a worker thread, in a copy of the caller's context with no async
    library current (as ``anyio.to_thread`` runs it). A call not started yet is dropped when its
    future is cancelled; a running one keeps its thread until it returns."""
    context = contextvars.copy_context()
    context.run(sniffio.current_async_library_cvar.set, None)
    return _WORKERS.submit(partial(context.run, fn, *args))


async def blocking(fn: Callable[..., _R], *args: Any) -> _R:
    """``fn(*args)`` on a worker thread, abandoned when the caller is cancelled.

    A leg's deadline must win over a backend call that does not return (I7, I17): on
    cancellation the caller moves on at once and whatever the thread answers later is
    discarded. Every adapter runs its blocking work through here. A call left behind on its
    thread is a WARNING of ``backends.base``.

    The caller waits on the thread's future in the event loop (``on_worker``): one turn of the
    loop for the answer, where ``anyio.to_thread.run_sync`` adds a checkpoint, a capacity
    limiter and a cancel scope to every call.
    """
    future = on_worker(fn, *args)
    try:
        return await asyncio.wrap_future(future)
    except anyio.get_cancelled_exc_class():
        warn_left_behind(fn)
        raise


def warn_left_behind(fn: Callable[..., object]) -> None:
    """The WARNING of a blocking call whose caller stopped waiting while it ran."""
    _log.warning("%s left behind on its worker thread: the caller stopped waiting", _call_name(fn))


def _call_name(fn: Callable[..., object]) -> str:
    while isinstance(fn, partial):  # a scan's call names the adapter method it binds
        fn = fn.func
    owner = getattr(fn, "__self__", None)
    backend = getattr(owner, "backend", None)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{backend} {name}" if isinstance(backend, str) else str(name)
