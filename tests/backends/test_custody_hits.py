"""Hits built beside the first validated one (backends.hits) are the hits validation makes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

import backends.base as base
from backends.base import custody_hits
from rsc import Filter, FilterOp, Query, ScanRequest, ScoreKind


def _request() -> ScanRequest:
    return ScanRequest(
        obligation="o",
        rsc_id="tantivy.bm25",
        rsc_version="1.0.0",
        backend="tantivy",
        mode="bm25",
        query=Query(text="x"),
        k=10,
        residual=(Filter(field="doc_type", op=FilterOp.EQ, value="adr"),),
    )


def _row(n: int, **changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "doc_id": f"d{n}",
        "chunk_id": f"d{n}#0",
        "title": f"title {n}",
        "text": f"text {n}",
        "metadata": {"doc_type": "adr", "tags": ["a", "b"], "year": 2020 + n, "weight": 0.5, "draft": n % 2 == 0},
        "source_path": f"docs/d{n}.md",
        "line_start": 1,
        "line_end": 3 + n,
        "char_start": None if n % 2 else 0,
        "char_end": None if n % 2 else 10,
        "source_hash": "sha256:" + "0" * 64,
    }
    if n == 2:
        row["corpus_revision"] = "rev-of-the-row"
    row.update(changes)
    return row


def _hits(rows: list[tuple[dict[str, Any], Any]], keys: list[str] | None = None) -> list[Any]:
    return custody_hits(
        request=_request(),
        contract_ref="tantivy.bm25@1.0.0",
        rows=rows,
        score_kind=ScoreKind.BM25,
        index_identity="tantivy:rev",
        generation="tantivy:gen",
        corpus_revision="rev",
        keys=keys,
    )


def _validated(rows: list[tuple[dict[str, Any], Any]], keys: list[str] | None = None) -> list[Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(base, "rest_of_hits", lambda *args: None)  # every row validated
        return _hits(rows, keys)


@pytest.mark.parametrize("keys", [None, [f"doc:d{n}" for n in range(5)]])
def test_built_hits_are_the_validated_hits_field_for_field(keys: list[str] | None) -> None:
    rows = [(_row(n), 10.0 - n) for n in range(5)]
    built, validated = _hits(rows, keys), _validated(rows, keys)
    assert built == validated
    for a, b in zip(built, validated, strict=True):
        assert a.model_dump_json() == b.model_dump_json()
        assert a.model_dump(mode="json") == b.model_dump(mode="json")
        assert a.model_fields_set == b.model_fields_set
        assert a.custody.model_fields_set == b.custody.model_fields_set
        assert {k: type(v) for k, v in a.metadata.items()} == {k: type(v) for k, v in b.metadata.items()}
        types = {k: type(v) for k, v in b.custody.__dict__.items()}
        assert {k: type(v) for k, v in a.custody.__dict__.items()} == types
    assert built[2].custody.corpus_revision == "rev-of-the-row"
    assert built[3].metadata["tags"] == ("a", "b")


@pytest.mark.parametrize(
    "row, score",
    [
        (_row(3, line_start="4"), 1.0),  # a string where an int belongs: validation converts it
        (_row(3), 1),  # an int score: validation makes it a float
        (_row(3, metadata={"tags": ("a",)}), 1.0),
    ],
)
def test_a_row_that_is_not_plain_has_the_answer_validated(row: dict[str, Any], score: Any) -> None:
    rows = [(_row(0), 2.0), (row, score)]
    assert _hits(rows) == _validated(rows)


def test_a_malformed_row_is_refused_as_validation_refuses_it() -> None:
    rows = [(_row(0), 2.0), (_row(1), 1.5), (_row(2, source_path=None), 1.0)]
    with pytest.raises(ValidationError) as built:
        _hits(rows)
    with pytest.raises(ValidationError) as validated:
        _validated(rows)
    assert str(built.value) == str(validated.value)


@pytest.mark.parametrize("absent", ["title", "text", "char_start", "char_end"])
def test_a_row_without_an_optional_field_is_built_as_validation_builds_it(absent: str) -> None:
    rows = [(_row(0), 2.0), (_row(1), 1.5)]
    del rows[1][0][absent]
    built, validated = _hits(rows), _validated(rows)
    assert [h.model_dump_json() for h in built] == [h.model_dump_json() for h in validated]
    assert [h.custody.model_fields_set for h in built] == [h.custody.model_fields_set for h in validated]
    assert [h.model_fields_set for h in built] == [h.model_fields_set for h in validated]


def test_a_list_of_other_than_strings_in_the_metadata_has_the_answer_validated() -> None:
    rows = [(_row(0), 2.0), (_row(1, metadata={"tags": ["a", 3]}), 1.5)]
    with pytest.raises(ValidationError):
        _validated(rows)
    with pytest.raises(ValidationError):
        _hits(rows)
