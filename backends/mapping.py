"""Attached sources: how the columns of an index RACE did not build stand for custody fields.

A ``FieldMapping`` names, for one attached table or index, the column that holds each custody
field (the row's id, its text, its source path, line span, hash, ...) and the columns it
exposes as metadata. A custody field the mapping does not name is reported ``null`` with the
reason in ``custody.absent``: the source does not have it, and nothing is made up in its place.
``mapped_hits`` turns one scan's rows into hits with that custody.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self

from pydantic import Field, TypeAdapter

from backends.base import Adapter, Progress, request_fingerprint
from backends.ingest.corpus import Corpus
from rsc import BackendUnavailable, Contract, Hit, Record, ScanRequest, ScoreKind

_COLUMN = Annotated[str, Field(min_length=1)]
_NAME = r"^[a-z][a-z0-9_]*$"


class AttachedAdapter(Adapter):
    """An adapter over a source RACE did not build: its only contracts are the ones generated
    from the source when it was attached, and it is neither built nor opened from an index."""

    source: ClassVar[str] = "source"
    """What the source is called in errors: a table, an index, a collection."""

    @classmethod
    def contracts(cls) -> tuple[Contract, ...]:
        return ()

    def index_contracts(self) -> tuple[Contract, ...]:
        return self.generated_contracts or ()

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None) -> str:
        raise BackendUnavailable(f"an attached {cls.source} is not built by RACE", where=cls.__name__)

    @classmethod
    def open(cls, index_dir: Path) -> Self:
        raise BackendUnavailable(f"an attached {cls.source} is opened from its catalog instance", where=cls.__name__)


class FieldMapping(Record):
    """Which column of an attached source holds each custody field, and its metadata columns."""

    id: _COLUMN
    """The row's identity: it becomes the hit's chunk id (and doc id unless ``doc_id`` is named)."""
    text: _COLUMN
    """The text the hit quotes (and, in a lexical index, the field searched)."""
    doc_id: _COLUMN | None = None
    """The column naming the document a row belongs to (default: the row's own id)."""
    title: _COLUMN | None = None
    """The row's title (searched too, in a lexical index)."""
    path: _COLUMN | None = None
    """The source file (custody ``source_path``)."""
    line_start: _COLUMN | None = None
    """The first line of the row's text in its source file."""
    line_end: _COLUMN | None = None
    """The last line of the row's text in its source file."""
    hash: _COLUMN | None = None
    """The source file's hash (custody ``source_hash``, ``sha256:<hex>``)."""
    revision: _COLUMN | None = None
    """A column naming the revision of the source each row was read from."""
    metadata: tuple[Annotated[str, Field(pattern=_NAME)], ...] | None = None
    """Columns exposed as metadata (and so as filter fields); ``None``: every other scalar column."""

    def columns(self) -> dict[str, str]:
        """Custody field -> column, for every field the mapping names."""
        named = {
            "id": self.id,
            "text": self.text,
            "doc_id": self.doc_id,
            "title": self.title,
            "path": self.path,
            "line_start": self.line_start,
            "line_end": self.line_end,
            "hash": self.hash,
            "revision": self.revision,
        }
        return {k: v for k, v in named.items() if v is not None}


_CUSTODY_OF = {"path": "source_path", "line_start": "line_start", "line_end": "line_end", "hash": "source_hash"}
"""Mapping field -> the nullable custody field it fills."""


def absent_reasons(mapping: FieldMapping, instance: str) -> dict[str, str]:
    """The nullable custody fields this mapping leaves empty, each with why."""
    named = mapping.columns()
    return {
        custody: f"instance {instance!r} maps no column to {field!r}; the source has none"
        for field, custody in sorted(_CUSTODY_OF.items())
        if field not in named
    }


def metadata_columns(mapping: FieldMapping, available: Sequence[str]) -> tuple[str, ...]:
    """The metadata columns: those the mapping lists, else every available one it does not use."""
    if mapping.metadata is not None:
        return tuple(sorted(mapping.metadata))
    used = set(mapping.columns().values())
    return tuple(sorted(c for c in available if c not in used))


_HITS = TypeAdapter(list[Hit])


def mapped_hits(
    *,
    request: ScanRequest,
    mapping: FieldMapping,
    rows: Sequence[tuple[Mapping[str, Any], float]],
    metadata: Sequence[Mapping[str, Any]],
    absent: Mapping[str, str],
    key_domain: str,
    score_kind: ScoreKind,
    index_identity: str,
    generation: str,
    corpus_revision: str,
) -> list[Hit]:
    """Hits in rank order from source rows (column -> value) with custody as the mapping says;
    ``metadata`` holds each row's metadata, already normalized, in the same order."""
    shared = {
        "index_identity": index_identity,
        "index_generation": generation,
        "backend": request.backend,
        "rsc": f"{request.rsc_id}@{request.rsc_version}",
        "request": request_fingerprint(request),
        "filters_pushed": tuple(f.describe() for f in request.pushed),
        "filters_residual": tuple(f.describe() for f in request.residual),
        "score_kind": score_kind,
        "access": "random" if request.params.get("access") == "random" else "sorted",
        "absent": dict(absent),
    }
    raw = []
    for rank, ((row, score), meta) in enumerate(zip(rows, metadata, strict=True), start=1):
        chunk_id = str(row[mapping.id])
        custody: dict[str, Any] = {
            **shared,
            "chunk_id": chunk_id,
            "corpus_revision": str(row[mapping.revision]) if mapping.revision else corpus_revision,
            "rank": rank,
            "score": score,
        }
        for field, name in _CUSTODY_OF.items():
            column = getattr(mapping, field)
            value = row[column] if column is not None else None
            custody[name] = (int(value) if field.startswith("line") else str(value)) if value is not None else None
            if value is None and column is not None:
                custody["absent"] = {**custody["absent"], name: f"column {column!r} is empty in this row"}
        raw.append(
            {
                "key": f"{key_domain}:{chunk_id}",
                "doc_id": str(row[mapping.doc_id]) if mapping.doc_id else chunk_id,
                "chunk_id": chunk_id,
                "title": str(row[mapping.title] or "") if mapping.title else "",
                "text": str(row[mapping.text] or ""),
                "metadata": dict(meta),
                "custody": custody,
            }
        )
    return _HITS.validate_python(raw)


def identity_operand(value: object, *, numeric: bool) -> object:
    """A ``chunk_id``/``doc_id`` filter operand (always text, as hits carry ids) as a value of an
    id column: a number where the column holds numbers, so ``chunk_id = "5"`` finds row 5."""
    if numeric and isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return value
    return value
