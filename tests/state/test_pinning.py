"""Reads pinned to the planned snapshot, backend by backend, and the ``snapshot_moved`` gap a
snapshot that cannot be pinned gives (in a live run and in its exact replay)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import lancedb
import pytest
import tantivy

import race.engine
from backends.base import RefusedSnapshot
from backends.graph import GraphAdapter
from backends.graph.store import write_graph
from backends.lancedb import LanceAdapter
from backends.lancedb.query import TABLE
from backends.tantivy import TantivyAdapter
from planner import scans
from race.engine import Engine
from race.state.cache import ResultCache
from rsc import GapKind, ObligationStatus, ScanRequest, SnapshotMoved
from tests.conftest import WrappedAdapter
from tests.state.conftest import mixed_hits, plan


def _request(index: Path, backend: str) -> ScanRequest:
    explain = Engine.open(index).plan_sync(plan(backend))
    (scan,) = scans(explain.physical)
    return scan.request


def _scan(adapter: Any, request: ScanRequest) -> Any:
    return anyio.run(adapter.scan, request)


def _refused(adapter: Any, request: ScanRequest, planned: str, current: str) -> None:
    assert isinstance(adapter, RefusedSnapshot)
    with pytest.raises(SnapshotMoved) as caught:
        _scan(adapter, request)
    assert (caught.value.planned, caught.value.current) == (planned, current)
    assert planned in str(caught.value) and current in str(caught.value)


def _delete(index: Path, chunk: str) -> None:
    writer = tantivy.Index.open(str(index / "tantivy")).writer(heap_size=15_000_000, num_threads=1)
    writer.delete_documents_by_term("chunk_id", chunk)
    writer.commit()
    writer.wait_merging_threads()


def test_an_adapter_with_nothing_to_pin_is_its_own_pinned_self(index_dir: Path) -> None:
    wrapped = WrappedAdapter(TantivyAdapter.open(index_dir))
    assert wrapped.pinned("anything") is wrapped
    assert anyio.run(wrapped.pin, "anything") is wrapped


def test_tantivy_holds_its_searcher_for_the_run(live_index: Path) -> None:
    request = _request(live_index, "tantivy")
    adapter = TantivyAdapter.open(live_index)
    planned = adapter.generation()
    held = adapter.pinned(planned)
    first = _scan(held, request)
    _delete(live_index, first.hits[0].chunk_id)
    again = _scan(held, request)
    assert again == first and {h.custody.index_generation for h in again.hits} == {planned}
    current = adapter.generation()
    assert current != planned
    assert first.hits[0].chunk_id not in {h.chunk_id for h in _scan(adapter, request).hits}
    # Only the state the reader holds can be pinned: the planned one is gone for a new run.
    _refused(adapter.pinned(planned), request, planned, current)


def test_lancedb_checks_out_the_planned_version(live_index: Path, edited_index: Path) -> None:
    request = _request(live_index, "lancedb")
    adapter = LanceAdapter.open(live_index)
    planned = adapter.generation()
    first = _scan(adapter.pinned(planned), request)
    table = lancedb.connect(str(live_index / "lancedb")).open_table(TABLE)
    table.delete(f"chunk_id = '{first.hits[0].chunk_id}'")
    assert adapter.generation() != planned
    # An earlier version is still there to check out: a later run planned with it reads it.
    later = anyio.run(adapter.pin, planned)
    assert not isinstance(later, RefusedSnapshot)
    assert _scan(later, request).hits == first.hits
    assert later.identity == adapter.identity
    # Another table's generation at the same version number is not this table's snapshot.
    other = LanceAdapter.open(edited_index).generation()
    _refused(adapter.pinned(other), request, other, adapter.generation())


def test_the_graph_keeps_its_loaded_snapshot(live_index: Path) -> None:
    request = _request(live_index, "graph")
    adapter = GraphAdapter.open(live_index)
    planned = adapter.generation()
    held = adapter.pinned(planned)
    first = _scan(held, request)
    graph = adapter.graph.copy()
    graph.remove_edge("runbook-kst-e1042", first.hits[0].doc_id, key="cites")
    write_graph(graph, live_index / "graph", corpus_revision="edited")
    assert _scan(held, request) == first
    assert held.origins([first.hits[0].doc_id]) == adapter.origins([first.hits[0].doc_id])
    current = adapter.generation()
    assert current != planned
    _refused(adapter.pinned(planned), request, planned, current)


def _commit_before_pinning(index: Path, chunk: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tantivy commit lands after the run was planned, before its adapters are pinned."""
    real = race.engine.pin_snapshots

    async def pin_snapshots(*args: Any, **kwargs: Any) -> Any:
        _delete(index, chunk)
        return await real(*args, **kwargs)

    monkeypatch.setattr(race.engine, "pin_snapshots", pin_snapshots)


def test_a_snapshot_gone_before_pinning_is_a_gap_that_is_not_cached(
    live_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine.open(live_index)
    lexical = plan("tantivy")
    chunk = engine.run_sync(lexical).evidence[0].hits[0].chunk_id
    # A cached answer of the planned snapshot would still be served (it was read pinned to it).
    engine.clear_receipt_cache()
    engine.result_cache = ResultCache()
    planned = engine.generations()["tantivy"]
    with monkeypatch.context() as patch:
        _commit_before_pinning(live_index, chunk, patch)
        receipt = engine.run_sync(lexical)
    current = engine.generations()["tantivy"]
    assert receipt.evidence == () and mixed_hits(receipt) == []
    (gap,) = [g for g in receipt.gaps if g.kind is GapKind.SNAPSHOT_MOVED]
    assert gap.obligation == "lexical" and planned in gap.detail and current in gap.detail
    assert receipt.obligations[0].status is not ObligationStatus.SATISFIED
    after = engine.run_sync(lexical)
    assert after.operational.receipt_cache == "miss" and not after.gaps and after.evidence


def test_a_snapshot_moved_gap_replays_exactly(
    live_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine.open(live_index)
    lexical = plan("tantivy")
    chunk = engine.run_sync(lexical).evidence[0].hits[0].chunk_id
    engine.clear_receipt_cache()
    engine.result_cache = ResultCache()
    with monkeypatch.context() as patch:
        _commit_before_pinning(live_index, chunk, patch)
        live = engine.run_sync(lexical, retain=tmp_path / "retained")
    assert any(g.kind is GapKind.SNAPSHOT_MOVED for g in live.gaps)
    replayed = engine.replay_sync(live, tmp_path / "retained")
    assert replayed.normalized_bytes() == live.normalized_bytes()
