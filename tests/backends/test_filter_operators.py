"""Every filter operator on every backend, against a direct evaluation over the corpus rows.

fixtures/corpus_ops is twelve notes whose fields are missing from some of them (a row without a
field passes no ``ne``, ``not_in`` or ``exists`` on it, SQL's null semantics), with a
multi-valued keyword (``tags``) and keyword values holding quotes, ``%``, ``_`` and ``/``. Each
case runs on each contract of tantivy, LanceDB (flat, ANN prefilter and postfilter, the exact
matrix), the graph and Milvus (FLAT and HNSW) and is compared with ``Filter.matches`` over the
corpus's own metadata (not the hits'): an exact contract answers exactly the unfiltered ranking
restricted to the rows that pass; an approximate one never answers a row that fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from backends import Adapter, load_corpus
from race.cli.main import main
from race.engine import Engine
from race.indexing.indexing import build_index
from race.search import Field
from rsc import (
    Contract,
    CoverageClaim,
    Filter,
    FilterSupportClass,
    GapKind,
    Query,
    ScanRequest,
    SearchCoverage,
)
from tests.backends.conftest import milvus_available
from tests.conftest import FIXTURES

OPS_CORPUS = FIXTURES / "corpus_ops"
TEXT = "database incident"

CASES: tuple[dict[str, Any], ...] = (
    {"field": "team", "op": "ne", "value": "payments"},
    {"field": "team", "op": "not_in", "values": ["payments", "search"]},
    {"field": "team", "op": "exists"},
    {"field": "folder", "op": "prefix", "value": "runbooks/db"},
    # '_' and '%' are wildcards of SQL's and Milvus's LIKE: here they are the characters.
    {"field": "folder", "op": "prefix", "value": "runbooks_"},
    {"field": "folder", "op": "prefix", "value": "100%"},
    {"field": "folder", "op": "prefix", "value": "o'brien \""},
    {"field": "folder", "op": "prefix", "value": "runbooks"},
    {"field": "team", "op": "eq", "value": "o'brien"},
    {"field": "team", "op": "ne", "value": "x' OR '1'='1"},
    {"field": "team", "op": "eq", "value": 'x" or team != "'},
    {"field": "tags", "op": "exists"},
    {"field": "tags", "op": "ne", "value": "database"},
    {"field": "tags", "op": "not_in", "values": ["database", "auth"]},
    {"field": "severity", "op": "ne", "value": 2},
    {"field": "severity", "op": "not_in", "values": [2, 3]},
    {"field": "resolved", "op": "ne", "value": True},
    {"field": "opened", "op": "exists"},
    {"field": "opened", "op": "ne", "value": "2025-01-14"},
    {"field": "doc_id", "op": "prefix", "value": "n-0"},
    {"field": "doc_id", "op": "not_in", "values": ["n-01", "n-11"]},
    {
        "op": "any_of",
        "any_of": [
            {"field": "team", "op": "eq", "value": "identity"},
            {"field": "severity", "op": "range", "gte": 3},
            {"field": "folder", "op": "prefix", "value": "post"},
        ],
    },
    {"op": "any_of", "any_of": [{"field": "team", "op": "ne", "value": "payments"}, {"field": "tags", "op": "exists"}]},
    {"op": "any_of", "any_of": [{"field": "opened", "op": "exists"}, {"field": "resolved", "op": "eq", "value": True}]},
)
"""Each case names what it checks by its field: ``team``, ``severity``, ``tags`` … are absent
from some rows; ``folder`` holds the awkward characters."""

BACKENDS = ("tantivy", "lancedb", "graph", "milvus-flat", "milvus-hnsw")


@pytest.fixture(scope="module")
def ops_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ops") / "index"
    build_index(OPS_CORPUS, out)
    return out


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, Any]]:
    """The corpus's own rows: chunk id -> metadata, as ingest read them."""
    return {c.chunk_id: dict(c.metadata) for c in load_corpus(OPS_CORPUS).chunks}


