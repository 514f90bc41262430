"""I6 through the engine's receipt cache: a write to any backend's index, made by another
handle between two runs, is a miss with a new plan fingerprint, never a stale hit. The
backends detect change with a stat or two rather than by rereading their metadata; these
tests write real commits so that the cheap checks are held to the real file layouts."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import lancedb
import pytest
import tantivy

from backends.graph.store import GRAPH_FILE, write_graph
from backends.lancedb import LanceAdapter
from backends.lancedb.query import TABLE
from backends.lancedb.snapshot import _next_manifest
from race.engine import Engine
from race.receipt import Receipt

LEXICAL = {
    "schema_version": "race.plan/1",
    "root": "o",
    "obligations": [
        {
            "id": "o",
            "kind": "seek_support",
            "query": {"text": "partition stall raft election quorum"},
            "query_class": "lexical",
            "k": 10,
        }
    ],
}


@pytest.fixture
def index_copy(index_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the session index, free to be written to."""
    target = tmp_path / "index"
    shutil.copytree(index_dir, target)
    return target


def _warm(engine: Engine, plan: Any) -> Receipt:
    cold = engine.run_sync(plan)
    warm = engine.run_sync(plan)
    assert cold.operational.receipt_cache == "miss"
    assert warm.operational.receipt_cache == "hit"
    assert warm.normalized_bytes() == cold.normalized_bytes()
    return warm


def _assert_miss_then_hit(engine: Engine, plan: Any, before: Receipt, backend: str) -> None:
    after = engine.run_sync(plan)
    assert after.operational.receipt_cache == "miss"
    assert after.fingerprints.backends[backend] != before.fingerprints.backends[backend]
    assert after.fingerprints.plan != before.fingerprints.plan
    others = {b: g for b, g in after.fingerprints.backends.items() if b != backend}
    assert others == {b: g for b, g in before.fingerprints.backends.items() if b != backend}
    again = engine.run_sync(plan)
    assert again.operational.receipt_cache == "hit"
    assert again.normalized_bytes() == after.normalized_bytes()


def test_a_lancedb_commit_from_another_handle_is_a_miss(index_copy: Path) -> None:
    engine = Engine.open(index_copy)
    plan = engine.parse(LEXICAL)
    before = _warm(engine, plan)
    table = lancedb.connect(str(index_copy / "lancedb")).open_table(TABLE)
    table.add(table.to_arrow().slice(0, 1))
    _assert_miss_then_hit(engine, plan, before, "lancedb")


def test_a_lancedb_delete_from_another_handle_is_a_miss(index_copy: Path) -> None:
    engine = Engine.open(index_copy)
    plan = engine.parse(LEXICAL)
    before = _warm(engine, plan)
    table = lancedb.connect(str(index_copy / "lancedb")).open_table(TABLE)
    chunk_id = table.to_arrow().column("chunk_id")[0].as_py()
    table.delete(f"chunk_id = '{chunk_id}'")
    _assert_miss_then_hit(engine, plan, before, "lancedb")


def test_a_tantivy_commit_from_another_handle_is_a_miss(index_copy: Path) -> None:
    engine = Engine.open(index_copy)
    plan = engine.parse(LEXICAL)
    before = _warm(engine, plan)
    chunk_id = before.evidence[0].hits[0].chunk_id
    index = tantivy.Index.open(str(index_copy / "tantivy"))
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    writer.delete_documents_by_term("chunk_id", chunk_id)
    writer.commit()
    writer.wait_merging_threads()
    _assert_miss_then_hit(engine, plan, before, "tantivy")
    assert chunk_id not in {h.chunk_id for item in engine.run_sync(plan).evidence for h in item.hits}


def test_a_rewritten_graph_is_a_miss(index_copy: Path) -> None:
    engine = Engine.open(index_copy)
    plan = engine.parse(LEXICAL)
    before = _warm(engine, plan)
    graph = engine.adapters["graph"].graph.copy()  # type: ignore[attr-defined]
    graph.remove_edge(*next(iter(graph.edges(keys=True))))
    write_graph(graph, index_copy / "graph", corpus_revision="edited")
    assert (index_copy / "graph" / GRAPH_FILE).is_file()
    _assert_miss_then_hit(engine, plan, before, "graph")


def test_the_next_manifest_alone_reveals_a_lancedb_commit(index_copy: Path) -> None:
    """The first of the two LanceDB checks on its own: even with the ``_versions/`` stamp made
    to match the directory after the commit, the new version's manifest gives it away."""
    adapter = LanceAdapter.open(index_copy)
    before = adapter.generation()
    memo = adapter._generation_memo
    assert memo is not None and memo.next_manifest is not None and not os.path.exists(memo.next_manifest)
    table = lancedb.connect(str(index_copy / "lancedb")).open_table(TABLE)
    table.add(table.to_arrow().slice(0, 1))
    # Lance put the commit's manifest exactly where the memo looks for it.
    assert os.path.exists(memo.next_manifest)
    st = os.stat(index_copy / "lancedb" / f"{TABLE}.lance" / "_versions")
    adapter._generation_memo = dataclasses.replace(memo, versions_dir=(st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
    after = adapter.generation()
    assert after != before and ":unindexed=1:" in after
    assert adapter.generation() == after


def test_removing_an_old_lancedb_version_rereads_and_keeps_the_generation(index_copy: Path) -> None:
    """The second check: a change to ``_versions/`` that is not a commit (here what a cleanup
    of old versions does on disk) makes the table be read again."""
    adapter = LanceAdapter.open(index_copy)
    before = adapter.generation()
    memo = adapter._generation_memo
    versions = index_copy / "lancedb" / f"{TABLE}.lance" / "_versions"
    oldest = max(p for p in versions.iterdir() if p.suffix == ".manifest" and len(p.stem) == 20)
    oldest.unlink()
    assert adapter.generation() == before
    # The directory changed, so the table was read again (a new memo), to the same answer.
    assert adapter._generation_memo is not memo


def test_next_manifest_names_follow_the_table_naming_scheme(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "7.manifest").touch()
    assert _next_manifest(str(v1), 7) == str(v1 / "8.manifest")
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / f"{2**64 - 1 - 7:020d}.manifest").touch()
    assert _next_manifest(str(v2), 7) == str(v2 / f"{2**64 - 1 - 8:020d}.manifest")
    # The current version's manifest not found (removed meanwhile): no shortcut, read afresh.
    assert _next_manifest(str(tmp_path), 7) is None
