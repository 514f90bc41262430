"""Fixtures for the honest-state suite: private copies of the session index to mutate, an index
of a corpus that differs from the bundled one in one document's text, and the check every
mutation ends with (a long-lived engine's receipts against a fresh engine's).

Index builds embed every chunk, which takes most of a build's time. Builds here reuse the
session index's vectors for every chunk text it already embedded (the embedder gives the same
bits for the same text) and embed only what is new, so a rebuild costs a second or two.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest

from backends.lancedb.query import TABLE
from backends.models.embedding import MiniLMEmbedder
from race.engine import Engine
from race.indexing.bundled import BUNDLED_CORPUS
from race.indexing.indexing import build_index
from race.receipt import Receipt
from rsc import GapKind

EDITED_DOC = Path("docs/incident/2024-03-12-partition-stall.md")
EDIT = ("312 partitions on the shared us-east-2 fleet", "318 partitions on the shared us-east-2 fleet")
"""One document's text changed in place: same documents, chunks, lines and edges."""

OBLIGATIONS: dict[str, dict[str, Any]] = {
    "tantivy": {
        "id": "lexical",
        "kind": "seek_support",
        "query": {"text": "partition stall raft election quorum"},
        "query_class": "lexical",
        "k": 6,
    },
    "lancedb": {
        "id": "vector",
        "kind": "seek_support",
        "query": {"text": "writes stalled because leader elections kept restarting"},
        "query_class": "conceptual",
        "k": 4,
    },
    "graph": {
        "id": "graph",
        "kind": "seek_support",
        "query": {"ids": ["runbook-kst-e1042"], "pattern": {"relations": ["cites"], "direction": "out", "depth": 1}},
        "query_class": "dependency",
        "k": 10,
        "required_coverage": "bounded_structural",
    },
}


def plan(*backends: str) -> dict[str, Any]:
    """One obligation per backend named (the ones above), in a union when there are several."""
    obligations = [OBLIGATIONS[b] for b in backends]
    if len(obligations) == 1:
        return {"schema_version": "race.plan/1", "root": obligations[0]["id"], "obligations": obligations}
    return {
        "schema_version": "race.plan/1",
        "root": "all",
        "obligations": obligations,
        "operators": [{"id": "all", "op": "union", "inputs": [o["id"] for o in obligations]}],
    }


EVERY_BACKEND = plan("tantivy", "lancedb", "graph")


@pytest.fixture(scope="session")
def known_vectors(index_dir: Path) -> dict[str, np.ndarray]:
    """Chunk text (as the LanceDB adapter embeds it) -> its vector in the session index."""
    table = lancedb.connect(str(index_dir / "lancedb")).open_table(TABLE)
    rows = table.to_arrow().select(["title", "section", "text", "vector"]).to_pylist()
    return {
        "\n".join(p for p in (r["title"], r["section"], r["text"]) if p): np.asarray(r["vector"], dtype=np.float32)
        for r in rows
    }


@contextmanager
def reused_embeddings(known: dict[str, np.ndarray]) -> Iterator[None]:
    """``MiniLMEmbedder.embed`` answering known texts from ``known`` and embedding the rest."""
    real = MiniLMEmbedder.embed

    def embed(self: MiniLMEmbedder, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in known]
        if missing:
            for text, vector in zip(missing, real(self, missing), strict=True):
                known[text] = np.asarray(vector, dtype=np.float32)
        return np.stack([known[t] for t in texts])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MiniLMEmbedder, "embed", embed)
        yield


@dataclass
class Builder:
    known: dict[str, np.ndarray]

    def build(self, corpus: Path, out: Path) -> dict[str, str]:
        with reused_embeddings(self.known):
            return build_index(corpus, out)


@pytest.fixture(scope="session")
def builder(known_vectors: dict[str, np.ndarray]) -> Builder:
    return Builder(dict(known_vectors))