@pytest.fixture(scope="module")
def ops_adapters(ops_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Adapter]]:
    found: dict[str, Adapter] = dict(Engine.open(ops_index).adapters)
    folders = []
    if milvus_available():
        from milvus_lite import server_manager_instance

        from backends.milvus.adapter import LITE_FILE, MilvusAdapter, lance_vectors

        corpus = load_corpus(OPS_CORPUS)
        vectors = lance_vectors(ops_index, corpus)
        for index_type in ("FLAT", "HNSW"):
            folder = tmp_path_factory.mktemp("ops-milvus") / index_type.lower()
            MilvusAdapter.build(corpus, folder, index_type=index_type, vectors=vectors)
            found[f"milvus-{index_type.lower()}"] = MilvusAdapter.open(folder)
            folders.append(folder)
    try:
        yield found
    finally:
        for name, adapter in found.items():
            if name.startswith("milvus-"):
                adapter.close()  # type: ignore[attr-defined]
        for folder in folders:
            server_manager_instance.release_server(str(folder / "milvus" / LITE_FILE))


def _query(contract: Contract, rows: dict[str, dict[str, Any]]) -> Query:
    ids = sorted({str(m["doc_id"]) for m in rows.values()})
    if contract.rsc_id == "graph.traverse":
        return Query.model_validate({"ids": ["n-01"], "pattern": {"direction": "out", "depth": 8}})
    if contract.rsc_id == "graph.neighbors":
        return Query.model_validate({"ids": ["n-04"], "pattern": {"direction": "both"}})
    if contract.rsc_id.startswith("graph.") or contract.rsc_id == "tantivy.exact":
        return Query(ids=tuple(ids))
    return Query(text=TEXT)


def _scan(adapter: Adapter, contract: Contract, query: Query, flt: Filter | None = None) -> list[str]:
    postfilter = flt is not None and any(
        s.support is FilterSupportClass.POSTFILTER_ONLY for s in contract.filter_supports(flt)
    )
    request = ScanRequest(
        obligation="ops",
        rsc_id=contract.rsc_id,
        rsc_version=contract.version,
        backend=contract.backend,
        mode=contract.mode,
        query=query,
        k=50,
        pushed=() if flt is None or postfilter else (flt,),
        residual=(flt,) if flt is not None and postfilter else (),
    )
    result = anyio.run(adapter.scan, request)
    if flt is not None:
        assert all(flt.matches(h.metadata) for h in result.hits), f"{contract.rsc_id}: a hit fails {flt.describe()}"
    return [h.chunk_id for h in result.hits]


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_operator_against_the_corpus_rows(
    backend: str, ops_adapters: dict[str, Adapter], rows: dict[str, dict[str, Any]]
) -> None:
    if backend not in ops_adapters:
        pytest.skip("the race[milvus] extra is not installed")
    adapter = ops_adapters[backend]
    checked = 0
    for contract in adapter.index_contracts():
        query = _query(contract, rows)
        unfiltered = _scan(adapter, contract, query)
        assert unfiltered, f"{contract.rsc_id}: the query finds nothing"
        exact = contract.coverage.claim is not CoverageClaim.APPROXIMATE
        for case in CASES:
            flt = Filter.model_validate(case)
            assert contract.applies(flt), f"{contract.rsc_id} declares no support for {flt.describe()}"
            got = _scan(adapter, contract, query, flt)
            # The direct evaluation: the corpus's metadata of each row the unfiltered scan ranked.
            expected = [chunk for chunk in unfiltered if flt.matches(rows[chunk])]
            if exact and contract.prefilters_exactly(flt):
                assert got == expected, f"{contract.rsc_id}: {flt.describe()}"
            else:
                assert set(got) <= {c for c in rows if flt.matches(rows[c])}, f"{contract.rsc_id}: {flt.describe()}"
            checked += 1
    assert checked == len(CASES) * len(adapter.index_contracts())


