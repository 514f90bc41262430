"""``race index --update``: after one document is edited, one added and one deleted, the update
embeds only the texts of the edited and added documents that the index did not hold, deletes
the removed one everywhere, and gives the receipts of a whole build of the same corpus, byte
for byte with generations masked, over every fixture plan."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends.graph import GraphAdapter
from backends.ingest.corpus import Chunking, load_corpus
from backends.lancedb.build import chunk_text
from backends.models.embedding import EmbedderIdentity, FloatArray, MiniLMEmbedder, token_counter
from race.cli.main import main
from race.engine import Engine
from race.indexing.indexing import build_index
from race.indexing.update import UpdateSummary, update_index
from tests.conftest import FIXTURES
from tests.test_golden_receipts import masked

DOCS = (
    "changelog/kestrel-3-4-0.md",
    "changelog/kestrel-3-5-0.md",
    "adr/adr-0014-remove-legacy-scram-handshake.md",
    "advisory/ksa-2024-001-kestrelctl-token-permissions.md",
    "runbook/kst-e1042-replication-timeouts.md",
    "adr/adr-0012-fsync-always-default.md",
    "mail/2024-12-10-announce-ksa-2024-003.md",
    "blog/2024-03-18-bump-the-ack-timeout.md",
)
EDITED, DELETED = DOCS[0], DOCS[5]
ADDED = "advisory/ksa-2024-003-scram-auth-bypass.md"
PLANS = sorted((FIXTURES / "plans").glob("*.json"))

Updated = tuple[Path, Path, "UpdateSummary", "RecordingEmbedder", dict[str, Any]]
"""The updated index, a whole build of the same corpus, the update's summary, what it
embedded, and the generations and texts before and after."""


class RecordingEmbedder:
    """The model, recording every text it is asked to embed."""

    def __init__(self) -> None:
        self.model = MiniLMEmbedder()
        self.texts: list[str] = []

    @property
    def identity(self) -> EmbedderIdentity:
        return self.model.identity

    def embed(self, texts: Sequence[str]) -> FloatArray:
        self.texts += texts
        return self.model.embed(texts)


def untimed(plan: Path) -> dict[str, Any]:
    """The plan without its deadline and leg timeout: the comparison is of what the indexes
    hold, and on a loaded machine a timeout would enter one receipt and not the other."""
    data: dict[str, Any] = json.loads(plan.read_text())
    budget = data.get("budget")
    if isinstance(budget, dict):
        data["budget"] = {k: v for k, v in budget.items() if k not in ("deadline_ms", "leg_timeout_ms")}
    return data


def _corpus(root: Path) -> Path:
    (root / "docs").mkdir(parents=True)
    for name in ("schema.json", "edges.jsonl"):
        shutil.copy(FIXTURES / "corpus" / name, root / name)
    for name in DOCS:
        (root / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / "corpus" / "docs" / name, root / "docs" / name)
    return root


def _texts(corpus: Path) -> dict[str, list[str]]:
    loaded = load_corpus(corpus, chunking=Chunking(tokens=token_counter()))
    out: dict[str, list[str]] = {}
    for chunk in loaded.chunks:
        out.setdefault(chunk.doc_id, []).append(chunk_text(chunk))
    return out


@pytest.fixture(scope="module")
def updated(tmp_path_factory: pytest.TempPathFactory) -> Updated:
    tmp = tmp_path_factory.mktemp("update")
    corpus = _corpus(tmp / "corpus")
    index = tmp / "updated"
    first = build_index(corpus, index)
    before = _texts(corpus)
    edited = corpus / "docs" / EDITED
    edited.write_text(edited.read_text() + "\nA late note: the broker now refuses frames over 64 MiB.\n")
    (corpus / "docs" / DELETED).unlink()
    shutil.copy(FIXTURES / "corpus" / "docs" / ADDED, corpus / "docs" / ADDED)
    recorder = RecordingEmbedder()
    summary = update_index(corpus, index, embedder=recorder)
    rebuilt = tmp / "rebuilt"
    build_index(corpus, rebuilt)
    return index, rebuilt, summary, recorder, {"first": first, "before": before, "after": _texts(corpus)}


def test_update_touches_only_the_edited_added_and_deleted_documents(updated: Updated) -> None:
    _, _, summary, _, _ = updated
    assert summary.rebuilt is None
    assert summary.changed == ("changelog-3-4-0",)
    assert summary.added == ("ksa-2024-003",)
    assert summary.removed == ("adr-0012",)
    assert summary.unchanged == len(DOCS) - 2


def test_update_embeds_only_new_texts_of_changed_and_added_documents(updated: Updated) -> None:
    _, _, summary, recorder, texts = updated
    held = {t for doc in texts["before"].values() for t in doc}
    fresh = [t for doc in (*summary.changed, *summary.added) for t in texts["after"][doc]]
    expected = sorted({t for t in fresh if t not in held})
    assert expected, "the edit must change at least one chunk's text"
    assert sorted(recorder.texts) == expected  # each once, nothing of the unchanged documents
    assert summary.texts_embedded == len(expected)
    assert summary.chunks_embedded == len(fresh)


def test_update_is_a_new_generation_in_every_backend(updated: Updated) -> None:
    _, _, summary, _, texts = updated
    assert set(summary.generations) == {"tantivy", "lancedb", "graph"}
    for backend, generation in summary.generations.items():
        assert generation != texts["first"][backend], backend


def test_update_equals_a_rebuild_in_graph_generation_and_vectors(updated: Updated) -> None:
    index, rebuilt, _, _, _ = updated
    assert GraphAdapter.open(index).generation() == GraphAdapter.open(rebuilt).generation()
    import lancedb

    def rows(path: Path) -> dict[str, bytes]:
        table = lancedb.connect(str(path / "lancedb")).open_table("chunks").to_arrow()
        ids = table.column("chunk_id").to_pylist()
        vectors = np.asarray(table.column("vector").combine_chunks().flatten(), dtype=np.float32).reshape(len(ids), -1)
        return {i: v.tobytes() for i, v in zip(ids, vectors, strict=True)}

    assert rows(index) == rows(rebuilt)
    for name in ("race-index.json", "documents.json", "schema.json"):
        assert (index / name).read_bytes() == (rebuilt / name).read_bytes(), name
    tantivy_a = json.loads((index / "tantivy" / "race.json").read_text())
    tantivy_b = json.loads((rebuilt / "tantivy" / "race.json").read_text())
    assert {k: v for k, v in tantivy_a.items() if k != "index_id"} == {
        k: v for k, v in tantivy_b.items() if k != "index_id"
    }


@pytest.mark.parametrize("plan", PLANS, ids=[p.stem for p in PLANS])
def test_update_gives_the_receipts_of_a_rebuild(updated: Updated, plan: Path) -> None:
    index, rebuilt, _, _, _ = updated
    assert masked(Engine.open(index).run_sync(untimed(plan))) == masked(Engine.open(rebuilt).run_sync(untimed(plan)))


def test_update_without_changes_re_embeds_nothing(updated: Updated, capsys: pytest.CaptureFixture[str]) -> None:
    index, _, _, _, _ = updated
    corpus = index.parent / "corpus"
    assert main(["index", str(corpus), "--out", str(index), "--update"]) == 0
    _, err = capsys.readouterr()
    assert "updated: 0 added, 0 changed, 0 removed, 8 unchanged; re-embedded 0 documents (0 chunks" in err
    assert not any(p.name.startswith(f".{index.name}.") for p in index.parent.iterdir())


def test_lexical_update_equals_a_lexical_rebuild(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without vectors: tantivy and the graph updated in place, nothing embedded, and every
    fixture plan's receipt (vector obligations unsatisfied in both) that of a whole build."""
    corpus = _corpus(tmp_path / "corpus")
    index, rebuilt = tmp_path / "updated", tmp_path / "rebuilt"
    assert main(["index", str(corpus), "--out", str(index), "--no-vectors"]) == 0
    (corpus / "docs" / DELETED).unlink()
    edited = corpus / "docs" / DOCS[1]
    edited.write_text(edited.read_text().replace("Kestrel", "Kestrel broker", 1))
    assert main(["index", str(corpus), "--out", str(index), "--no-vectors", "--update"]) == 0
    assert main(["index", str(corpus), "--out", str(rebuilt), "--no-vectors"]) == 0
    _, err = capsys.readouterr()
    line = (
        "updated: 0 added, 1 changed, 1 removed, 6 unchanged; re-indexed 1 document, no vector index (nothing embedded)"
    )
    assert line in err
    assert not (index / "lancedb").exists()
    assert GraphAdapter.open(index).generation() == GraphAdapter.open(rebuilt).generation()
    for plan in PLANS:
        assert masked(Engine.open(index).run_sync(untimed(plan))) == masked(
            Engine.open(rebuilt).run_sync(untimed(plan))
        ), plan.name
