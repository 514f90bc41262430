"""The catalog (race.catalog/1): named instances, indexes RACE did not build attached through a
field mapping, contracts generated from the real sources and only ever weakened by the user,
and two instances of one kind side by side in one engine."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from race.cli.main import main
from race.engine import Engine
from race.indexing.catalog import index_catalog, parse_catalog
from race.receipt import Receipt
from rsc import FilterSupportClass, InputError, dumps_canonical
from tests.backends.attached import TABLE, build_attached_sources
from tests.conftest import FIXTURES, remove_live_tree
from tests.scan_requests import request_for
from tests.test_golden_receipts import masked

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def attached_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A LanceDB table and a tantivy index RACE did not build (tests/backends/attached.py)."""
    return build_attached_sources(tmp_path_factory.mktemp("attached"))


def _catalog(folder: Path, instances: dict[str, Any], name: str = "catalog.json") -> Path:
    path = folder / name
    path.write_text(json.dumps({"schema_version": "race.catalog/1", "instances": instances}))
    return path


def _sources(attached_sources: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """The attached LanceDB table and tantivy index as catalog instances (no path or lines)."""
    root = attached_sources["root"]
    tickets = {
        "kind": "lancedb",
        "location": str(root / "lake"),
        "table": TABLE,
        "embedder": {"name": MINILM},
        "fields": {"id": "doc_key", "text": "body"},
        **overrides.get("tickets", {}),
    }
    licenses = {
        "kind": "tantivy",
        "location": str(root / "licenses"),
        "fields": {"id": "doc_key", "text": "body", "path": "src", "metadata": ["prio", "team"]},
        **overrides.get("licenses", {}),
    }
    return {"tickets": tickets, "licenses": licenses}


# -- the document ---------------------------------------------------------------------------------


def test_toml_and_json_catalogs_are_one_record() -> None:
    text = (FIXTURES / "catalogs" / "example.toml").read_bytes()
    catalog = parse_catalog(text, where="example.toml", toml=True)
    again = parse_catalog(json.dumps(catalog.model_dump(mode="json")).encode(), where="example.json", toml=False)
    assert again == catalog
    assert sorted(catalog.instances) == ["chunks", "docs", "tickets"]
    assert catalog.instances["tickets"].fields is not None
    assert catalog.instances["tickets"].fields.id == "doc_key"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"schema_version": "race.catalog/2", "instances": {}}, "field 'schema_version' must be 'race.catalog/1'"),
        ({"schema_version": "race.catalog/1", "instances": {}}, "field 'instances': "),
        (
            {"schema_version": "race.catalog/1", "instances": {"Bad-Name": {"kind": "tantivy", "location": "x"}}},
            "field 'instances.Bad-Name.[key]'",
        ),
        (
            {"schema_version": "race.catalog/1", "instances": {"a": {"kind": "solr", "location": "x"}}},
            "field 'instances.a.kind'",
        ),
        (
            {"schema_version": "race.catalog/1", "instances": {"a": {"kind": "tantivy", "location": "x", "tabel": 1}}},
            "field 'instances.a.tabel': unknown field",
        ),
        (
            {
                "schema_version": "race.catalog/1",
                "instances": {"a": {"kind": "lancedb", "location": "x", "fields": {"id": "k", "text": "t"}}},
            },
            "an attached LanceDB instance names its 'table'",
        ),
        (
            {
                "schema_version": "race.catalog/1",
                "instances": {"a": {"kind": "milvus", "location": "x", "fields": {"id": "k", "text": "t"}}},
            },
            "an attached Milvus instance names its 'collection'",
        ),
    ],
)
def test_bad_catalog_is_one_line_naming_the_place(document: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_catalog(json.dumps(document).encode(), where="cat.json", toml=False)
    assert str(err.value).startswith("cat.json: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_bad_catalog_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('schema_version = "race.catalog/1"\n[instances.x]\nkind = "tantivy"\n')
    plan = FIXTURES / "plans" / "adversarial_text.json"
    assert main(["plan", str(plan), "--catalog", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"race: error: {bad}: field 'instances.x': Value error, 'location' is required (or 'shards', for a sharded "
        "instance)"
    ]


# -- a `race index` directory is a catalog ---------------------------------------------------------


def test_index_directory_as_a_catalog_serves_what_open_serves(index_dir: Path, tmp_path: Path) -> None:
    catalog = tmp_path / "index.json"
    catalog.write_text(json.dumps(index_catalog(index_dir).model_dump(mode="json")))
    opened, listed = Engine.open(index_dir), Engine.from_catalog(catalog)
    assert sorted(listed.adapters) == ["graph", "lancedb", "tantivy"]
    assert listed.contracts() == opened.contracts()
    plan = FIXTURES / "plans" / "showcase.json"
    assert masked(listed.run_sync(plan)) == masked(opened.run_sync(plan))


def test_batch_runs_on_a_catalog(index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog = tmp_path / "index.json"
    catalog.write_text(json.dumps(index_catalog(index_dir).model_dump(mode="json")))
    names = ("showcase.json", "cascade_lexical.json")
    plans, out = tmp_path / "plans.jsonl", tmp_path / "receipts.jsonl"
    plans.write_text("".join(json.dumps(json.loads((FIXTURES / "plans" / n).read_text())) + "\n" for n in names))
    assert main(["batch", str(plans), "--out", str(out), "--catalog", str(catalog)]) == 0
    engine = Engine.from_catalog(catalog)
    got = [Receipt.model_validate(json.loads(line)["receipt"]) for line in out.read_text().splitlines()]
    assert [masked(r) for r in got] == [masked(engine.run_sync(FIXTURES / "plans" / n)) for n in names]
    capsys.readouterr()
    assert main(["batch", str(plans), "--out", str(out), "--catalog", str(catalog), "--index", str(index_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("race: error: --catalog: ") and len(err.splitlines()) == 1
    # An instance that cannot be opened is bad input before anything is written, on Ray too.
    broken = tmp_path / "broken.toml"
    broken.write_text('schema_version = "race.catalog/1"\n[instances.a]\nkind = "tantivy"\nlocation = "absent"\n')
    fresh = tmp_path / "fresh.jsonl"
    for extra in ([], ["--ray", "local"]):
        assert main(["batch", str(plans), "--out", str(fresh), "--catalog", str(broken), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"race: error: {broken}: instance a: ") and len(err.splitlines()) == 1
        assert not fresh.exists()


# -- attached sources: honest contracts and custody -----------------------------------------------


def test_attached_contracts_are_generated_from_the_sources(attached_sources: dict[str, Any], tmp_path: Path) -> None:
    engine = Engine.from_catalog(_catalog(tmp_path, _sources(attached_sources)))
    by_id = {c.rsc_id: c for c in engine.contracts()}
    assert sorted(by_id) == ["licenses.tantivy.bm25", "tickets.lancedb.flat_prefilter"]
    lexical, vector = by_id["licenses.tantivy.bm25"], by_id["tickets.lancedb.flat_prefilter"]
    assert (lexical.backend, vector.backend) == ("licenses", "tickets")
    # tantivy: `team` is a raw term field; `prio` is stored but not indexed, so only checkable afterwards.
    assert {f: s.support for f, s in lexical.filters.items()} == {
        "chunk_id": FilterSupportClass.NATIVE_PREFILTER_EXACT,
        "doc_id": FilterSupportClass.NATIVE_PREFILTER_EXACT,
        "prio": FilterSupportClass.POSTFILTER_ONLY,
        "team": FilterSupportClass.NATIVE_PREFILTER_EXACT,
    }
    # LanceDB: a flat scan filters every scalar column exactly, through an index or by scanning.
    assert {f: s.support for f, s in vector.filters.items()} == dict.fromkeys(
        ["chunk_id", "digest", "doc_id", "first_line", "last_line", "prio", "src", "team"],
        FilterSupportClass.NATIVE_PREFILTER_EXACT,
    )
    assert "through a scalar index on ['team']" in vector.description
    assert "by scanning every row on ['digest', 'first_line', 'last_line', 'prio', 'src']" in vector.description
    # Vectors the user made are not assumed to share RACE's calibrated scale: they fuse by rank.
    assert vector.score_calibration is None
    assert (vector.early_stop.sorted_access, vector.early_stop.random_access) == (True, False)
    assert "source_path" not in vector.provenance_fields and "source_path" in lexical.provenance_fields


_request = partial(request_for, obligation="t")


def test_attached_lance_scan_is_the_exact_filtered_top_k(attached_sources: dict[str, Any], tmp_path: Path) -> None:
    from rsc import Filter

    engine = Engine.from_catalog(_catalog(tmp_path, _sources(attached_sources)))
    adapter = engine.adapters["tickets"]
    contract = adapter.index_contracts()[0]
    text = "you may not use this file except in compliance with the license"
    team = Filter(field="team", op="in", values=("ops", "web"))
    result = anyio.run(adapter.scan, _request(contract, text, 6, pushed=(team,)))
    # The reference: every row that passes the filter, by cosine distance in float64.
    rows, vectors = attached_sources["rows"], attached_sources["vectors"].astype(np.float64)
    query = attached_sources["embedder"].embed([text])[0].astype(np.float64)
    distances = 1.0 - vectors @ query / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query))
    expected = sorted((d, r["doc_key"]) for d, r in zip(distances, rows, strict=True) if r["team"] in ("ops", "web"))
    assert [h.chunk_id for h in result.hits] == [key for _, key in expected[:6]]
    assert [h.custody.score for h in result.hits] == pytest.approx([d for d, _ in expected[:6]], abs=1e-5)
    assert result.total_matches == sum(r["team"] in ("ops", "web") for r in rows)
    assert {h.metadata["team"] for h in result.hits} <= {"ops", "web"}


def test_attached_tantivy_ranks_as_tantivy_does(attached_sources: dict[str, Any], tmp_path: Path) -> None:
    import tantivy

    engine = Engine.from_catalog(_catalog(tmp_path, _sources(attached_sources)))
    adapter = engine.adapters["licenses"]
    contract = adapter.index_contracts()[0]
    text = "patent license grant"
    result = anyio.run(adapter.scan, _request(contract, text, 5))
    index = tantivy.Index.open(str(attached_sources["root"] / "licenses"))
    searcher = index.searcher()
    found = searcher.search(index.parse_query(text, ["body"]), limit=50).hits
    reference = sorted(((-s, searcher.doc(a)["doc_key"][0]) for s, a in found))[:5]
    assert [h.chunk_id for h in result.hits] == [key for _, key in reference]
    assert [h.custody.score for h in result.hits] == pytest.approx([-score for score, _ in reference], rel=1e-6)


def test_custody_fields_the_source_lacks_are_null_with_the_reason(
    attached_sources: dict[str, Any], tmp_path: Path
) -> None:
    from race.evidence.verify import verify_receipt

    engine = Engine.from_catalog(_catalog(tmp_path, _sources(attached_sources)))
    plan = json.loads((FIXTURES / "catalogs" / "attached_union.json").read_text())
    receipt = engine.run_sync(plan)
    hits = [h for item in receipt.evidence for h in item.hits]
    assert {h.custody.backend for h in hits} == {"licenses", "tickets"}
    for hit in hits:
        c = hit.custody
        row = next(r for r in attached_sources["rows"] if r["doc_key"] == hit.chunk_id)
        assert hit.text == row["body"]
        assert (c.line_start, c.line_end, c.source_hash) == (None, None, None)
        if c.backend == "licenses":
            assert c.source_path == row["src"]
            assert sorted(c.absent) == ["line_end", "line_start", "source_hash"]
        else:
            assert c.source_path is None
            assert c.absent["source_path"] == "instance 'tickets' maps no column to 'path'; the source has none"
    body = json.loads(dumps_canonical(receipt.normalized()))
    first = body["evidence"][0]["hits"][0]["custody"]
    assert first["line_start"] is None and "line_start" in first["absent"]
    # A citation without lines cannot be checked, and says so rather than passing.
    report = verify_receipt(receipt, Path("/usr/share/common-licenses"))
    assert report.counts["missing"] == len(hits) and report.counts["valid"] == 0
    # The receipt's text says what is known, and that the rest is not: never 'None'.
    from race.cli.render import receipt_text
    from race.evidence.verify import verify_text

    text = receipt_text(receipt) + verify_text(report)
    assert "None" not in text
    assert "(no source path)" in text and "(no line span)" in text and "(no hash)" in text


# -- instances of one kind, and overrides ----------------------------------------------------------


def test_two_instances_of_one_kind_with_their_own_schemas_and_contracts(
    attached_sources: dict[str, Any], index_dir: Path, tmp_path: Path
) -> None:
    instances = {
        **_sources(attached_sources),
        "docs": {"kind": "tantivy", "location": str(index_dir)},
        "chunks": {"kind": "lancedb", "location": str(index_dir)},
    }
    engine = Engine.from_catalog(_catalog(tmp_path, instances))
    lexical = {c.rsc_id: c for c in engine.contracts() if c.mode == "bm25"}
    assert sorted(lexical) == ["docs.tantivy.bm25", "licenses.tantivy.bm25"]
    assert (
        "doc_type" in lexical["docs.tantivy.bm25"].filters
        and "doc_type" not in lexical["licenses.tantivy.bm25"].filters
    )
    assert "team" in lexical["licenses.tantivy.bm25"].filters and "team" not in lexical["docs.tantivy.bm25"].filters
    flat = sorted(c.rsc_id for c in engine.contracts() if c.mode == "vector_flat")
    assert flat == ["chunks.lancedb.flat_prefilter", "tickets.lancedb.flat_prefilter"]
    plan = {
        "schema_version": "race.plan/1",
        "root": "u",
        "obligations": [
            {"id": "d", "kind": "seek_support", "query": {"text": "replication raft partition"},
             "query_class": "lexical", "k": 3, "mandatory": False, "allow_contracts": ["docs.tantivy.bm25"]},
            {"id": "l", "kind": "seek_support", "query": {"text": "warranty liability"},
             "query_class": "lexical", "k": 3, "mandatory": False, "allow_contracts": ["licenses.tantivy.bm25"],
             "hard_filters": [{"field": "team", "value": "legal"}]},
        ],
        "operators": [{"id": "u", "op": "union", "inputs": ["d", "l"]}],
    }  # fmt: skip
    from planner import render_text

    explain = render_text(engine.plan_sync(plan))
    # Deterministic: an engine opened afresh from the same catalog plans the same bytes.
    assert render_text(Engine.from_catalog(tmp_path / "catalog.json").plan_sync(plan)) == explain
    assert "scan d [G2] docs.tantivy.bm25@1.0.0 mode=bm25" in explain
    assert "scan l [G3] licenses.tantivy.bm25@1.0.0 mode=bm25 k=3 pushed=[team = 'legal']" in explain
    assert "generation  docs: tantivy:" in explain and "generation  licenses: licenses:" in explain
    receipt = engine.run_sync(plan)
    by_backend = {h.custody.backend for item in receipt.evidence for h in item.hits}
    assert by_backend == {"docs", "licenses"}
    for item in receipt.evidence:
        for hit in item.hits:
            if hit.custody.backend == "docs":
                assert hit.custody.rsc == "docs.tantivy.bm25@1.0.0" and hit.custody.source_hash is not None
            else:
                assert hit.custody.rsc == "licenses.tantivy.bm25@1.0.0" and hit.metadata["team"] == "legal"


def test_overrides_weaken_and_never_strengthen(attached_sources: dict[str, Any], tmp_path: Path) -> None:
    weaker = {"tickets": {"contracts": {"tickets.lancedb.flat_prefilter": {"filters": {"team": "postfilter_only"}}}}}
    engine = Engine.from_catalog(_catalog(tmp_path, _sources(attached_sources, **weaker)))
    contract = next(c for c in engine.contracts() if c.backend == "tickets")
    assert contract.filter_support("team").support is FilterSupportClass.POSTFILTER_ONLY
    assert contract.description.endswith("Weakened by the catalog: filter team postfilter_only.")
    stronger = {"licenses": {"contracts": {"licenses.tantivy.bm25": {"filters": {"prio": "native_prefilter_exact"}}}}}
    path = _catalog(tmp_path, _sources(attached_sources, **stronger), name="stronger.json")
    with pytest.raises(InputError) as err:
        Engine.from_catalog(path)
    assert str(err.value) == (
        f"{path}: instance licenses: contracts.licenses.tantivy.bm25.filters.prio: 'native_prefilter_exact' is "
        "stronger than the generated 'postfilter_only'; an override may only weaken a claim"
    )
    access = {"tickets": {"contracts": {"tickets.lancedb.flat_prefilter": {"random_access": True}}}}
    path = _catalog(tmp_path, _sources(attached_sources, **access), name="access.json")
    with pytest.raises(
        InputError, match=r"instance tickets: contracts\.tickets\.lancedb\.flat_prefilter\.random_access"
    ):
        Engine.from_catalog(path)
    unknown = {"tickets": {"contracts": {"tickets.bm25": {"sorted_access": False}}}}
    path = _catalog(tmp_path, _sources(attached_sources, **unknown), name="unknown.json")
    with pytest.raises(InputError, match=r"contracts\.tickets\.bm25: the instance serves no such contract"):
        Engine.from_catalog(path)


def test_a_mapping_naming_a_column_the_source_lacks_is_refused(
    attached_sources: dict[str, Any], tmp_path: Path
) -> None:
    wrong = {"licenses": {"fields": {"id": "doc_key", "text": "content"}}}
    path = _catalog(tmp_path, _sources(attached_sources, **wrong))
    with pytest.raises(InputError) as err:
        Engine.from_catalog(path)
    assert str(err.value) == f"{path}: instance licenses: field mapping 'text': the index has no field 'content'"


def test_vectors_from_another_text_are_refused(attached_sources: dict[str, Any], tmp_path: Path) -> None:
    # The table's vectors embed `body`; named as the embedding of `src`, they do not match.
    wrong = {"tickets": {"fields": {"id": "doc_key", "text": "src"}}}
    path = _catalog(tmp_path, _sources(attached_sources, **wrong))
    with pytest.raises(InputError, match=r"instance tickets: column 'embedding' of row 'Apache-2.0:\d+' is not"):
        Engine.from_catalog(path)


def test_a_sharded_instance_is_declared_by_its_shard_directories(tmp_path: Path) -> None:
    from backends import load_corpus
    from backends.sharding.sharded import ShardedAdapter
    from backends.tantivy import TantivyAdapter
    from tests.test_sharded import SPEC, _part

    corpus = load_corpus(FIXTURES / SPEC["bm25"]["corpus"])
    dirs = []
    for label, docs in sorted(SPEC["bm25"]["shards"].items()):
        TantivyAdapter.build(_part(corpus, docs, label), tmp_path / label)
        dirs.append(label)
    path = _catalog(tmp_path, {"parts": {"kind": "tantivy", "shards": dirs}})
    engine = Engine.from_catalog(path)
    served = engine.adapters["parts"]
    assert isinstance(served, ShardedAdapter) and served.labels == ("s0", "s1", "s2")
    direct = ShardedAdapter("parts", [TantivyAdapter.open(tmp_path / d) for d in dirs])
    assert served.index_contracts() == direct.index_contracts()
    contract = next(c for c in direct.index_contracts() if c.rsc_id == "parts.tantivy.bm25")
    request = _request(contract, "replication raft partition stall", 6)
    assert anyio.run(served.scan, request) == anyio.run(direct.scan, request)
    with pytest.raises(InputError, match=r"'shards' lists the `race index` directories"):
        parse_catalog(
            json.dumps(
                {"schema_version": "race.catalog/1", "instances": {"p": {"kind": "milvus", "shards": ["a"]}}}
            ).encode(),
            where="cat.json",
            toml=False,
        )


def test_numeric_ids_answer_identity_filters_given_as_text(attached_sources: dict[str, Any], tmp_path: Path) -> None:
    """Hits carry ids as text; an id column of numbers still answers ``chunk_id = "7"``."""
    import lancedb
    import pyarrow as pa
    import tantivy

    from rsc import Filter

    rows = attached_sources["rows"][:12]
    vectors = attached_sources["vectors"][:12]
    flat = pa.array(vectors.astype("float32").ravel())
    table = pa.table(
        {
            "ticket_no": list(range(1, 13)),
            "body": [r["body"] for r in rows],
            "embedding": pa.FixedSizeListArray.from_arrays(flat, int(vectors.shape[1])),
        }
    )
    lancedb.connect(str(tmp_path / "lake")).create_table("numbered", table)
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("ticket_no", stored=True, indexed=True)
    builder.add_text_field("body", stored=True)
    (tmp_path / "tv").mkdir()
    index = tantivy.Index(builder.build(), path=str(tmp_path / "tv"))
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    for number, row in enumerate(rows, start=1):
        writer.add_document(tantivy.Document(ticket_no=number, body=row["body"]))
    writer.commit()
    writer.wait_merging_threads()
    mapping = {"id": "ticket_no", "text": "body"}
    instances = {
        "numbered": {"kind": "lancedb", "location": "lake", "table": "numbered", "embedder": {"name": MINILM},
                     "fields": mapping},
        "tv": {"kind": "tantivy", "location": "tv", "fields": mapping},
    }  # fmt: skip
    engine = Engine.from_catalog(_catalog(tmp_path, instances))
    wanted = Filter(field="chunk_id", op="in", values=("7", "3", "x"))
    for name, text in (("numbered", "licence terms"), ("tv", "license software")):
        contract = engine.adapters[name].index_contracts()[0]
        assert contract.filter_support("chunk_id").support is FilterSupportClass.NATIVE_PREFILTER_EXACT
        result = anyio.run(engine.adapters[name].scan, _request(contract, text, 5, pushed=(wanted,)))
        assert sorted(h.chunk_id for h in result.hits) == ["3", "7"], name


def test_sources_removed_after_attach_are_gaps_naming_their_instances(
    attached_sources: dict[str, Any], tmp_path: Path
) -> None:
    import shutil

    import lancedb

    from rsc import GapKind

    for folder in ("lake", "licenses"):
        shutil.copytree(attached_sources["root"] / folder, tmp_path / folder)
    instances = _sources({"root": tmp_path})
    engine = Engine.from_catalog(_catalog(tmp_path, instances))
    plan = json.loads((FIXTURES / "catalogs" / "attached_union.json").read_text())
    assert {h.custody.backend for item in engine.run_sync(plan).evidence for h in item.hits} == {"licenses", "tickets"}
    lancedb.connect(str(tmp_path / "lake")).drop_table(TABLE)
    remove_live_tree(tmp_path / "licenses")
    receipt = engine.run_sync(plan)
    assert receipt.evidence == ()
    moved = sorted((g.obligation, g.backend) for g in receipt.gaps if g.kind is GapKind.SNAPSHOT_MOVED)
    assert moved == [("lexical", "licenses"), ("vector", "tickets")]
