"""The worker threads adapters run their blocking work on, and the one way to wait for it.

An adapter's blocking call (a tantivy search, a LanceDB query, a graph walk) runs on a worker
thread while the event loop serves everything else; a caller that stops waiting (a leg's
deadline, the plan's) moves on at once, and the thread's late answer is dropped (I7, I17).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import anyio
import sniffio

_R = TypeVar("_R")

_log = logging.getLogger("backends.base")
"""Left-behind calls are a WARNING of ``backends.base``, where adapters log what they degrade."""

_WORKERS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="race-blocking")
"""The threads adapters' blocking work runs on, made as calls need them. A call left behind keeps
its thread until it returns; the call pool bounds how many a backend may leave (``race.run.detached``)."""


def on_worker(fn: Callable[..., _R], *args: Any) -> Future[_R]:
    """``fn(*args)`` submitted to a worker thread, in a copy of the caller's context with no async
    library current (as ``anyio.to_thread`` runs it). A call not started yet is dropped when its
    future is cancelled; a running one keeps its thread until it returns."""
    context = contextvars.copy_context()
    context.run(sniffio.current_async_library_cvar.set, None)
    return _WORKERS.submit(context.run, fn, *args)


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
