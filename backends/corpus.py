"""The corpus every backend indexes: documents chunked with line spans, and typed edges.

A corpus is either a folder of ``.md``/``.txt`` files (optional ``key: value`` front
matter between ``---`` lines; ``edges.jsonl`` beside them) or a JSONL file of documents
(``{"id", "title", "text", ...metadata}``) with an optional JSONL edges file. Markdown is
chunked at ``##`` headings, long sections and plain text at blank lines; every chunk keeps
its 1-based inclusive line span, character offsets, and the sha256 of its source file.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError

from rsc import CorpusError, Record, Scalar, fingerprint, first_validation_error

METADATA_FIELDS: tuple[str, ...] = ("doc_type", "date", "component", "version", "authority", "status")
"""Metadata fields every backend indexes for filtering, besides ``doc_id``."""

EDGE_RELATIONS: tuple[str, ...] = ("cites", "supersedes", "derived_from", "mentions", "depends_on")

_MAX_SECTION_LINES = 40
_TEXT_PARAGRAPH_LINES = 15
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")


class Chunk(Record):
    chunk_id: str
    doc_id: str
    title: str
    section: str
    text: str
    source_path: str
    line_start: int
    line_end: int
    char_start: int
    char_end: int
    source_hash: str
    metadata: dict[str, Scalar]


class Edge(Record):
    src: Annotated[str, Field(min_length=1)]
    dst: Annotated[str, Field(min_length=1)]
    relation: str


class Corpus(Record):
    root: str
    revision: str
    chunks: tuple[Chunk, ...]
    edges: tuple[Edge, ...]

    @property
    def doc_ids(self) -> tuple[str, ...]:
        return tuple(sorted({c.doc_id for c in self.chunks}))


def load_corpus(path: Path) -> Corpus:
    """Load a corpus folder or JSONL file; every defect names its file and line."""
    if not path.exists():
        raise CorpusError("no such corpus file or folder", where=str(path))
    if path.is_dir():
        chunks, edges_path = _load_folder(path), path / "edges.jsonl"
    else:
        chunks, edges_path = _load_jsonl_documents(path), path.with_name(path.stem + ".edges.jsonl")
        if not edges_path.exists():
            edges_path = path.parent / "edges.jsonl"
    edges = _load_edges(edges_path) if edges_path.exists() else ()
    if not chunks:
        raise CorpusError("the corpus has no documents", where=str(path))
    ids = [c.chunk_id for c in chunks]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[0]
        raise CorpusError(f"chunk id {dup!r} occurs twice (duplicate document id?)", where=str(path))
    revision = fingerprint(
        {"chunks": [[c.chunk_id, c.source_hash] for c in chunks], "edges": [e.model_dump() for e in edges]}
    )
    return Corpus(root=str(path), revision=revision, chunks=tuple(chunks), edges=edges)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _parse_front_matter(lines: list[str], where: str) -> tuple[dict[str, str], int]:
    """Front matter as a dict, and the index of the first body line."""
    if not lines or lines[0].strip() != "---":
        return {}, 0
    meta: dict[str, str] = {}
    for i in range(1, len(lines)):
        line = lines[i].rstrip("\n")
        if line.strip() == "---":
            return meta, i + 1
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise CorpusError(f"line {i + 1}: front matter line is not 'key: value'", where=where)
        meta[key.strip()] = value.strip()
    raise CorpusError("front matter opened with '---' is never closed", where=where)


def _metadata(meta: dict[str, str], doc_id: str, where: str) -> dict[str, Scalar]:
    out: dict[str, Scalar] = {"doc_id": doc_id}
    for key in METADATA_FIELDS:
        if meta.get(key):
            out[key] = meta[key]
    if "date" in out:
        _check_date(str(out["date"]), where)
    return out


def _check_date(text: str, where: str) -> None:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise CorpusError(f"date {text!r} is not YYYY-MM-DD", where=where)


def _sections(lines: list[str], body_start: int, markdown: bool) -> Iterable[tuple[int, int, str]]:
    """(first line index, last line index inclusive, heading) for each chunk."""
    spans: list[tuple[int, int, str]] = []
    start: int | None = None
    heading = ""

    def close(end: int) -> None:
        nonlocal start
        if start is None:
            return
        while end >= start and not lines[end].strip():
            end -= 1
        if end >= start:
            spans.append((start, end, heading))
        start = None

    for i in range(body_start, len(lines)):
        line = lines[i]
        if markdown and line.startswith("## "):
            close(i - 1)
            start, heading = i, line[3:].strip()
        elif markdown and line.startswith("# ") and start is None:
            continue
        elif start is None and line.strip():
            start = i
    close(len(lines) - 1)
    limit = _MAX_SECTION_LINES if markdown else _TEXT_PARAGRAPH_LINES
    for first, last, head in spans:
        yield from _split_long(lines, first, last, head, limit)


def _split_long(lines: list[str], first: int, last: int, heading: str, limit: int) -> Iterable[tuple[int, int, str]]:
    if last - first + 1 <= limit:
        yield first, last, heading
        return
    start = first
    for i in range(first, last + 1):
        if i - start + 1 >= limit and not lines[i].strip():
            yield start, i - 1, heading
            start = i + 1
            while start <= last and not lines[start].strip():
                start += 1
    if start <= last:
        yield start, last, heading


def chunk_document(
    *, doc_id: str, text: str, source_path: str, source_hash: str, meta: dict[str, str], markdown: bool, where: str
) -> list[Chunk]:
    lines = text.splitlines(keepends=True)
    front, body_start = _parse_front_matter(lines, where) if markdown else ({}, 0)
    title = meta.get("title") or front.get("title") or ""
    if not title and markdown:
        title = next((ln[2:].strip() for ln in lines[body_start:] if ln.startswith("# ")), "")
    merged = {**front, **meta}
    metadata = _metadata(merged, doc_id, where)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    chunks = []
    for n, (first, last, heading) in enumerate(_sections(lines, body_start, markdown)):
        chunk_text = "".join(lines[first : last + 1]).rstrip("\n")
        chunks.append(
            Chunk(
                chunk_id=f"{doc_id}#{n}",
                doc_id=doc_id,
                title=title or doc_id,
                section=heading,
                text=chunk_text,
                source_path=source_path,
                line_start=first + 1,
                line_end=last + 1,
                char_start=offsets[first],
                char_end=offsets[first] + len(chunk_text),
                source_hash=source_hash,
                metadata=metadata,
            )
        )
    return chunks


def _load_folder(root: Path) -> list[Chunk]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".md", ".txt"))
    files = [p for p in files if p.name.lower() != "readme.md" or p.parent != root]
    chunks: list[Chunk] = []
    seen: dict[str, str] = {}
    for path in files:
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorpusError(f"not UTF-8 text (byte {exc.start})", where=rel) from exc
        markdown = path.suffix == ".md"
        front, _ = _parse_front_matter(text.splitlines(keepends=True), rel) if markdown else ({}, 0)
        doc_id = front.get("id") or path.relative_to(root).with_suffix("").as_posix()
        if not _ID.match(doc_id):
            raise CorpusError(f"document id {doc_id!r} has characters outside [A-Za-z0-9_.:/-]", where=rel)
        if doc_id in seen:
            raise CorpusError(f"document id {doc_id!r} is also used by {seen[doc_id]}", where=rel)
        seen[doc_id] = rel
        chunks += chunk_document(
            doc_id=doc_id, text=text, source_path=rel, source_hash=_sha256(data), meta={}, markdown=markdown, where=rel
        )
    return chunks


def _load_jsonl_documents(path: Path) -> list[Chunk]:
    chunks: list[Chunk] = []
    for lineno, raw in _jsonl(path):
        where = f"{path.name}:{lineno}"
        doc_id, text = raw.get("id"), raw.get("text")
        if not isinstance(doc_id, str) or not _ID.match(doc_id):
            raise CorpusError("field 'id' must be a string of [A-Za-z0-9_.:/-]", where=where)
        if not isinstance(text, str):
            raise CorpusError("field 'text' must be a string", where=where)
        meta = {k: str(v) for k, v in raw.items() if k not in ("id", "text") and isinstance(v, str | int | float)}
        source = str(raw.get("path") or f"{path.name}#{doc_id}")
        chunks += chunk_document(
            doc_id=doc_id,
            text=text,
            source_path=source,
            source_hash=_sha256(text.encode("utf-8")),
            meta=meta,
            markdown=True,
            where=where,
        )
    return chunks


def _jsonl(path: Path) -> Iterable[tuple[int, dict[str, object]]]:
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"malformed JSON: {exc.msg}", where=f"{path.name}:{lineno}") from exc
        if not isinstance(raw, dict):
            raise CorpusError("each line must be a JSON object", where=f"{path.name}:{lineno}")
        yield lineno, raw


def _load_edges(path: Path) -> tuple[Edge, ...]:
    edges = []
    for lineno, raw in _jsonl(path):
        where = f"{path.name}:{lineno}"
        try:
            edge = Edge.model_validate(raw)
        except ValidationError as exc:
            raise CorpusError(first_validation_error(exc), where=where) from exc
        if edge.relation not in EDGE_RELATIONS:
            raise CorpusError(f"relation {edge.relation!r} is not one of {', '.join(EDGE_RELATIONS)}", where=where)
        edges.append(edge)
    return tuple(sorted(edges, key=lambda e: (e.src, e.relation, e.dst)))
