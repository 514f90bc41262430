"""Hits built from stored chunk rows without validating every one of them again.

A scan's hits share most of their custody (the request, the contract, the generation, the
filters) and differ only by the row's own fields. ``custody_hits`` validates the first hit in
full; every further row whose fields have exactly the plain types validation would keep
(``plain_row``) is built from the first hit's validated custody and its own values
(``rsc.records.trusted``), the same record validation makes, field for field. A row of any
other shape sends the whole answer back through validation, which accepts, converts or
refuses it as it always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rsc import Hit
from rsc.answers import Custody
from rsc.records import trusted

_HIT_SET = frozenset(Hit.model_fields)
_CUSTODY_SET = frozenset(Custody.model_fields) - {"expected_recall", "absent"}
"""The fields a hit and its custody name when built from a row (``backends.base.custody_hits``)."""


def plain_row(chunk: dict[str, Any], key: object, score: object, revision: object) -> dict[str, Any] | None:
    """The row's metadata as validation would make it, when every value of the row is of a
    type validation keeps as it is (a list of strings in the metadata becomes a tuple);
    ``None`` when some value is not, and the row must be validated."""
    get = chunk.get
    char_start, char_end, metadata = get("char_start"), get("char_end"), get("metadata")
    if not (
        type(score) is float
        and type(key) is str
        and type(revision) is str
        and type(get("doc_id")) is str
        and type(get("chunk_id")) is str
        and type(get("source_path")) is str
        and type(get("source_hash")) is str
        and type(get("title", "")) is str
        and type(get("text", "")) is str
        and type(get("line_start")) is int
        and type(get("line_end")) is int
        and (char_start is None or type(char_start) is int)
        and (char_end is None or type(char_end) is int)
        and type(metadata) is dict
    ):
        return None
    out = dict(metadata)
    for name, value in out.items():
        kind = type(value)
        if type(name) is not str:
            return None
        if kind is list:
            if not all(type(v) is str for v in value):
                return None
            out[name] = tuple(value)
        elif kind is not str and kind is not int and kind is not bool and kind is not float:
            return None
    return out


def rest_of_hits(
    first: Hit, rows: Sequence[tuple[dict[str, Any], float]], keys: Sequence[str] | None, corpus_revision: str
) -> list[Hit] | None:
    """The hits of ``rows[1:]`` beside ``first`` (validated from ``rows[0]``), or ``None``
    when some row is not plain and the answer must be validated whole."""
    shared = first.custody
    index_identity, generation, backend = shared.index_identity, shared.index_generation, shared.backend
    rsc, request, pushed, residual = shared.rsc, shared.request, shared.filters_pushed, shared.filters_residual
    score_kind, access = shared.score_kind, shared.access
    hits: list[Hit] = []
    for rank in range(2, len(rows) + 1):
        chunk, score = rows[rank - 1]
        chunk_id = chunk.get("chunk_id")
        key = keys[rank - 1] if keys is not None else f"chunk:{chunk_id}"
        revision = chunk.get("corpus_revision", corpus_revision)
        metadata = plain_row(chunk, key, score, revision)
        if metadata is None:
            return None
        custody = trusted(
            Custody,
            {
                "source_path": chunk["source_path"],
                "line_start": chunk["line_start"],
                "line_end": chunk["line_end"],
                "char_start": chunk.get("char_start"),
                "char_end": chunk.get("char_end"),
                "source_hash": chunk["source_hash"],
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
            _CUSTODY_SET,
        )
        values = {
            "key": key,
            "doc_id": chunk["doc_id"],
            "chunk_id": chunk_id,
            "title": chunk.get("title", ""),
            "text": chunk.get("text", ""),
            "metadata": metadata,
            "custody": custody,
        }
        hits.append(trusted(Hit, values, _HIT_SET))
    return hits
