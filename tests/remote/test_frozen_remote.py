"""A frozen remote never starves the local backends: with the `race serve` process stopped
(SIGSTOP) after ``Engine.open``, a plan with a local lexical obligation and a remote one
returns within its deadline, the local obligation ``satisfied`` and the remote one a gap
naming the remote backend. Generation reads and pins run concurrently, each within its own
bound (race.planning), so the remote's silence marks only its own legs."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from race.engine import Engine
from rsc import GapKind, ObligationStatus
from tests.faults.matrix import SLACK_MS
from tests.loop_lag import LoopLag
from tests.remote.conftest import Server, start_all

pytestmark = pytest.mark.anyio

DEADLINE_MS = 1500
TEXT = "replication raft partition stall leader election"

PLAN: dict[str, Any] = {
    "schema_version": "race.plan/1",
    "root": "both",
    "obligations": [
        {
            "id": "local",
            "kind": "seek_support",
            "query": {"text": TEXT},
            "query_class": "lexical",
            "k": 5,
            "allow_contracts": ["tantivy.bm25"],
        },
        {
            "id": "far",
            "kind": "seek_support",
            "query": {"text": TEXT},
            "query_class": "lexical",
            "k": 5,
            "egress": "remote_ok",
            "allow_contracts": ["remote.bm25"],
        },
    ],
    "operators": [{"id": "both", "op": "union", "inputs": ["local", "far"]}],
    "budget": {"deadline_ms": DEADLINE_MS},
}


@pytest.fixture
def own_server(index_dir: Path) -> Iterator[Server]:
    """A server of this test's own: it is frozen, then thawed and stopped."""
    (running,) = start_all(index_dir, [()])
    try:
        yield running
    finally:
        running.process.send_signal(signal.SIGCONT)
        assert running.stop() == 0


async def test_a_frozen_remote_is_its_own_gap_and_the_local_obligation_is_satisfied(
    own_server: Server, index_dir: Path
) -> None:
    engine = Engine.open(index_dir, remotes=[own_server.url])
    try:
        healthy = await engine.run(PLAN)
        assert {o.id: o.status for o in healthy.obligations} == {
            "far": ObligationStatus.SATISFIED,
            "local": ObligationStatus.SATISFIED,
        }
        engine.clear_receipt_cache()
        own_server.process.send_signal(signal.SIGSTOP)
        async with LoopLag() as lag:
            started = time.monotonic()
            receipt = await engine.run(PLAN)
            ms = (time.monotonic() - started) * 1000.0
    finally:
        own_server.process.send_signal(signal.SIGCONT)
        await engine.aclose()
    assert ms <= DEADLINE_MS + SLACK_MS + lag.max_ms, f"{ms:.0f} ms (loop lag {lag.max_ms:.0f} ms)"
    status = {o.id: o.status for o in receipt.obligations}
    assert status["local"] is ObligationStatus.SATISFIED, receipt.gaps
    assert status["far"] is ObligationStatus.UNSATISFIED, receipt.operational
    assert not [g for g in receipt.gaps if g.obligation == "local"]
    (far,) = [o for o in receipt.obligations if o.id == "far"]
    kinds = {g.kind for g in far.gaps}
    assert kinds and kinds <= {GapKind.SNAPSHOT_MOVED, GapKind.TIMEOUT, GapKind.CANCELLED}, far.gaps
    assert all(g.backend == "remote" for g in far.gaps)
    assert receipt.evidence and all(h.custody.backend == "tantivy" for i in receipt.evidence for h in i.hits)
