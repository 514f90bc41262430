"""The mutation suite (issue 12): indexes rebuilt and mutated under long-lived engines with
result caches in memory and on disk. After every mutation, every cache path gives the receipt
a fresh engine gives over the same state, byte for byte, or the run says ``snapshot_moved``;
no receipt serves a stale hit or mixes generations (see ``conftest.assert_honest``)."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lancedb
import pytest
import tantivy

from backends.graph import GraphAdapter
from backends.graph.store import write_graph
from backends.lancedb import LanceAdapter, LanceIndex
from backends.lancedb.build import ann_index_config
from backends.lancedb.query import TABLE, VECTOR, VECTOR_INDEX
from backends.tantivy import TantivyAdapter
from race.engine import Engine
from tests.conftest import remove_live_tree
from tests.state.conftest import (
    EDIT,
    EVERY_BACKEND,
    Builder,
    LongLived,
    assert_honest,
    mixed_hits,
    moved,
    plan,
)


def _texts(receipts: list[Any]) -> str:
    return "\n".join(h.text for r in receipts for item in r.evidence for h in item.hits)


def test_corpora_that_differ_in_one_text_never_share_a_generation(index_dir: Path, edited_index: Path) -> None:
    for adapter in (TantivyAdapter, LanceAdapter, GraphAdapter):
        assert adapter.open(index_dir).generation() != adapter.open(edited_index).generation(), adapter.backend
    # Same table version, same row counts, same embedder: only the dataset itself tells them apart.
    ours, theirs = LanceAdapter.open(index_dir).generation(), LanceAdapter.open(edited_index).generation()
    assert ours.split(":manifest=")[0] == theirs.split(":manifest=")[0]
    assert ours.split(":indexed=")[1] == theirs.split(":indexed=")[1]


def test_reindexing_a_different_corpus_in_place(
    long_lived: LongLived, live_index: Path, builder: Builder, edited_corpus: Path
) -> None:
    """``race index`` of an edited corpus into the directory a long-lived engine has open."""
    before = long_lived.warm(EVERY_BACKEND)
    assert EDIT[0] in _texts([before])
    builder.build(edited_corpus, live_index)
    receipts = assert_honest(long_lived, EVERY_BACKEND)
    text = _texts(receipts)
    assert EDIT[1] in text and EDIT[0] not in text
    revisions = {h.custody.corpus_revision for r in receipts for item in r.evidence for h in item.hits}
    identities = {h.custody.index_identity.split(":", 1)[1] for r in receipts for item in r.evidence for h in item.hits}
    assert len(revisions) == 1 and identities == revisions
    assert revisions != {h.custody.corpus_revision for item in before.evidence for h in item.hits}


def test_an_index_rebuilt_elsewhere_and_moved_into_place(
    long_lived: LongLived, live_index: Path, edited_index: Path, index_dir: Path
) -> None:
    """The other corpus's index replaces the live one, then the original comes back: the disk
    cache then holds entries for both, each served only for its own snapshot."""
    long_lived.warm(EVERY_BACKEND)
    for source in (edited_index, index_dir):
        remove_live_tree(live_index)
        shutil.copytree(source, live_index)
        assert_honest(long_lived, EVERY_BACKEND)


def _lance(index: Path) -> Any:
    return lancedb.connect(str(index / "lancedb")).open_table(TABLE)


def _top_chunk(receipt: Any, backend: str) -> str:
    return next(h.chunk_id for item in receipt.evidence for h in item.hits if h.custody.backend == backend)


def _add(table: Any, chunk: str) -> None:
    row = table.search().where(f"chunk_id = '{chunk}'").limit(1).to_arrow()
    copy = row.set_column(row.schema.get_field_index("chunk_id"), "chunk_id", [[f"{chunk}-copy"]])
    table.add(copy.select([f.name for f in table.schema]))


def _delete(table: Any, chunk: str) -> None:
    table.delete(f"chunk_id = '{chunk}'")


def _update(table: Any, chunk: str) -> None:
    table.update(where=f"chunk_id = '{chunk}'", values={"text": "This chunk was rewritten in place."})


def _reindex(table: Any, chunk: str) -> None:
    _add(table, chunk)
    table.create_index(VECTOR, config=ann_index_config(table.count_rows()), name=VECTOR_INDEX, replace=True)


@pytest.mark.parametrize(
    "mutate", [_add, _delete, _update, _reindex], ids=["add-rows", "delete-rows", "update-rows", "rebuild-ann-index"]
)
def test_lancedb_table_operations(long_lived: LongLived, live_index: Path, mutate: Callable[[Any, str], None]) -> None:
    vector = plan("lancedb")
    before = long_lived.warm(vector)
    mutate(_lance(live_index), _top_chunk(before, "lancedb"))
    after = assert_honest(long_lived, vector)
    assert after[0].fingerprints.backends["lancedb"] != before.fingerprints.backends["lancedb"]


def test_tantivy_commit_between_runs(long_lived: LongLived, live_index: Path) -> None:
    lexical = plan("tantivy")
    before = long_lived.warm(lexical)
    index = tantivy.Index.open(str(live_index / "tantivy"))
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    writer.delete_documents_by_term("chunk_id", _top_chunk(before, "tantivy"))
    writer.commit()
    writer.wait_merging_threads()
    assert_honest(long_lived, lexical)


def test_changing_an_edge(long_lived: LongLived, live_index: Path) -> None:
    graph_plan = plan("graph")
    before = long_lived.warm(graph_plan)
    target = next(h.doc_id for item in before.evidence for h in item.hits)
    graph = long_lived.memory.adapters["graph"].graph.copy()  # type: ignore[attr-defined]
    graph.remove_edge("runbook-kst-e1042", target, key="cites")
    write_graph(graph, live_index / "graph", corpus_revision="edited")
    after = assert_honest(long_lived, graph_plan)
    assert target not in {h.doc_id for item in after[0].evidence for h in item.hits}


def _commit_once(
    targets: tuple[tuple[type[Any], str], ...], commit: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """Each ``cls.method`` in ``targets`` (the blocking part of a scan, on its worker thread:
    the table's scan, or the exact matrix's) commits to the index first, on the first call of
    any of them: the commit lands while the leg is in flight."""
    done: list[int] = []
    lock = threading.Lock()

    def patched(real: Callable[..., Any]) -> Callable[..., Any]:
        def scan(self: Any, request: Any) -> Any:
            with lock:
                if not done:
                    commit()
                    done.append(1)
            return real(self, request)

        return scan

    for cls, method in targets:
        monkeypatch.setattr(cls, method, patched(getattr(cls, method)))
    return done


def _tantivy_commit(index: Path, chunk: str) -> Callable[[], None]:
    def commit() -> None:
        writer = tantivy.Index.open(str(index / "tantivy")).writer(heap_size=15_000_000, num_threads=1)
        writer.delete_documents_by_term("chunk_id", chunk)
        writer.commit()
        writer.wait_merging_threads()

    return commit


def _lance_commit(index: Path, chunk: str) -> Callable[[], None]:
    return lambda: _delete(_lance(index), chunk)


@pytest.mark.parametrize("backend", ["tantivy", "lancedb"])
def test_a_commit_during_an_in_flight_leg(
    long_lived: LongLived, live_index: Path, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run reads the snapshot it was planned with: its receipt is a fresh engine's over that
    snapshot (a copy of the index taken before the commit), its hits carry the generation its
    fingerprints name; the next run reads the commit."""
    one = plan(backend)
    before = long_lived.warm(one)
    planned = tmp_path / "planned"
    shutil.copytree(live_index, planned)
    chunk = _top_chunk(before, backend)
    for engine in (long_lived.memory, long_lived.disk):
        engine.clear_receipt_cache()
        engine.result_cache = type(engine.result_cache)()
        with monkeypatch.context() as patch:
            commit = (_tantivy_commit if backend == "tantivy" else _lance_commit)(live_index, chunk)
            targets = (
                ((TantivyAdapter, "_scan"),)
                if backend == "tantivy"
                else ((LanceAdapter, "_scan"), (LanceIndex, "_scan_exact"))
            )
            done = _commit_once(targets, commit, patch)
            during = engine.run_sync(one)
            assert done == [1]
        assert mixed_hits(during) == []
        if not moved(during):
            assert during.normalized_bytes() == Engine.open(planned).run_sync(one).normalized_bytes()
            assert chunk in {h.chunk_id for item in during.evidence for h in item.hits}
        after = engine.run_sync(one)
        assert after.operational.receipt_cache == "miss"
        assert chunk not in {h.chunk_id for item in after.evidence for h in item.hits}
        assert after.normalized_bytes() == Engine.open(live_index).run_sync(one).normalized_bytes()
        # The next engine starts from the committed state; undo nothing, copy it as the new "planned".
        remove_live_tree(planned)
        shutil.copytree(live_index, planned)
        chunk = _top_chunk(after, backend)
