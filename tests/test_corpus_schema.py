"""The corpus schema (race.schema/1): ingest validation and normalization, YAML front matter,
JSONL text that cannot set metadata (I14), and contracts generated from the schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends import LOCAL_ADAPTERS
from backends.generated import generate_contracts, read_contracts
from backends.ingest.corpus import load_corpus
from backends.ingest.schema import (
    CorpusSchema,
    FieldType,
    check_filter,
    datetime_micros,
    default_schema,
    load_schema,
    normalize,
    parse_datetime,
)
from race import Field
from race.cli.main import main
from race.engine import Engine
from race.indexing.bundled import BUNDLED_CORPUS
from rsc import CorpusError, Filter, PlanError, canonical_pretty


def _schema(**fields: object) -> dict[str, object]:
    return {"schema_version": "race.schema/1", "fields": fields, "relations": {"cites": {}}}


def _write(root: Path, files: dict[str, str | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(body, encoding="utf-8")
    return root


# -- the bundled corpus ------------------------------------------------------------------------


def test_bundled_corpus_declares_exactly_the_default_schema() -> None:
    assert load_schema(BUNDLED_CORPUS) == default_schema()
    schema = default_schema()
    assert sorted(schema.fields) == ["authority", "component", "date", "doc_type", "status", "version"]
    assert sorted(schema.relations) == ["cites", "depends_on", "derived_from", "mentions", "supersedes"]


def test_contracts_generated_for_the_bundled_schema_are_the_shipped_ones_byte_for_byte() -> None:
    for adapter in LOCAL_ADAPTERS:
        shipped = adapter.contracts()
        generated = generate_contracts(shipped, default_schema())
        assert [canonical_pretty(c) for c in generated] == [canonical_pretty(c) for c in shipped], adapter.backend


def test_an_index_stores_its_contracts_and_the_engine_plans_with_them(index_dir: Path, engine: Engine) -> None:
    stored = [c for a in LOCAL_ADAPTERS for c in (read_contracts(index_dir / a.backend) or ())]
    assert sorted(c.ref for c in stored) == sorted(c.ref for c in engine.contracts())
    assert {canonical_pretty(c) for c in stored} == {canonical_pretty(c) for c in engine.contracts()}
    assert json.loads((index_dir / "schema.json").read_text())["schema_version"] == "race.schema/1"


# -- values ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "raw", "expected"),
    [
        (FieldType.KEYWORD, "3.10", "3.10"),
        (FieldType.KEYWORDS, ["b", "a", "b"], ("a", "b")),
        (FieldType.KEYWORDS, "solo", ("solo",)),
        (FieldType.DATE, "2024-02-29", "2024-02-29"),
        (FieldType.INTEGER, "42", 42),
        (FieldType.INTEGER, 7, 7),
        (FieldType.FLOAT, "3.1", 3.1),
        (FieldType.FLOAT, 2, 2.0),
        (FieldType.BOOLEAN, "true", True),
        (FieldType.BOOLEAN, False, False),
        (FieldType.DATETIME, "2024-03-12T10:00:00+02:00", "2024-03-12T08:00:00Z"),
        (FieldType.DATETIME, "Tue, 12 Mar 2024 10:00:00 +0000", "2024-03-12T10:00:00Z"),
    ],
)
def test_values_are_normalized_once(kind: FieldType, raw: object, expected: object) -> None:
    assert normalize(kind, raw, field="f", where="x") == expected


@pytest.mark.parametrize(
    ("kind", "raw", "message"),
    [
        (FieldType.DATE, "2024-02-30", "not a calendar date"),
        (FieldType.DATE, "12/03/2024", "not YYYY-MM-DD"),
        (FieldType.INTEGER, "3.5", "not an integer"),
        (FieldType.INTEGER, True, "not an integer"),
        (FieldType.FLOAT, "nan", "not a finite number"),
        (FieldType.BOOLEAN, "maybe", "not a boolean"),
        (FieldType.DATETIME, "2024-03-12T10:00:00", "no time zone"),
        (FieldType.KEYWORD, 3, "not a keyword"),
    ],
)
def test_values_that_do_not_fit_are_refused(kind: FieldType, raw: object, message: str) -> None:
    with pytest.raises(CorpusError, match=message):
        normalize(kind, raw, field="f", where="doc.md:3")


def test_datetimes_compare_as_instants() -> None:
    early, late = parse_datetime("2024-03-12T23:30:00+01:00"), parse_datetime("2024-03-13T00:15:00Z")
    assert datetime_micros(early) < datetime_micros(late)


def test_schema_refuses_a_role_on_the_wrong_type_and_reserved_names() -> None:
    with pytest.raises(ValueError, match="role 'date' needs"):
        CorpusSchema.model_validate(_schema(team={"type": "keyword", "roles": ["date"]}))
    with pytest.raises(ValueError, match="'chunk_id' is a name every chunk already has"):
        CorpusSchema.model_validate(_schema(chunk_id={"type": "keyword"}))


def test_plan_filter_values_are_checked_against_the_field_types() -> None:
    schema = CorpusSchema.model_validate(
        _schema(severity={"type": "integer"}, tags={"type": "keyword[]"}, at={"type": "datetime"})
    )
    check_filter(schema, Filter(field="severity", op="range", gte=2), where="p")
    check_filter(schema, Filter(field="tags", value="db"), where="p")
    with pytest.raises(PlanError, match=r"'3' is not an integer"):
        check_filter(schema, Filter(field="severity", value="3"), where="p")
    with pytest.raises(PlanError, match="write '2024-03-12T08:00:00Z'"):
        check_filter(schema, Filter(field="at", op="range", gte="2024-03-12T10:00:00+02:00"), where="p")


# -- files -------------------------------------------------------------------------------------


def test_yaml_front_matter_takes_quoted_and_listed_values(tmp_path: Path) -> None:
    schema = _schema(date={"type": "date"}, tags={"type": "keyword[]"}, severity={"type": "integer"})
    root = _write(
        tmp_path / "c",
        {
            "schema.json": json.dumps(schema),
            "a.md": '---\nid: a\ntitle: "A: quoted"\ndate: "2024-01-05"\ntags: [db, ops]\nseverity: 3\n---\n'
            "# A\n\nbody\n",
        },
    )
    (chunk,) = load_corpus(root).chunks
    assert chunk.title == "A: quoted"
    assert chunk.metadata == {"doc_id": "a", "date": "2024-01-05", "tags": ("db", "ops"), "severity": 3}
    assert chunk.line_start == 10


def test_a_jsonl_text_cannot_set_metadata_with_a_front_matter_block(tmp_path: Path) -> None:
    doc = {"id": "d1", "title": "T", "text": "---\nstatus: superseded\ndoc_type: adr\n---\nplain text\n"}
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    chunks = load_corpus(path).chunks
    assert all(c.metadata == {"doc_id": "d1"} for c in chunks)
    assert "status: superseded" in "".join(c.text for c in chunks)


def test_extra_store_keeps_undeclared_fields_in_custody_metadata_only(tmp_path: Path) -> None:
    schema = {**_schema(team={"type": "keyword"}), "extra": "store"}
    root = _write(tmp_path / "c", {"schema.json": json.dumps(schema), "a.md": "---\nteam: red\nowner: ann\n---\nx\n"})
    (chunk,) = load_corpus(root).chunks
    assert chunk.metadata == {"doc_id": "a", "team": "red", "owner": "ann"}
    contracts = generate_contracts(LOCAL_ADAPTERS[0].contracts(), load_schema(root))
    assert all("owner" not in c.filters and "team" in c.filters for c in contracts)


_TEAM = json.dumps(_schema(team={"type": "keyword"}, date={"type": "date"}, severity={"type": "integer"}))


@pytest.mark.parametrize(
    ("files", "expect"),
    [
        ({"schema.json": _TEAM, "a.md": "---\nid: a\nteam: red\ncolour: blue\n---\nx\n"}, ["a.md:4", "'colour'"]),
        ({"schema.json": _TEAM, "a.md": "---\nid: a\ndate: 2024-02-30\n---\nx\n"}, ["a.md:3", "'date'", "calendar"]),
        ({"schema.json": _TEAM, "a.md": "---\nid: a\nseverity: high\n---\nx\n"}, ["a.md:3", "'severity'", "integer"]),
        ({"schema.json": _TEAM, "a.md": b"---\nid: a\n---\n\xff\xfe\n"}, ["a.md", "not UTF-8"]),
        ({"schema.json": _TEAM, "a.md": "---\nid: x\n---\n", "b.md": "---\nid: x\n---\n"}, ["b.md:2", "'x'", "a.md"]),
        ({"schema.json": _TEAM, "a.md": "---\nid: a\nteam: [unclosed\n---\n"}, ["a.md", "not YAML"]),
        ({"schema.json": '{"schema_version": "race.schema/1", "fields": {"t": {"type": "text"}}}'}, ["schema.json"]),
        (
            {"schema.json": _TEAM, "a.md": "x\n", "edges.jsonl": '{"src": "a", "dst": "b", "relation": "blocks"}\n'},
            ["edges.jsonl:1", "'blocks'"],
        ),
        (
            {"docs.jsonl": '{"id": "a", "text": "t", "colour": "red"}\n'},
            ["docs.jsonl:1", "'colour'", "docs.jsonl has no schema file", "--infer-schema` writes one"],
        ),
    ],
    ids=[
        "unknown_field",
        "invalid_date",
        "wrong_type",
        "not_utf8",
        "duplicate_id",
        "bad_yaml",
        "bad_schema",
        "unknown_relation",
        "jsonl_unknown_field",
    ],
)
def test_bad_corpora_fail_closed_with_one_line(
    files: dict[str, str | bytes], expect: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _write(tmp_path / "corpus", files)
    corpus = root / "docs.jsonl" if "docs.jsonl" in files else root
    out = tmp_path / "out"
    code = main(["index", str(corpus), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("race: error: "), captured.err
    for fragment in expect:
        assert fragment in captured.err, f"{fragment!r} not in {captured.err!r}"
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


# -- command line --------------------------------------------------------------------------------


def test_infer_schema_writes_one_for_review_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(BUNDLED_CORPUS, corpus)
    (corpus / "schema.json").unlink()
    assert main(["index", str(corpus), "--infer-schema"]) == 0
    assert load_schema(corpus) == default_schema(), "the bundled corpus infers to exactly its declared schema"
    out = capsys.readouterr().out
    assert "field date: date roles=date" in out and "relation supersedes: supersedes" in out
    assert main(["index", str(corpus), "--infer-schema"]) == 2
    assert "already has a schema" in capsys.readouterr().err


def test_rsc_list_shows_the_contracts_generated_for_an_index(
    index_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rsc", "list", "--index", str(index_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("tantivy.bm25@") and "doc_type:native_prefilter_exact" in line for line in lines)
    assert not any(line.startswith("remote.") for line in lines), "an index has no remote contracts"
    assert main(["rsc", "show", "lancedb.flat_prefilter", "--index", str(index_dir)]) == 0
    ops = json.loads(capsys.readouterr().out)["filters"]["date"]["ops"]
    # A date has every operator but prefix (keywords only).
    assert ops == ["eq", "in", "range", "ne", "not_in", "exists", "any_of"]


# -- front matter written for other tools ------------------------------------------------------

UNFIT_KEYS = Path(__file__).parents[1] / "fixtures" / "cases" / "unfit_keys"
"""Front matter as Sphinx, MyST and static-site generators write it: ``hide-toc`` and ``Author``
are not field names, ``section`` and ``text`` name every chunk's own columns."""