def test_null_semantics_are_sql_s(rows: dict[str, dict[str, Any]]) -> None:
    """The reference itself: a row without the field passes neither ``ne`` nor ``not_in``."""
    no_team = {c for c, m in rows.items() if "team" not in m}
    assert no_team, "the corpus has rows without a team"
    for case in (
        {"field": "team", "op": "ne", "value": "payments"},
        {"field": "team", "op": "not_in", "values": ["x"]},
    ):
        flt = Filter.model_validate(case)
        assert not any(flt.matches(rows[c]) for c in no_team)
    exists = Filter.model_validate({"field": "team", "op": "exists"})
    assert {c for c in rows if exists.matches(rows[c])} == set(rows) - no_team


def _plan(hard_filter: dict[str, Any], contract: str) -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "o1",
        "obligations": [
            {
                "id": "o1",
                "kind": "seek_support",
                "query": {"text": TEXT},
                "query_class": "conceptual",
                "k": 5,
                "hard_filters": [hard_filter],
                "allow_contracts": [contract],
                "required_coverage": "heuristic",
            }
        ],
        "operators": [],
    }


GROUP = CASES[-3]


def test_a_group_applied_after_ranking_never_claims_exhaustive(ops_index: Path) -> None:
    """I4 for groups: on the postfilter contract the group is a residual postfilter (heuristic,
    with its gap); on the flat prefilter it is pushed exactly."""
    engine = Engine.open(ops_index)
    post = engine.run_sync(_plan(GROUP, "lancedb.ann_postfilter")).obligations[0]
    assert post.search_coverage is SearchCoverage.HEURISTIC
    flat = engine.run_sync(_plan(GROUP, "lancedb.flat_prefilter")).obligations[0]
    assert flat.search_coverage is SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT
    explained = engine.plan_sync(_plan(GROUP, "lancedb.ann_postfilter")).model_dump_json()
    assert "residual_postfilter" in explained
    gaps = engine.run_sync(_plan(GROUP, "lancedb.ann_postfilter")).gaps
    assert all(g.kind is not GapKind.UNSUPPORTED_FILTER for g in gaps)


def test_a_group_is_one_filter_whatever_the_order_of_its_members(ops_index: Path) -> None:
    engine = Engine.open(ops_index)
    swapped = {**GROUP, "any_of": list(reversed(GROUP["any_of"]))}
    first = engine.plan_sync(_plan(GROUP, "tantivy.bm25"))
    assert first.fingerprints == engine.plan_sync(_plan(swapped, "tantivy.bm25")).fingerprints
    assert first.model_dump_json() == engine.plan_sync(_plan(swapped, "tantivy.bm25")).model_dump_json()


def test_the_search_api_writes_every_operator(ops_index: Path, rows: dict[str, dict[str, Any]]) -> None:
    where = (Field("team") != "payments") | Field("folder").startswith("runbooks/") | Field("tags").exists()
    where = where & Field("severity").not_in([4])
    with Engine.open(ops_index) as engine:
        receipt = engine.search_sync(TEXT, k=50, where=where, strategy="lexical")
    group = Filter.model_validate(where.filters[0])
    rest = Filter.model_validate(where.filters[1])
    found = {h.chunk_id for item in receipt.evidence for h in item.hits}
    expected = {c for c, m in rows.items() if group.matches(m) and rest.matches(m)}
    assert found == expected and found


BAD = (
    ({"field": "team", "op": "bogus", "value": "x"}, "op"),
    ({"op": "any_of", "any_of": []}, "any_of"),
    ({"field": "opened", "op": "prefix", "value": "2025"}, "opened"),
    ({"field": "team", "op": "exists", "value": "x"}, "team"),
    ({"field": "severity", "op": "ne", "value": "two"}, "severity"),
    (
        {"op": "any_of", "any_of": [{"field": "team", "op": "eq", "value": "x"}, {"field": "nope", "op": "exists"}]},
        "nope",
    ),
)


@pytest.mark.parametrize(("bad", "named"), BAD)
def test_a_bad_filter_is_bad_input_naming_node_and_field(
    bad: dict[str, Any], named: str, ops_index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan(bad, "tantivy.bm25")))
    retained = tmp_path / "retained"
    assert main(["run", str(plan), "--index", str(ops_index), "--retain", str(retained)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "o1" in err[0] and named in err[0], err
    assert not retained.exists()
