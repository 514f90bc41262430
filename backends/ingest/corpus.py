"""The corpus every backend indexes: documents chunked with line spans, and typed edges.

A corpus is either a folder of ``.md``/``.txt`` files (optional YAML front matter between
``---`` lines; ``edges.jsonl`` beside them) or a JSONL file of documents
(``{"id", "title", "text", ...metadata}``) with an optional JSONL edges file. Which metadata
fields and relations exist, and their types, is the corpus schema's (``backends.ingest.schema``):
every value is validated and normalized against it here, once, and a field or relation it
does not declare is an error naming its file and line. A JSONL record's ``text`` is only
text: a ``---`` block at its start is not front matter and sets no metadata (I14).

Markdown is chunked at ``##`` headings, long sections and plain text at blank lines; every
chunk keeps its 1-based inclusive line span, character offsets, and the sha256 of its source.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError

from backends.ingest.chunking import TokenCounter, fit, sections
from backends.ingest.files import (
    Ingest,
    Skipped,
    document_ids,
    jsonl_lines,
    read_file,
    reason_words,
    scan_folder,
)
from backends.ingest.formats import html_text, parse_front_matter, rst_title
from backends.ingest.schema import EDGE_RELATIONS as EDGE_RELATIONS
from backends.ingest.schema import METADATA_FIELDS as METADATA_FIELDS
from backends.ingest.schema import CorpusSchema, FieldSpec, FieldType, default_schema, load_schema, schema_path
from rsc import CorpusError, Record, fingerprint, first_validation_error
from rsc.records import MetadataValue

PATH_FIELD = "path"
"""The field a folder without a schema gets: each file's path in the corpus."""
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/+~-]*$")


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
    metadata: dict[str, MetadataValue]


class Edge(Record):
    src: Annotated[str, Field(min_length=1)]
    dst: Annotated[str, Field(min_length=1)]
    relation: str


class Corpus(Record):
    root: str
    revision: str
    chunks: tuple[Chunk, ...]
    edges: tuple[Edge, ...]
    corpus_schema: CorpusSchema = Field(default_factory=default_schema)
    ingest: Ingest | None = None
    """A folder corpus's files accounted for: indexed, or skipped and why."""

    @property
    def doc_ids(self) -> tuple[str, ...]:
        return tuple(sorted({c.doc_id for c in self.chunks}))


@dataclass(frozen=True)
class Chunking:
    """How documents are cut: by markdown structure, then (with ``tokens``, the embedder's
    tokenizer) into windows the model reads whole, overlapping by ``overlap`` tokens."""

    tokens: TokenCounter | None = None
    overlap: int = 32


