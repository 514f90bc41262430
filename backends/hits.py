"""Hits built from stored chunk rows without validating every one of them again.

A scan's hits share most of their custody (the request, the contract, the generation, the
filters) and differ only by the row's own fields. ``custody_hits`` validates the first hit in
full; every further row whose fields have exactly the plain types validation would keep
is built from the first hit's validated custody and its own values (what
``rsc.records.trusted`` makes), the same record validation makes, field for field. A row of any
other shape sends the whole answer back through validation, which accepts, converts or
refuses it as it always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rsc import Hit
from rsc.answers import Custody

_HIT_SET = frozenset(Hit.model_fields)
_CUSTODY_SET = frozenset(Custody.model_fields) - {"expected_recall", "absent"}
"""The fields a hit and its custody name when built from a row (``backends.base.custody_hits``)."""


def plain_metadata(metadata: object) -> dict[str, Any] | None:
    """A row's metadata as validation would make it, when every value is of a type validation
    keeps as it is (a list of strings becomes a tuple); ``None`` when some value is not."""
    if type(metadata) is not dict:
        return None
    out = dict(metadata)
    for name, value in out.items():
        kind = type(value)
        if type(name) is not str:
            return None
        if kind is list:
            for item in value:
                if type(item) is not str:
                    return None
            out[name] = tuple(value)
        elif kind is not str and kind is not int and kind is not bool and kind is not float:
            return None
    return out


def rest_of_hits(
    first: Hit, rows: Sequence[tuple[dict[str, Any], float]], keys: Sequence[str] | None, corpus_revision: str
) -> list[Hit] | None:
    """The hits of ``rows[1:]`` beside ``first`` (validated from ``rows[0]``), or ``None``
    when some row is not plain and the answer must be validated whole.

    A row is plain when every field is of exactly the type validation keeps as it is (and its
    metadata is, ``plain_metadata``). Each field is read once, checked, and put in the record;
    each record is what ``rsc.records.trusted`` makes, its steps inline (a scan builds one pair
    per row)."""
    shared = first.custody
    index_identity, generation, backend = shared.index_identity, shared.index_generation, shared.backend
    rsc, request, pushed, residual = shared.rsc, shared.request, shared.filters_pushed, shared.filters_residual
    score_kind, access = shared.score_kind, shared.access
    new, put = object.__new__, object.__setattr__
    hits: list[Hit] = []
    for rank in range(2, len(rows) + 1):
        chunk, score = rows[rank - 1]
        get = chunk.get
        chunk_id, doc_id, title, text = get("chunk_id"), get("doc_id"), get("title", ""), get("text", "")
        source_path, source_hash = get("source_path"), get("source_hash")
        line_start, line_end, char_start, char_end = (
            get("line_start"),
            get("line_end"),
            get("char_start"),
            get("char_end"),
        )
        key = keys[rank - 1] if keys is not None else f"chunk:{chunk_id}"
        revision = get("corpus_revision", corpus_revision)
        if not (
            type(score) is float
            and type(key) is str
            and type(revision) is str
            and type(doc_id) is str
            and type(chunk_id) is str
            and type(source_path) is str
            and type(source_hash) is str
            and type(title) is str
            and type(text) is str
            and type(line_start) is int
            and type(line_end) is int
            and (char_start is None or type(char_start) is int)
            and (char_end is None or type(char_end) is int)
        ):
            return None
        metadata = plain_metadata(get("metadata"))
        if metadata is None:
            return None
        custody = new(Custody)
        put(
            custody,
            "__dict__",
            {
                "source_path": source_path,
                "line_start": line_start,
                "line_end": line_end,
                "char_start": char_start,
                "char_end": char_end,
                "source_hash": source_hash,
                "chunk_id": chunk_id,
                "corpus_revision": revision,
                "index_identity": index_identity,
                "index_generation": generation,
                "backend": backend,
                "rsc": rsc,
                "request": request,
                "filters_pushed": pushed,
                "filters_residual": residual,
                "rank": rank,
                "score": score,
                "score_kind": score_kind,
                "access": access,
                "expected_recall": None,
                "absent": {},
            },
        )
        put(custody, "__pydantic_fields_set__", set(_CUSTODY_SET))
        put(custody, "__pydantic_extra__", None)
        put(custody, "__pydantic_private__", None)
        hit = new(Hit)
        put(
            hit,
            "__dict__",
            {
                "key": key,
                "doc_id": doc_id,
                "chunk_id": chunk_id,
                "title": title,
                "text": text,
                "metadata": metadata,
                "custody": custody,
            },
        )
        put(hit, "__pydantic_fields_set__", set(_HIT_SET))
        put(hit, "__pydantic_extra__", None)
        put(hit, "__pydantic_private__", None)
        hits.append(hit)
    return hits
