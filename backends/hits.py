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


def plain_row(chunk: dict[str, Any], key: object, score: object, revision: object) -> bool:
    """Whether a row's values are of the types validation keeps as they are (a list of
    strings in the metadata aside, which becomes a tuple); anything else is validated."""
    if type(score) is not float or type(key) is not str or type(revision) is not str:
        return False
    for name in ("doc_id", "chunk_id", "source_path", "source_hash"):
        if type(chunk.get(name)) is not str:
            return False
    if type(chunk.get("title", "")) is not str or type(chunk.get("text", "")) is not str:
        return False
    if type(chunk.get("line_start")) is not int or type(chunk.get("line_end")) is not int:
        return False
    for name in ("char_start", "char_end"):
        value = chunk.get(name)
        if value is not None and type(value) is not int:
            return False
    metadata = chunk.get("metadata")
    if type(metadata) is not dict:
        return False
    for name, value in metadata.items():
        kind = type(value)
        if type(name) is not str:
            return False
        if kind is list:
            if not all(type(v) is str for v in value):
                return False
        elif kind is not str and kind is not int and kind is not bool and kind is not float:
            return False
    return True


def _metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    return {name: tuple(value) if type(value) is list else value for name, value in metadata.items()}


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
        if not plain_row(chunk, key, score, revision):
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
            "metadata": _metadata(chunk["metadata"]),
            "custody": custody,
        }
        hits.append(trusted(Hit, values, _HIT_SET))
    return hits
