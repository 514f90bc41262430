"""Calls the run leaves behind (race.run.detached): the coordinator keeps the deadline whatever
the adapter does, drops the late answer (never read, never cached), accounts the call in
``operational``, and a backend whose pool of left-behind calls is full is refused as a gap
while the other backends answer."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

from race.engine import Engine
from race.receipt import Receipt
from race.run.detached import CallPool
from rsc import GapKind, ObligationStatus
from tests.faults.injector import FaultyAdapter, faulty_adapters, ignore_cancel
from tests.faults.matrix import SLACK_MS
from tests.loop_lag import LoopLag

pytestmark = pytest.mark.anyio

DEADLINE_MS = 1500
LEG_MS = 300

PLAN: dict[str, Any] = {
    "schema_version": "race.plan/1",
    "root": "both",
    "obligations": [
        {
            "id": "words",
            "kind": "seek_support",
            "query": {"text": "partition stall raft election"},
            "query_class": "lexical",
            "k": 5,
            "allow_contracts": ["tantivy.bm25"],
        },
        {
            "id": "deps",
            "kind": "seek_support",
            "query": {
                "entities": ["entity:kestrel-python-client"],
                "pattern": {"relations": ["depends_on"], "direction": "out", "depth": 3},
            },
            "query_class": "dependency",
            "k": 10,
            "required_coverage": "bounded_structural",
        },
    ],
    "operators": [{"id": "both", "op": "union", "inputs": ["words", "deps"]}],
    "budget": {"deadline_ms": DEADLINE_MS, "leg_timeout_ms": LEG_MS},
}


def _status(receipt: Receipt, node: str) -> ObligationStatus:
    return next(o.status for o in receipt.obligations if o.id == node)


async def _until_ended(pool: CallPool) -> None:
    """Wait (not a timing check: the stuck call ends when its sleep does) for every left-behind call."""
    with anyio.fail_after(60):
        while pool.left_behind():
            await anyio.sleep(0.05)


async def test_a_call_that_ignores_cancellation_is_left_behind_and_its_answer_never_read(
    session_engine: Engine,
) -> None:
    wrapped = faulty_adapters(session_engine.adapters, backend="tantivy", faults={"words": ignore_cancel(3.0)})
    engine = Engine(wrapped)
    engine.call_pool = CallPool(capacity=1)
    await engine.warm(PLAN)

    async with LoopLag() as lag:
        started = time.monotonic()
        first = await engine.run(PLAN)
        ms = (time.monotonic() - started) * 1000.0
    assert ms <= DEADLINE_MS + SLACK_MS + lag.max_ms, f"{ms:.0f} ms (loop lag {lag.max_ms:.0f} ms)"
    assert _status(first, "words") is ObligationStatus.UNSATISFIED
    assert _status(first, "deps") is ObligationStatus.SATISFIED
    (late,) = [g for g in first.gaps if g.obligation == "words"]
    assert late.kind is GapKind.TIMEOUT and late.backend == "tantivy"
    assert first.operational.left_behind == {"tantivy": 1}
    assert first.operational.still_running == {"tantivy": 1}

    # The pool (capacity 1) is full while the call still runs: tantivy's leg is refused, named
    # as such; the graph's leg is untouched.
    second = await engine.run(PLAN)
    (refused,) = [g for g in second.gaps if g.obligation == "words"]
    assert refused.kind is GapKind.RESOURCE_LIMITED and "call pool is full" in refused.detail
    assert _status(second, "deps") is ObligationStatus.SATISFIED
    assert second.operational.calls.get("tantivy", 0) == 0
    assert second.operational.receipt_cache == "miss"

    # The stuck call ends and answers; nobody reads it: the next run asks tantivy again.
    await _until_ended(engine.call_pool)
    tantivy: FaultyAdapter = wrapped["tantivy"]
    assert [i.fault for i in tantivy.injected] == ["ignore_cancel"]
    tantivy.faults.clear()
    third = await engine.run(PLAN)
    assert _status(third, "words") is ObligationStatus.SATISFIED and not third.gaps
    assert third.operational.legs["words/tantivy.bm25@1.0.0"]["cache"] == "miss"
    assert third.operational.calls.get("tantivy") == 1
    assert third.operational.still_running == {}


async def test_the_pool_answers_raises_and_leaves_behind() -> None:
    pool = CallPool(capacity=2)
    left: dict[str, int] = {}

    async def answer() -> int:
        return 7

    async def fail() -> int:
        raise KeyError("lost shard")

    ended = anyio.Event()

    async def stubborn() -> int:
        try:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.3)
        finally:
            ended.set()
        return 8

    assert await pool.call("a", answer, left) == 7
    with pytest.raises(KeyError, match="lost shard"):
        await pool.call("a", fail, left)
    with anyio.move_on_after(0.01):
        await pool.call("a", stubborn, left)
    assert left == {"a": 1} and pool.left_behind("a") == 1 and not pool.full("a")
    assert pool.left_by_backend() == {"a": 1} and pool.left_behind("b") == 0
    await ended.wait()
    await anyio.sleep(0)  # the task's end is seen by the pool on the next turn of the loop
    assert pool.left_behind() == 0 and pool.left_by_backend() == {}

    # Several calls at once, each bounded: the answers, the exception, and the one left behind.
    ended = anyio.Event()
    found = await pool.settle({"b": answer, "c": fail, "d": stubborn}, 0.05)
    assert found["b"] == (True, 7) and found["d"] == (False, None)
    answered, error = found["c"]
    assert answered and isinstance(error, KeyError)
    assert pool.left_by_backend() == {"d": 1}
    await ended.wait()
    await anyio.sleep(0)
    assert pool.left_behind() == 0
    with pytest.raises(ValueError):
        CallPool(capacity=0)


async def test_a_blocking_call_answers_raises_and_is_left_behind_on_its_thread() -> None:
    """``call_blocking``: a scan that is one blocking call, waited for without a task. A call the
    caller stops waiting for while it runs is counted until its thread returns."""
    pool = CallPool(capacity=2)
    left: dict[str, int] = {}

    def fail() -> int:
        raise KeyError("lost shard")

    assert await pool.call_blocking("a", lambda: 7, left) == 7
    with pytest.raises(KeyError, match="lost shard"):
        await pool.call_blocking("a", fail, left)
    assert left == {} and pool.left_behind() == 0

    started, release = threading.Event(), threading.Event()

    def stuck() -> int:
        started.set()
        release.wait(60)
        return 8

    scopes: list[anyio.CancelScope] = []

    async def wait_for_it() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await pool.call_blocking("a", stuck, left)
        assert scope.cancelled_caught

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_it)
            await anyio.to_thread.run_sync(started.wait, 60)  # it runs on its thread now
            scopes[0].cancel()
        assert left == {"a": 1} and pool.left_behind("a") == 1 and pool.left_by_backend() == {"a": 1}
    finally:
        release.set()
    await _until_ended(pool)
    assert pool.left_by_backend() == {}
