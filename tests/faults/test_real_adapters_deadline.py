"""The real local adapters' blocking work is abandoned at the deadline (I7, I17).

Each adapter's blocking ``_scan`` is made to sleep 3 s (in its worker thread) before doing
its real work; a one-obligation plan on that backend with an 800 ms plan deadline must
return within the deadline + 100 ms (+ the event loop's own lag during the run, which on a
busy machine delays every wake-up, tests/loop_lag.py), with a ``timeout`` or ``cancelled``
gap and no hits: the executor never waits for the thread.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from planner import scans
from race.engine import Engine
from rsc import GapKind, ObligationStatus, ScanRequest, ScanResult
from tests.loop_lag import LoopLag

pytestmark = pytest.mark.anyio

DEADLINE_MS = 800
SLACK_MS = 100
SLEEP_S = 3.0

PLANS: dict[str, dict[str, Any]] = {
    "tantivy": {
        "id": "lexical",
        "kind": "seek_support",
        "query": {"text": "partition stall raft election"},
        "query_class": "lexical",
        "k": 5,
        "allow_contracts": ["tantivy.bm25"],
    },
    "lancedb": {
        "id": "vector",
        "kind": "seek_support",
        "query": {"text": "the broker ran out of memory and was killed"},
        "query_class": "conceptual",
        "k": 5,
        "allow_contracts": ["lancedb.flat_prefilter"],
    },
    "graph": {
        "id": "traversal",
        "kind": "seek_support",
        "query": {
            "entities": ["entity:kestrel-python-client"],
            "pattern": {"relations": ["depends_on"], "direction": "out", "depth": 3},
        },
        "query_class": "dependency",
        "k": 10,
        "required_coverage": "bounded_structural",
    },
}


def _plan(backend: str) -> dict[str, Any]:
    ob = PLANS[backend]
    return {
        "schema_version": "race.plan/1",
        "root": ob["id"],
        "obligations": [ob],
        "budget": {"deadline_ms": DEADLINE_MS},
    }


@pytest.mark.parametrize("backend", sorted(PLANS))
async def test_a_blocked_adapter_thread_is_abandoned_at_the_deadline(
    backend: str, session_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = session_engine.adapters[backend]
    # An index's LanceDB entry is a handle that plans from files; the scan is the table's.
    real = getattr(adapter, "adapter", None)
    adapter = real() if callable(real) else adapter
    original = adapter._scan  # type: ignore[attr-defined]
    entered: list[float] = []

    def slow_scan(request: ScanRequest) -> ScanResult:
        entered.append(time.monotonic())
        time.sleep(SLEEP_S)  # in the adapter's worker thread, never in the test's
        result: ScanResult = original(request)
        return result

    engine = Engine(dict(session_engine.adapters))  # fresh caches over the session's adapters
    plan = _plan(backend)
    explain = await engine.plan(plan)
    await engine.warm(plan)  # set-up is not charged to the deadline: the run's is what is timed
    assert [s.request.backend for s in scans(explain.physical)] == [backend]
    monkeypatch.setattr(adapter, "_scan", slow_scan)  # restored when the test ends

    async with LoopLag() as lag:
        started = time.monotonic()
        receipt = await engine.run(plan)
        ms = (time.monotonic() - started) * 1000.0

    assert entered, f"{backend}: the leg never reached the adapter's blocking _scan"
    assert ms <= DEADLINE_MS + SLACK_MS + lag.max_ms, (
        f"{backend}: run took {ms:.0f} ms (loop lag {lag.max_ms:.0f} ms); the worker thread was waited for"
    )
    (ob,) = receipt.obligations
    assert ob.status is ObligationStatus.UNSATISFIED
    gaps = [g for g in ob.gaps if g.kind in (GapKind.TIMEOUT, GapKind.CANCELLED)]
    assert gaps and all(g.backend == backend for g in gaps), [g.kind.value for g in ob.gaps]
    assert receipt.evidence == ()
