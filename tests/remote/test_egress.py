"""I15: an obligation with ``egress: local`` never reaches a remote contract, even where the
planner would prefer it on cost; where a remote contract was its only capable one, the
receipt says ``egress_denied``. Checked end to end against a live ``race serve``."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner import Statistics, scans
from race.engine import Engine
from rsc import BackendStatistics, GapKind, ObligationStatus
from tests.conftest import FIXTURES
from tests.remote.conftest import Server

pytestmark = pytest.mark.anyio

PLAN = FIXTURES / "plans" / "egress_local_only.json"


def remote_cheaper(engine: Engine) -> Statistics:
    """Measured latencies that make the remote contract the cheaper one by far."""
    real = engine.statistics().backends
    return Statistics(
        backends={
            "tantivy": real["tantivy"].model_copy(update={"latency_ms": {"tantivy.bm25": 50.0}}),
            "remote": BackendStatistics(
                backend="remote",
                rows=real["tantivy"].rows,
                value_counts=real["tantivy"].value_counts,
                latency_ms={"remote.bm25": 0.01},
            ),
            **{k: v for k, v in real.items() if k not in ("tantivy", "remote")},
        }
    )


async def test_local_obligations_never_reach_the_remote(index_dir: Path, server: Server) -> None:
    probe = Engine.open(index_dir, remotes=[server.url])
    engine = Engine.open(index_dir, remotes=[server.url], statistics=remote_cheaper(probe))
    explain = await engine.plan(PLAN)
    receipt = await engine.run(PLAN)
    by_id = {o.id: o for o in receipt.obligations}

    # The control: with egress remote_ok the planner does prefer the (cheaper) remote.
    assert by_id["remote-ok"].served_by == ("remote.bm25@1.0.0",)
    # Local-only: the same preference is overridden, the local contract serves.
    assert by_id["local-prefers-remote"].served_by == ("tantivy.bm25@1.0.0",)
    assert by_id["local-prefers-remote"].status is ObligationStatus.SATISFIED
    # Local-only and only a remote contract capable: short, and the receipt says why.
    short = by_id["local-only-remote-capable"]
    assert short.status is ObligationStatus.UNSATISFIED and short.served_by == ()
    assert [g.kind for g in short.gaps] == [GapKind.EGRESS_DENIED]
    assert any(g.kind is GapKind.EGRESS_DENIED and g.obligation == short.id for g in receipt.gaps)

    # Nothing of a local obligation crossed the wire: one remote call in all, for remote-ok.
    assert receipt.operational.calls.get("remote") == 1
    remote_hits = [h for item in receipt.evidence for h in item.hits if h.custody.backend == "remote"]
    assert remote_hits and all(h.custody.rsc == "remote.bm25@1.0.0" for h in remote_hits)
    remote_requests = {s.request.obligation for s in scans(explain.physical) if s.request.backend == "remote"}
    assert remote_requests == {"remote-ok"}
    group = next(g for g in explain.groups if g.logical == "local-prefers-remote")
    remote_alt = next(a for a in group.alternatives if a.rsc == "remote.bm25@1.0.0")
    assert not remote_alt.eligible and any("egress" in r for r in remote_alt.rejected_because)
