"""A second corpus with fields RACE has never heard of (fixtures/corpus2, schema.toml): it
indexes, its contracts are generated from its schema, and plans filter on its fields exactly
on tantivy and on LanceDB, compared with a direct computation over the corpus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backends.ingest.corpus import Corpus, load_corpus
from race.cli.main import main
from race.engine import Engine
from rsc import Filter, FilterSupportClass
from tests.conftest import FIXTURES

CORPUS2 = FIXTURES / "corpus2"

FILTERS: list[dict[str, Any]] = [
    {"field": "team", "value": "payments"},
    {"field": "tenant", "op": "in", "values": ["acme", "initech"]},
    {"field": "severity", "value": 2},
    {"field": "severity", "op": "range", "gte": 2, "lte": 3},
    {"field": "severity", "op": "in", "values": [1, 4]},
    {"field": "tags", "value": "database"},
    {"field": "tags", "op": "in", "values": ["auth", "freshness"]},
    {"field": "opened", "op": "range", "gte": "2025-02-01"},
    {"field": "opened", "value": "2025-01-15"},
    {"field": "resolved", "value": True},
    {"field": "cost", "op": "range", "gte": 100, "lte": 2200.0},
    {"field": "cost", "value": 0},
    {"field": "state", "op": "in", "values": ["open", "duplicate"]},
]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus(CORPUS2)


@pytest.fixture(scope="module")
def index2(corpus2_index: Path) -> Path:
    return corpus2_index


@pytest.fixture(scope="module")
def engine2(corpus2_engine: Engine) -> Engine:
    return corpus2_engine


def _expected(corpus: Corpus, flt: Filter) -> list[str]:
    return sorted(c.chunk_id for c in corpus.chunks if flt.matches(c.metadata))


def _plan(query: dict[str, Any], query_class: str, flt: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [
            {
                "id": "o",
                "kind": "seek_support",
                "query": query,
                "query_class": query_class,
                "k": 100,
                "hard_filters": [flt],
                "required_coverage": "exhaustive_for_declared_fragment",
            }
        ],
        "operators": [],
    }


def _hits(engine: Engine, plan: dict[str, Any]) -> tuple[list[str], set[str], str]:
    receipt = engine.run_sync(plan)
    hits = [h for e in receipt.evidence for h in e.hits]
    (obligation,) = receipt.obligations
    return sorted({h.chunk_id for h in hits}), {h.custody.rsc for h in hits}, obligation.status.value


def test_the_generated_contracts_carry_the_schema_fields(engine2: Engine) -> None:
    contracts = {c.rsc_id: c for c in engine2.contracts()}
    for contract in contracts.values():
        if contract.backend == "remote":
            continue
        assert "doc_type" not in contract.filters
        assert "reporter" not in contract.filters, "a field declared not filterable is never in a contract"
        assert {"team", "tenant", "severity", "tags", "opened", "state", "resolved", "cost"} <= set(contract.filters)
    severity = [op.value for op in contracts["tantivy.bm25"].filters["severity"].ops]
    assert severity == ["eq", "in", "range", "ne", "not_in", "exists", "any_of"]
    # prefix only on a single-valued keyword.
    assert [op.value for op in contracts["tantivy.bm25"].filters["tags"].ops] == [
        "eq",
        "in",
        "ne",
        "not_in",
        "exists",
        "any_of",
    ]
    assert "prefix" in [op.value for op in contracts["tantivy.bm25"].filters["team"].ops]
    flat = contracts["lancedb.flat_prefilter"].filters["opened"]
    assert flat.support is FilterSupportClass.NATIVE_PREFILTER_EXACT
    assert contracts["lancedb.ann_postfilter"].filters["team"].support is FilterSupportClass.POSTFILTER_ONLY


@pytest.mark.parametrize("flt", FILTERS, ids=[f"{f['field']}-{f.get('op', 'eq')}" for f in FILTERS])
def test_tantivy_filters_exactly(flt: dict[str, Any], corpus: Corpus, engine2: Engine) -> None:
    plan = _plan({"ids": list(corpus.doc_ids)}, "identifier", flt)
    found, rscs, status = _hits(engine2, plan)
    assert found == _expected(corpus, Filter.model_validate(flt))
    assert status == "satisfied"
    assert rscs <= {"tantivy.exact@1.1.0"}


@pytest.mark.parametrize("flt", FILTERS, ids=[f"{f['field']}-{f.get('op', 'eq')}" for f in FILTERS])
def test_lancedb_filters_exactly(flt: dict[str, Any], corpus: Corpus, engine2: Engine) -> None:
    plan = _plan({"text": "checkout is slow while the database import runs"}, "conceptual", flt)
    found, rscs, status = _hits(engine2, plan)
    assert found == _expected(corpus, Filter.model_validate(flt))
    assert status == "satisfied"
    # Served by an exact contract: the matrix (the cheaper) or LanceDB's flat scan.
    assert all(r.startswith(("lancedb.exact_matrix@", "lancedb.flat_prefilter@")) for r in rscs), rscs


def test_a_custom_relation_is_traversable(engine2: Engine) -> None:
    graph = engine2.adapters["graph"]
    assert graph.related(["t-101"], "blocks", "in") == {"t-101": ("t-102",)}  # type: ignore[attr-defined]
    # `duplicates` plays the derived_from role: a duplicate is not an independent origin (I13).
    origins = graph.origins(["t-101", "t-104", "t-105"])  # type: ignore[attr-defined]
    assert origins["t-104"] == origins["t-101"] != origins["t-105"]


@pytest.mark.parametrize(
    ("flt", "fragment"),
    [
        ({"field": "severity", "value": "2"}, "'2' is not an integer"),
        ({"field": "opened", "value": "2025-02-30"}, "not a calendar date"),
        ({"field": "resolved", "value": "yes"}, "'yes' is not true or false"),
        ({"field": "reporter", "value": "dana"}, "not filterable"),
    ],
)
def test_a_filter_value_that_does_not_fit_its_field_is_bad_input(
    flt: dict[str, Any], fragment: str, index2: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan({"text": "checkout"}, "lexical", flt)))
    code = main(["plan", str(plan), "--index", str(index2)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and fragment in err and "plan.json" in err, err


def test_rsc_list_of_the_index_names_its_own_fields(index2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rsc", "list", "--index", str(index2)]) == 0
    bm25 = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tantivy.bm25@"))
    assert "severity:native_prefilter_exact" in bm25 and "tags:native_prefilter_exact" in bm25
    assert "doc_type" not in bm25