def load_corpus(
    path: Path,
    schema: CorpusSchema | None = None,
    chunking: Chunking | None = None,
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> Corpus:
    """Load a corpus folder or JSONL file under its schema (the one beside it unless given);
    every defect names its file and line. A folder's files are chosen by ``include`` and
    ``exclude`` globs (``backends.ingest.files.scan_folder``), and every file is accounted for
    (``Corpus.ingest``)."""
    if not path.exists():
        raise CorpusError("no such corpus file or folder", where=str(path))
    undeclared = 'declare it, or set extra: "store"'
    if schema is None:
        declared = schema_path(path) is not None or not path.is_dir()
        schema = load_schema(path) if declared else folder_schema(path, include=include, exclude=exclude)
        if schema_path(path) is None and not path.is_dir():
            undeclared = f"{path.name} has no schema file: `race index {path} --infer-schema` writes one to review"
    how = chunking or Chunking()
    ingest = None
    if path.is_dir():
        (chunks, ingest), edges_path = _load_folder(path, schema, how, include, exclude), path / "edges.jsonl"
    else:
        if include or exclude:
            why = "--include and --exclude choose files of a folder corpus, not of a JSONL file"
            raise CorpusError(why, where=str(path))
        chunks = _load_jsonl_documents(path, schema, how, undeclared)
        edges_path = path.with_name(path.stem + ".edges.jsonl")
        if not edges_path.exists():
            edges_path = path.parent / "edges.jsonl"
    edges = _load_edges(edges_path, schema) if edges_path.exists() else ()
    if not chunks:
        why = ""
        if ingest is not None and ingest.skipped:
            first = ingest.skipped[0]
            detail = f": {first.detail}" if first.detail else ""
            why = f" ({ingest.summary()}; first: {first.path} {reason_words(first.reason)}{detail})"
        raise CorpusError(f"the corpus has no documents{why}", where=str(path))
    ids = [c.chunk_id for c in chunks]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[0]
        raise CorpusError(f"chunk id {dup!r} occurs twice (duplicate document id?)", where=str(path))
    content: dict[str, Any] = {
        "chunks": [[c.chunk_id, c.source_hash] for c in chunks],
        "edges": [e.model_dump() for e in edges],
    }
    # The default schema is what every corpus had before schemas were declared, so a corpus
    # under it keeps its revision; any other schema changes the values and is part of it.
    if schema != default_schema():
        content["schema"] = schema.fingerprint
    return Corpus(
        root=str(path),
        revision=fingerprint(content),
        chunks=tuple(chunks),
        edges=edges,
        corpus_schema=schema,
        ingest=ingest,
    )


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def chunk_document(
    *,
    doc_id: str,
    title: str,
    text: str,
    body_start: int,
    source_path: str,
    source_hash: str,
    metadata: dict[str, MetadataValue],
    markdown: bool,
    chunking: Chunking | None = None,
) -> list[Chunk]:
    """The chunks of one document whose metadata is already validated; lines before
    ``body_start`` (front matter) belong to no chunk."""
    lines = text.splitlines(keepends=True)
    if not title and markdown:
        title = next((ln[2:].strip() for ln in lines[body_start:] if ln.startswith("# ")), "")
    title = title or doc_id
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    pieces = sections(lines, body_start, markdown)
    if chunking is not None and chunking.tokens is not None:
        pieces = fit(pieces, lines, offsets, title=title, counter=chunking.tokens, overlap=chunking.overlap)
    chunks = []
    for n, piece in enumerate(pieces):
        if piece.char_start is not None and piece.char_end is not None:
            char_start, chunk_text = piece.char_start, text[piece.char_start : piece.char_end]
        else:
            char_start, chunk_text = offsets[piece.first], "".join(lines[piece.first : piece.last + 1]).rstrip("\n")
        chunks.append(
            Chunk(
                chunk_id=f"{doc_id}#{n}",
                doc_id=doc_id,
                title=title,
                section=piece.heading,
                text=chunk_text,
                source_path=source_path,
                line_start=piece.first + 1,
                line_end=piece.last + 1,
                char_start=char_start,
                char_end=char_start + len(chunk_text),
                source_hash=source_hash,
                metadata=metadata,
            )
        )
    return chunks


def _load_folder(
    root: Path, schema: CorpusSchema, chunking: Chunking, include: Sequence[str], exclude: Sequence[str]
) -> tuple[list[Chunk], Ingest]:
    files, skipped, metadata_files = scan_folder(root, include=include, exclude=exclude)
    chunks: list[Chunk] = []
    seen: dict[str, str] = {}
    own = frozenset({schema.id_field, schema.title_field})
    named = document_ids([path.relative_to(root).as_posix() for path, _ in files])
    for path, kind in files:
        rel = path.relative_to(root).as_posix()
        read = read_file(path, rel)
        if isinstance(read, Skipped):
            skipped.append(read)
            continue
        data, source = read
        markdown = kind == "markdown"
        text, found_title = html_text(source) if kind == "html" else (source, "")
        lines = text.splitlines(keepends=True)
        if kind == "rst":
            found_title = rst_title(lines)
        front, key_lines, body_start = parse_front_matter(lines, rel) if markdown else ({}, {}, 0)
        doc_id = front.get(schema.id_field) or named[rel]
        where_id = f"{rel}:{key_lines[schema.id_field]}" if schema.id_field in key_lines else rel
        if not isinstance(doc_id, str) or not _ID.match(doc_id):
            raise CorpusError(f"document id {doc_id!r} has characters outside [A-Za-z0-9_.:/+~-]", where=where_id)
        if doc_id in seen:
            raise CorpusError(f"document id {doc_id!r} is also used by {seen[doc_id]}", where=where_id)
        seen[doc_id] = rel
        title = front.get(schema.title_field) or found_title
        if not isinstance(title, str):
            raise CorpusError(f"field {schema.title_field!r} must be a string", where=rel)
        metadata: dict[str, MetadataValue] = {"doc_id": doc_id}
        if PATH_FIELD in schema.fields and PATH_FIELD not in front:
            front = {**front, PATH_FIELD: rel}  # the file's path in the corpus, unless front matter says otherwise
        metadata.update(schema.metadata(front, where=rel, lines=key_lines, skip=own))
        metadata["doc_id"] = doc_id  # the document's own, whatever its front matter stored
        chunks += chunk_document(
            doc_id=doc_id,
            title=title,
            text=text,
            body_start=body_start,
            source_path=rel,
            source_hash=_sha256(data),
            metadata=metadata,
            markdown=markdown,
            chunking=chunking,
        )
    indexed = len({c.source_path for c in chunks})
    ingest = Ingest(
        indexed=indexed,
        metadata=tuple(metadata_files),
        skipped=tuple(sorted(skipped, key=lambda s: s.path)),
        include=tuple(include),
        exclude=tuple(exclude),
    )
    return chunks, ingest


def _load_jsonl_documents(path: Path, schema: CorpusSchema, chunking: Chunking, undeclared: str) -> list[Chunk]:
    chunks: list[Chunk] = []
    own = frozenset({schema.id_field, schema.title_field, schema.text_field, "path"})
    seen: dict[str, str] = {}
    for lineno, raw in _jsonl(path):
        where = f"{path.name}:{lineno}"
        doc_id, text, title = raw.get(schema.id_field), raw.get(schema.text_field), raw.get(schema.title_field, "")
        if not isinstance(doc_id, str) or not _ID.match(doc_id):
            raise CorpusError(f"field {schema.id_field!r} must be a string of [A-Za-z0-9_.:/+~-]", where=where)
        if doc_id in seen:
            raise CorpusError(f"document id {doc_id!r} is also used at line {seen[doc_id]}", where=where)
        seen[doc_id] = str(lineno)
        if not isinstance(text, str):
            raise CorpusError(f"field {schema.text_field!r} must be a string", where=where)
        if not isinstance(title, str):
            raise CorpusError(f"field {schema.title_field!r} must be a string", where=where)
        metadata: dict[str, MetadataValue] = {"doc_id": doc_id}
        metadata.update(schema.metadata(raw, where=where, skip=own, undeclared=undeclared))
        source = str(raw.get("path") or f"{path.name}#{doc_id}")
        if PATH_FIELD in schema.fields:
            metadata[PATH_FIELD] = source
        # The text is data: a '---' block at its start is text, never front matter (I14).
        chunks += chunk_document(
            doc_id=doc_id,
            title=title,
            text=text,
            body_start=0,
            source_path=source,
            source_hash=_sha256(text.encode("utf-8")),
            metadata=metadata,
            markdown=True,
            chunking=chunking,
        )
    return chunks


def _jsonl(path: Path) -> Iterable[tuple[int, dict[str, object]]]:
    for lineno, line in jsonl_lines(path):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"malformed JSON: {exc.msg}", where=f"{path.name}:{lineno}") from exc
        if not isinstance(raw, dict):
            raise CorpusError("each line must be a JSON object", where=f"{path.name}:{lineno}")
        yield lineno, raw