@pytest.fixture(scope="session")
def edited_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled corpus with one document's text changed (same size, same shape)."""
    out = tmp_path_factory.mktemp("edited") / "corpus"
    shutil.copytree(BUNDLED_CORPUS, out)
    path = out / EDITED_DOC
    text = path.read_text(encoding="utf-8")
    assert text.count(EDIT[0]) == 1
    path.write_text(text.replace(*EDIT), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def edited_index(tmp_path_factory: pytest.TempPathFactory, builder: Builder, edited_corpus: Path) -> Path:
    out = tmp_path_factory.mktemp("edited-index") / "index"
    builder.build(edited_corpus, out)
    return out


@pytest.fixture
def live_index(index_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the session index, free to be mutated under a long-lived engine."""
    target = tmp_path / "index"
    shutil.copytree(index_dir, target)
    return target


@dataclass
class LongLived:
    """Two long-lived engines over one state: results cached in memory, and on disk too.
    ``make(cache_dir)`` opens an engine over that state (``None``: no disk cache)."""

    make: Callable[[Path | None], Engine]
    cache_dir: Path
    memory: Engine
    disk: Engine

    @classmethod
    def over(cls, make: Callable[[Path | None], Engine], cache_dir: Path) -> LongLived:
        return cls(make, cache_dir, make(None), make(cache_dir))

    @classmethod
    def open(cls, index: Path, cache_dir: Path) -> LongLived:
        return cls.over(lambda cache: Engine.open(index, cache_dir=cache), cache_dir)

    def warm(self, plan: Any) -> Receipt:
        """Run ``plan`` until both engines answer it from their receipt caches."""
        receipts = []
        for engine in (self.memory, self.disk):
            receipts.append(engine.run_sync(plan))
            again = engine.run_sync(plan)
            assert again.operational.receipt_cache == "hit"
            receipts.append(again)
        assert len({r.normalized_bytes() for r in receipts}) == 1
        assert not moved(receipts[0])
        return receipts[0]

    def receipts(self, plan: Any) -> list[tuple[str, Receipt]]:
        """``plan`` as every cache path answers it now: each engine's receipt cache, each
        engine's result cache (receipt cache cleared), and a new engine over the disk cache."""
        out = []
        for name, engine in (("memory", self.memory), ("disk", self.disk)):
            out.append((f"{name} engine", engine.run_sync(plan)))
            engine.clear_receipt_cache()
            out.append((f"{name} engine, result cache", engine.run_sync(plan)))
        out.append(("new engine over the disk cache", self.make(self.cache_dir).run_sync(plan)))
        return out


@pytest.fixture
def long_lived(live_index: Path, tmp_path: Path) -> LongLived:
    return LongLived.open(live_index, tmp_path / "cache")


def moved(receipt: Receipt) -> bool:
    return any(g.kind is GapKind.SNAPSHOT_MOVED for g in receipt.gaps)


def mixed_hits(receipt: Receipt) -> list[str]:
    """Hits whose generation is not the one the receipt's fingerprints name for their backend."""
    backends = receipt.fingerprints.backends
    return [
        f"{item.key} from {hit.custody.backend} {hit.custody.index_generation}"
        for item in receipt.evidence
        for hit in item.hits
        if hit.custody.index_generation != backends.get(hit.custody.backend)
    ]


def stale_hits(receipt: Receipt, fresh: Receipt) -> list[str]:
    """Hits that a fresh engine over the same state would not give: another generation than the
    current one, or custody or text that differs from the fresh engine's hit for that key."""
    current = {(i.key, h.custody.backend): h for i in fresh.evidence for h in i.hits}
    stale = []
    for item in receipt.evidence:
        for hit in item.hits:
            now = current.get((item.key, hit.custody.backend))
            generation = fresh.fingerprints.backends.get(hit.custody.backend)
            if hit.custody.index_generation != generation or (
                now is not None and (now.text, now.custody.source_hash) != (hit.text, hit.custody.source_hash)
            ):
                stale.append(f"{item.key} from {hit.custody.backend} {hit.custody.index_generation}")
    return stale


def assert_honest(live: LongLived, plan: Any) -> list[Receipt]:
    """Every cache path of the long-lived engines gives the fresh engine's receipt byte for byte,
    or says ``snapshot_moved``; no receipt mixes generations or serves a stale hit."""
    fresh = live.make(None).run_sync(plan)
    assert not moved(fresh) and mixed_hits(fresh) == []
    out = []
    for name, receipt in live.receipts(plan):
        assert mixed_hits(receipt) == [], name
        assert stale_hits(receipt, fresh) == [], name
        if not moved(receipt):
            assert receipt.normalized_bytes() == fresh.normalized_bytes(), f"{name}: differs from a fresh engine"
        out.append(receipt)
    return out
