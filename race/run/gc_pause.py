"""Full garbage collections wait while runs are in flight (operational only).

A very wide plan allocates tens of thousands of objects that live as long as the run: they
survive the young generations, and CPython then starts a full collection, which walks every
object of the process (the engine's own plans, models and caches among them). Measured on
the 2,000-node plan of ``benchmarks/bench_wide_deadline.py``: one 200-480 ms pause per run,
a third of its 1 s deadline and more. While any run is in flight, full collections wait (the
third threshold is raised); young collections go on as before, and nothing here reads or
changes what a run returns. When the last run ends, the thresholds are put back and the next
full collection comes in its own time, outside every deadline. So that overlapping runs
cannot put it off for ever, full collections wait at most ``MAX_WAIT_S`` at a stretch.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_WAIT_S = 10.0
"""The longest full collections wait at a stretch, however many runs overlap."""
_DEFERRED = 1_000_000
"""The third threshold while runs are in flight: young collections before a full one."""

_lock = threading.Lock()
_active = 0
_since: float | None = None
"""When full collections began to wait (``None``: they do not)."""
_saved = (0, 0, 0)


@contextmanager
def full_collections_wait() -> Iterator[None]:
    """Within the block (a run), no full garbage collection starts, unless collections have
    waited ``MAX_WAIT_S`` already; young ones still do."""
    _enter()
    try:
        yield
    finally:
        _exit()


def _enter() -> None:
    global _active, _since, _saved
    with _lock:
        _active += 1
        if _active == 1 and _since is None:
            first, second, third = gc.get_threshold()
            if first > 0:  # a threshold of 0 means the host turned collection off: leave it
                _saved = (first, second, third)
                gc.set_threshold(first, second, _DEFERRED)
                _since = time.monotonic()


def _exit() -> None:
    global _active, _since
    with _lock:
        _active -= 1
        if _since is None:
            return
        if _active == 0 or time.monotonic() - _since > MAX_WAIT_S:
            # Put back only what was set here: a host that changed its thresholds meanwhile keeps them.
            if gc.get_threshold() == (_saved[0], _saved[1], _DEFERRED):
                gc.set_threshold(*_saved)
            _since = None


def waiting() -> bool:
    """Whether full collections wait now (for tests)."""
    return _since is not None
