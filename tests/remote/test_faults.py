"""I7: a remote timeout, slow answer, error status, dropped connection or truncated body ends
as an explicit gap within the leg deadline (+100 ms slack, + the event loop's own lag measured
during the run: tests/loop_lag.py), never as an empty result.

Where the subject is an error, not a deadline, the leg has ``ROOMY_MS``: on a busy machine only
the injected fault, never a slow answer, may end it."""

from __future__ import annotations

import time

import pytest

from race.receipt import Receipt
from rsc import GapKind, ObligationStatus
from tests.loop_lag import LoopLag
from tests.remote.conftest import Server, remote_engine, remote_plan

pytestmark = pytest.mark.anyio

DEADLINE_MS = 400
SLACK_MS = 100
ROOMY_MS = 60_000


async def _timed_run(
    url: str, *, timeout: float = 5.0, deadline_ms: int = DEADLINE_MS
) -> tuple[Receipt, float, LoopLag]:
    engine = remote_engine(url, timeout=timeout)
    plan = remote_plan(deadline_ms=deadline_ms)
    await engine.plan(plan)  # handshake, generation and planning are not the leg under test
    await engine.warm(plan)
    async with LoopLag() as lag:
        started = time.monotonic()
        receipt = await engine.run(plan)
        ms = (time.monotonic() - started) * 1000.0
    return receipt, ms, lag


def _failed_with(receipt: Receipt, kind: GapKind) -> str:
    (ob,) = receipt.obligations
    assert ob.status is ObligationStatus.UNSATISFIED, "a failed leg must never read as absence"
    assert receipt.evidence == ()
    kinds = {g.kind for g in ob.gaps}
    assert kind in kinds, f"expected a {kind.value} gap, got {sorted(k.value for k in kinds)}"
    assert GapKind.MISSING_EVIDENCE not in kinds
    (gap,) = [g for g in ob.gaps if g.kind is kind]
    assert gap.backend == "remote"
    return gap.detail


async def test_hanging_server_is_a_timeout_gap_within_the_leg_deadline(fault_servers: dict[str, Server]) -> None:
    receipt, ms, lag = await _timed_run(fault_servers["hang"].url)
    detail = _failed_with(receipt, GapKind.TIMEOUT)
    assert f"leg deadline of {DEADLINE_MS} ms" in detail
    assert ms < DEADLINE_MS + SLACK_MS + lag.max_ms


async def test_plan_deadline_cuts_the_leg_as_cancelled(fault_servers: dict[str, Server]) -> None:
    engine = remote_engine(fault_servers["hang"].url)
    plan = remote_plan(deadline_ms=5000, plan_deadline_ms=DEADLINE_MS)
    await engine.plan(plan)
    await engine.warm(plan)
    async with LoopLag() as lag:
        started = time.monotonic()
        receipt = await engine.run(plan)
        ms = (time.monotonic() - started) * 1000.0
    detail = _failed_with(receipt, GapKind.CANCELLED)
    assert f"plan deadline ({DEADLINE_MS} ms)" in detail
    assert ms < DEADLINE_MS + SLACK_MS + lag.max_ms


async def test_client_timeout_shorter_than_the_leg_is_a_timeout_gap(fault_servers: dict[str, Server]) -> None:
    # The leg's own deadline is far away: only the client's timeout can end the leg.
    receipt, ms, lag = await _timed_run(fault_servers["hang"].url, timeout=0.2, deadline_ms=ROOMY_MS)
    detail = _failed_with(receipt, GapKind.TIMEOUT)
    assert "client timeout" in detail
    assert ms < DEADLINE_MS + SLACK_MS + lag.max_ms


async def test_slow_answer_inside_the_deadline_is_evidence(fault_servers: dict[str, Server]) -> None:
    receipt, ms, lag = await _timed_run(fault_servers["slow"].url, deadline_ms=ROOMY_MS)
    (ob,) = receipt.obligations
    assert ob.status is ObligationStatus.SATISFIED and ob.gaps == ()
    assert receipt.evidence and all(h.custody.backend == "remote" for e in receipt.evidence for h in e.hits)
    assert ms < ROOMY_MS + SLACK_MS + lag.max_ms


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("status", "HTTP 503"),
        ("drop", "connection closed before a complete response"),
        ("truncate", "connection closed before a complete response"),
    ],
)
async def test_bad_answers_are_backend_error_gaps(fault_servers: dict[str, Server], name: str, words: str) -> None:
    receipt, ms, lag = await _timed_run(fault_servers[name].url, deadline_ms=ROOMY_MS)
    detail = _failed_with(receipt, GapKind.BACKEND_ERROR)
    assert words in detail
    assert ms < ROOMY_MS + SLACK_MS + lag.max_ms


async def test_fault_first_n_then_healthy(fault_servers: dict[str, Server]) -> None:
    engine = remote_engine(fault_servers["first"].url)
    plan = remote_plan(deadline_ms=ROOMY_MS)
    first = await engine.run(plan)
    assert "HTTP 500" in _failed_with(first, GapKind.BACKEND_ERROR)
    second = await engine.run(plan)  # a failed leg is never cached, so this asks again
    assert second.obligations[0].status is ObligationStatus.SATISFIED
    assert second.lineage.id != first.lineage.id