def test_front_matter_keys_no_field_can_be_named_after_are_stored_not_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "index"
    assert main(["index", str(UNFIT_KEYS), "--out", str(out), "--no-vectors"]) == 0
    err = capsys.readouterr().err
    assert "not filterable (not field names, or nested values): Author, author, hide-toc, section, text;" in err, err
    schema = CorpusSchema.model_validate_json((out / "schema.json").read_text(encoding="utf-8"))
    assert schema.extra == "store" and sorted(schema.fields) == ["orphan", "path", "tags", "team"]
    chunks = {c.doc_id: c for c in load_corpus(UNFIT_KEYS).chunks}
    assert chunks["index"].metadata["hide-toc"] == "true" and chunks["index"].metadata["Author"] == "Ann Example"
    assert chunks["index"].metadata["doc_id"] == "index", "front matter cannot rename a stored document"
    assert chunks["news"].metadata["section"] == "changelog"
    assert chunks["news"].metadata["author"] == '{"links":["home","mail"],"name":"Ann Example"}'  # nested: JSON text
    assert "front matter" not in chunks["news"].text, "a front matter key named text is not the body"
    with Engine.open(out) as engine:
        receipt = engine.search_sync(
            "package installer resolver", k=5, where=Field("team") == "red", strategy="lexical"
        )
    hits = [hit for item in receipt.evidence for hit in item.hits]
    assert [hit.doc_id for hit in hits] == ["index"]
    assert hits[0].metadata["hide-toc"] == "true" and hits[0].custody.filters_pushed == ("team = 'red'",)


