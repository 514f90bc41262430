"""Writing the tantivy index of a corpus: a whole build, and an update in place.

An update deletes the documents of changed and removed documents by term (``doc_id``), adds
the chunks of changed and added ones and commits: a new generation. tantivy's BM25 reads its
statistics (document frequencies, field lengths) from the segments, deleted documents
included, until a merge drops them, and the Python binding has no merge call; so an update
that deleted anything then compacts the index: its live documents, read back from their
stored rows, are written into one fresh segment, in corpus order, which replaces the old
ones. The result scores every query as a whole build of the same corpus does.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tantivy

from backends.base import Progress
from backends.generated import schema_json
from backends.ingest.corpus import Chunk, Corpus
from backends.ingest.schema import FieldSpec
from backends.tantivy.fields import _COUNTED_TYPES, ANALYZER, _add, _analyzer, _schema, _term

WRITER_HEAP = 50_000_000
MANIFEST = "race.json"


def _document(chunk: Chunk, fields: dict[str, FieldSpec], row: str | None = None) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_text("title", chunk.title)
    doc.add_text("section", chunk.section)
    doc.add_text("text", chunk.text)
    doc.add_text("doc_id", chunk.doc_id)
    doc.add_text("chunk_id", chunk.chunk_id)
    for field, spec in fields.items():
        stored = chunk.metadata.get(field)
        if field not in chunk.metadata:
            continue
        for value in stored if isinstance(stored, tuple) else (stored,):
            _add(doc, field, spec.type, value)
    doc.add_text("row", row if row is not None else json.dumps(chunk.model_dump(mode="json"), sort_keys=True))
    return doc


def value_counts(corpus: Corpus) -> dict[str, dict[str, int]]:
    """Chunks per value of every counted field (keywords, booleans, integers)."""
    counts: dict[str, dict[str, int]] = {}
    for chunk in corpus.chunks:
        for field, spec in corpus.corpus_schema.filterable().items():
            if field not in chunk.metadata or spec.type not in _COUNTED_TYPES:
                continue
            stored = chunk.metadata[field]
            for value in stored if isinstance(stored, tuple) else (stored,):
                text = str(_term(spec.type, value))
                counts.setdefault(field, {}).setdefault(text, 0)
                counts[field][text] += 1
    return counts


def _writer(index: tantivy.Index) -> Any:
    return index.writer(heap_size=WRITER_HEAP, num_threads=1)


def write_index(corpus: Corpus, path: Path, progress: Progress | None = None) -> None:
    """A fresh index of every chunk under ``path``, and its ``race.json``."""
    path.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(_schema(corpus.corpus_schema), path=str(path), reuse=False)
    index.register_tokenizer(ANALYZER, _analyzer())
    writer = _writer(index)
    fields = corpus.corpus_schema.filterable()
    total = len(corpus.chunks)
    for n, chunk in enumerate(corpus.chunks, start=1):
        writer.add_document(_document(chunk, fields))
        if progress:
            progress(n, total)
    writer.commit()
    writer.wait_merging_threads()
    _write_manifest(corpus, path)


def update_index(
    corpus: Corpus, path: Path, progress: Progress | None = None, *, stale: Sequence[str], fresh: Sequence[str]
) -> None:
    """Bring the index under ``path`` to ``corpus``: delete the ``stale`` documents' chunks by
    term, add the ``fresh`` documents' chunks, commit, and compact if anything was deleted."""
    index = tantivy.Index.open(str(path))
    index.register_tokenizer(ANALYZER, _analyzer())
    writer = _writer(index)
    for doc_id in stale:
        writer.delete_documents_by_term("doc_id", doc_id)
    wanted = frozenset(fresh)
    fields = corpus.corpus_schema.filterable()
    chunks = [c for c in corpus.chunks if c.doc_id in wanted]
    for n, chunk in enumerate(chunks, start=1):
        writer.add_document(_document(chunk, fields))
        if progress:
            progress(n, len(chunks))
    writer.commit()
    writer.wait_merging_threads()
    del writer
    if stale:
        _compact(index, corpus, path)
    _write_manifest(corpus, path)


def _compact(index: tantivy.Index, corpus: Corpus, path: Path) -> None:
    """Write the live documents (from their stored rows) into one fresh segment, in corpus
    order, and put it in place of ``path``."""
    index.reload()
    searcher = index.searcher()
    found = searcher.search(tantivy.Query.all_query(), limit=max(1, searcher.num_docs)).hits
    rows: dict[str, str] = {}
    for _, address in found:
        row = str(searcher.doc(address)["row"][0])
        rows[str(json.loads(row)["chunk_id"])] = row
    if sorted(rows) != sorted(c.chunk_id for c in corpus.chunks):
        raise RuntimeError(f"{path}: the updated index does not hold exactly the corpus's chunks")
    fields = corpus.corpus_schema.filterable()
    target = path.with_name(f".{path.name}.compact")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    fresh = tantivy.Index(_schema(corpus.corpus_schema), path=str(target), reuse=False)
    fresh.register_tokenizer(ANALYZER, _analyzer())
    writer = _writer(fresh)
    for chunk in corpus.chunks:
        writer.add_document(
            _document(Chunk.model_validate(json.loads(rows[chunk.chunk_id])), fields, rows[chunk.chunk_id])
        )
    writer.commit()
    writer.wait_merging_threads()
    keep = [p for p in path.iterdir() if p.name == MANIFEST or p.is_dir()]
    for item in keep:
        shutil.move(str(item), target / item.name)
    shutil.rmtree(path)
    target.rename(path)


def _write_manifest(corpus: Corpus, path: Path) -> None:
    # The index's own id: segment ids are fresh per build too, but the id says which build.
    manifest = {
        "corpus_revision": corpus.revision,
        "index_id": uuid.uuid4().hex,
        "rows": len(corpus.chunks),
        "schema": schema_json(corpus.corpus_schema),
        "value_counts": value_counts(corpus),
    }
    (path / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1))