def _load_edges(path: Path, schema: CorpusSchema) -> tuple[Edge, ...]:
    edges = []
    for lineno, raw in _jsonl(path):
        where = f"{path.name}:{lineno}"
        try:
            edge = Edge.model_validate(raw)
        except ValidationError as exc:
            raise CorpusError(first_validation_error(exc), where=where) from exc
        if edge.relation not in schema.relations:
            raise CorpusError(
                f"relation {edge.relation!r} is not in the corpus schema ({', '.join(sorted(schema.relations))})",
                where=where,
            )
        edges.append(edge)
    return tuple(sorted(edges, key=lambda e: (e.src, e.relation, e.dst)))


def folder_schema(path: Path, *, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> CorpusSchema:
    """The schema of a folder that declares none: its own, never the bundled corpus's — the
    ``path`` field (each file's path in the corpus, a keyword), and the fields and relations
    ``infer_schema`` finds in its front matter and edges. A filter on any other field is bad
    input naming the fields it has."""
    inferred, _ = infer_schema(path, include=include, exclude=exclude)
    fields = {PATH_FIELD: FieldSpec(type=FieldType.KEYWORD), **inferred.fields}
    return CorpusSchema.model_validate(inferred.model_dump() | {"fields": dict(sorted(fields.items()))})


def infer_schema(
    path: Path, *, include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> tuple[CorpusSchema, dict[str, str]]:
    """A schema for a corpus that has none, from the values it holds, for the user to review:
    a field is the narrowest type every one of its values fits (``keyword`` when none does);
    fields and relations whose names the default schema gives a role get that role. Beside it,
    the keys no field can be named after, each with why: they are kept in each chunk's stored
    metadata (``extra: "store"``), where no filter reads them."""
    from backends.ingest.schema import field_name_problem, infer_field, infer_relations
    from backends.ingest.values import nested

    if not path.exists():
        raise CorpusError("no such corpus file or folder", where=str(path))
    values: dict[str, list[Any]] = {}
    if path.is_dir():
        edges_path = path / "edges.jsonl"
        files, _, _ = scan_folder(path, include=include, exclude=exclude)
        for file, kind in files:
            rel = file.relative_to(path).as_posix()
            read = read_file(file, rel) if kind == "markdown" else None
            if read is None or isinstance(read, Skipped):
                continue  # only Markdown has front matter; a file that cannot be read is skipped
            front, _, _ = parse_front_matter(read[1].splitlines(keepends=True), rel)
            for key, value in front.items():
                if key not in ("id", "title"):
                    values.setdefault(key, []).append(value)
    else:
        edges_path = path.with_name(path.stem + ".edges.jsonl")
        if not edges_path.exists():
            edges_path = path.parent / "edges.jsonl"
        for _, raw in _jsonl(path):
            for key, value in raw.items():
                if key not in ("id", "title", "text", "path"):
                    values.setdefault(key, []).append(value)
    relations = sorted({str(raw.get("relation")) for _, raw in _jsonl(edges_path)}) if edges_path.exists() else []
    unfit = {name: problem for name in sorted(values) if (problem := field_name_problem(name)) is not None}
    for name in sorted(values):
        if name not in unfit and any(nested(v) for v in values[name]):
            unfit[name] = "holds nested values (objects), kept as their JSON text"
    fields = {name: infer_field(name, found) for name, found in sorted(values.items()) if name not in unfit}
    schema = CorpusSchema(
        schema_version="race.schema/1",
        extra="store" if unfit else "error",
        fields=fields,
        relations=infer_relations(relations),
    )
    return schema, unfit