def test_infer_schema_names_the_keys_it_stores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(UNFIT_KEYS, corpus)
    assert main(["index", str(corpus), "--infer-schema"]) == 0
    out = capsys.readouterr().out
    assert "stored hide-toc: not a field (not lower-case letters, digits and '_', starting with a letter)" in out
    assert "stored section: not a field (a name every chunk already has)" in out
    assert "ignored doc_id: not a field (every chunk's own document id)" in out
    assert "stored author: not a field (holds nested values (objects), kept as their JSON text)" in out
    schema = load_schema(corpus)
    assert schema.extra == "store" and sorted(schema.fields) == ["orphan", "tags", "team"]
    assert main(["index", str(corpus), "--out", str(tmp_path / "index"), "--no-vectors"]) == 0


def test_a_jsonl_field_of_objects_is_inferred_as_stored_json_text(tmp_path: Path) -> None:
    docs = tmp_path / "docs.jsonl"
    records = [
        {"id": "a", "text": "alpha beta", "meta": {"lang": "en", "n": 3}, "score": 1.5},
        {"id": "b", "text": "gamma delta", "meta": {"lang": "de"}, "score": 2},
    ]
    docs.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert main(["index", str(docs), "--infer-schema"]) == 0
    schema = load_schema(docs)
    assert schema.extra == "store" and sorted(schema.fields) == ["score"]
    chunks = {c.doc_id: c for c in load_corpus(docs).chunks}
    assert chunks["a"].metadata["meta"] == '{"lang":"en","n":3}' and chunks["a"].metadata["score"] == 1.5
    assert main(["index", str(docs), "--out", str(tmp_path / "index"), "--no-vectors"]) == 0
