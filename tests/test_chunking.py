"""Chunking by the embedder's tokenizer: sections by markdown structure (code fences are not
headings), windows the model reads whole, exact line spans and character offsets, and a
``truncated_text`` gap for whatever a vector index still did not embed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from backends.ingest.chunking import TokenCounter
from backends.ingest.corpus import Chunk, Chunking, load_corpus
from backends.lancedb.build import _truncation, chunk_text
from backends.models.embedding import MiniLMEmbedder, token_counter
from race.engine import Engine
from race.indexing.indexing import build_index
from tests.conftest import FIXTURES, ROOT


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    found = token_counter()
    if found is None:
        pytest.skip("the embedding model is not installed")
    return found


def _check_custody(chunk: Chunk, source: str) -> None:
    """The chunk's text is exactly the source at its character offsets, inside its line span."""
    assert source[chunk.char_start : chunk.char_end] == chunk.text
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    assert starts[chunk.line_start - 1] <= chunk.char_start < starts[chunk.line_start]
    assert starts[chunk.line_end - 1] < chunk.char_end <= starts[chunk.line_end]


def test_the_repo_docs_lose_no_tokens_and_spans_match_the_files(counter: TokenCounter, tmp_path: Path) -> None:
    corpus_dir = tmp_path / "corpus"
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for source in sources:
        target = corpus_dir / "repo" / source.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    corpus = load_corpus(corpus_dir, chunking=Chunking(tokens=counter))
    texts = {p.relative_to(corpus_dir).as_posix(): p.read_text(encoding="utf-8") for p in corpus_dir.rglob("*.md")}
    covered: dict[str, set[int]] = {}
    for chunk in corpus.chunks:
        _check_custody(chunk, texts[chunk.source_path])
        assert counter.count(chunk_text(chunk)) + counter.specials <= counter.max_tokens, chunk.chunk_id
        covered.setdefault(chunk.source_path, set()).update(range(chunk.line_start, chunk.line_end + 1))
    truncated, tokens = _truncation(corpus.chunks, MiniLMEmbedder())
    assert truncated == {} and tokens is not None and tokens > 0
    for path, text in texts.items():
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip() and not line.startswith("# "):
                assert number in covered.get(path, set()), f"{path}:{number} is in no chunk"
    print(f"\n{len(texts)} files, {len(corpus.chunks)} chunks, {tokens} tokens embedded, 0 dropped")


def test_a_heading_inside_a_code_fence_is_code(counter: TokenCounter) -> None:
    corpus = load_corpus(FIXTURES / "corpus2", chunking=Chunking(tokens=counter))
    sections = [c.section for c in corpus.chunks if c.doc_id == "t-105"]
    assert sections == ["Symptom", "Cause"]
    cause = next(c for c in corpus.chunks if c.doc_id == "t-105" and c.section == "Cause")
    assert "## this heading is inside a code fence" in cause.text


def test_a_long_one_line_document_is_cut_into_windows_inside_the_line(counter: TokenCounter, tmp_path: Path) -> None:
    words = " ".join(f"word{n % 97} alpha-{n}" for n in range(3000))
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"id": "long", "title": "Long", "text": words}) + "\n")
    corpus = load_corpus(path, chunking=Chunking(tokens=counter, overlap=16))
    assert len(corpus.chunks) > 10
    covered = 0
    for chunk in corpus.chunks:
        assert chunk.line_start == chunk.line_end == 1
        assert words[chunk.char_start : chunk.char_end] == chunk.text
        assert counter.count(chunk_text(chunk)) + counter.specials <= counter.max_tokens
        assert chunk.char_start <= covered, "windows overlap or touch: no text between them is skipped"
        covered = max(covered, chunk.char_end)
    assert covered == len(words)


def test_text_a_vector_index_did_not_embed_is_a_truncated_text_gap(counter: TokenCounter, tmp_path: Path) -> None:
    title = " ".join(f"heading{n}" for n in range(300))
    docs = [
        {"id": "wide", "title": title, "text": "the replica lag alarm fired twice during the upgrade"},
        {"id": "fine", "title": "Fine", "text": "the replica lag alarm stayed quiet"},
    ]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "index"
    build_index(path, out)
    engine = Engine.open(out)
    plan = {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [
            {"id": "o", "kind": "seek_support", "query": {"text": "replica lag alarm"}, "query_class": "conceptual"}
        ],
        "operators": [],
    }
    receipt = engine.run_sync(plan)
    gaps = [g for g in receipt.gaps if g.kind.value == "truncated_text"]
    assert len(gaps) == 1 and "document wide" in gaps[0].detail and gaps[0].backend == "lancedb"
    manifest = json.loads((out / "lancedb" / "race.json").read_text())
    assert set(manifest["truncated"]) == {"wide"}
