"""The mutation suite over a remote: a ``race serve`` over a private index copy, its index
committed to between runs and during one, then the server stopped. A remote cannot be held at a
snapshot, so a run whose server generation moved or cannot be read says ``snapshot_moved``;
a generation is never remembered, so a stopped server is never answered from a cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tantivy

from backends.remote import RemoteAdapter
from race.engine import Engine
from race.run.legs import UNKNOWN_GENERATION
from race.state.cache import ResultCache
from rsc import GapKind, ObligationStatus
from tests.remote.conftest import Server, launch, remote_plan, wait_ready
from tests.state.conftest import LongLived, assert_honest, mixed_hits, moved

PLAN = remote_plan(k=6)


@pytest.fixture
def served(live_index: Path) -> Iterator[Server]:
    server = wait_ready(launch(live_index))
    yield server
    if server.process.poll() is None:
        assert server.stop() == 0


def _remote_engines(url: str, cache_dir: Path) -> LongLived:
    def make(cache: Path | None) -> Engine:
        return Engine({"remote": RemoteAdapter.connect(url)}, result_cache=ResultCache(directory=cache))

    return LongLived.over(make, cache_dir)


def _delete_top_hit(index: Path, receipt: Any) -> str:
    chunk = str(receipt.evidence[0].hits[0].chunk_id)
    writer = tantivy.Index.open(str(index / "tantivy")).writer(heap_size=15_000_000, num_threads=1)
    writer.delete_documents_by_term("chunk_id", chunk)
    writer.commit()
    writer.wait_merging_threads()
    return chunk


def test_a_remote_commit_between_runs_then_the_server_stops(served: Server, live_index: Path, tmp_path: Path) -> None:
    live = _remote_engines(served.url, tmp_path / "cache")
    before = live.warm(PLAN)
    chunk = _delete_top_hit(live_index, before)
    after = assert_honest(live, PLAN)
    assert chunk not in {h.chunk_id for r in after for item in r.evidence for h in item.hits}
    assert after[0].fingerprints.backends["remote"] != before.fingerprints.backends["remote"]

    assert served.stop() == 0
    assert live.memory.adapters["remote"].generation() == UNKNOWN_GENERATION
    for engine in (live.memory, live.disk):
        for _ in range(2):
            receipt = engine.run_sync(PLAN)
            assert receipt.operational.receipt_cache == "miss"
            assert receipt.evidence == ()
            assert moved(receipt)
            (ob,) = receipt.obligations
            assert ob.status is not ObligationStatus.SATISFIED
            engine.clear_receipt_cache()


def test_a_remote_generation_that_moves_during_the_leg_refuses_it(
    served: Server, live_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = _remote_engines(served.url, tmp_path / "cache")
    before = live.warm(PLAN)
    planned = before.fingerprints.backends["remote"]
    real = RemoteAdapter.fetch
    committed: list[str] = []

    async def fetch(self: RemoteAdapter, request: Any) -> Any:
        if not committed:
            committed.append(_delete_top_hit(live_index, before))
        return await real(self, request)

    live.memory.clear_receipt_cache()
    live.memory.result_cache = ResultCache()
    with monkeypatch.context() as patch:
        patch.setattr(RemoteAdapter, "fetch", fetch)
        during = live.memory.run_sync(PLAN)
    assert committed and during.evidence == () and mixed_hits(during) == []
    (refused,) = [g for g in during.gaps if g.kind is GapKind.SNAPSHOT_MOVED]
    current = RemoteAdapter.connect(served.url).generation()
    assert planned in refused.detail and current in refused.detail and current != planned
    # A refused leg is not an answer: nothing of it was cached, and the next run reads afresh.
    assert_honest(live, PLAN)
