"""The shared conformance suite (test_conformance.py) over the second fixture corpus
(fixtures/corpus2: tickets with other fields, a ``keyword[]`` field, integers, floats,
booleans and a custom relation). Every check of the suite runs here against the contracts
``race index`` GENERATED from that corpus's schema, with sample requests that filter on its
own fields (fixtures/cases/conformance_corpus2.json); the suite's functions are the same
objects, collected again with this module's ``adapter``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from backends import Adapter
from backends.ingest.schema import load_schema
from race.engine import Engine
from tests.backends import test_conformance as suite
from tests.backends.test_conformance import (  # noqa: F401 - collected here over corpus2
    test_every_contract_has_a_sample_and_names_its_backend,
    test_filter_support_classes_are_honest,
    test_ordering_score_kind_model_calls_and_custody,
    test_random_access_scores_named_rows_as_sorted_access_does,
    test_same_request_same_result,
    test_sorted_access_is_the_exact_top_d,
)
from tests.conftest import FIXTURES

SAMPLES2: dict[str, Any] = json.loads((FIXTURES / "cases" / "conformance_corpus2.json").read_text())["contracts"]


@pytest.fixture(params=suite.LOCAL_BACKENDS)
def adapter(request: pytest.FixtureRequest, corpus2_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Adapter:
    monkeypatch.setattr(suite, "SAMPLES", SAMPLES2)
    name = request.param
    assert name in corpus2_engine.adapters, f"backend {name} is not built into the corpus2 index"
    found: Adapter = corpus2_engine.adapters[name]
    return found


def test_the_suite_runs_over_generated_contracts(adapter: Adapter) -> None:
    """The contracts checked here are the index's own: the corpus2 schema's filterable fields,
    none of the bundled corpus's, each sample filter on a field the contract declares."""
    schema = load_schema(FIXTURES / "corpus2")
    shipped = {c.rsc_id: c for c in adapter.contracts()}
    for contract in adapter.index_contracts():
        declared = set(contract.filters) - {"doc_id", "chunk_id"}
        if set(shipped[contract.rsc_id].filters) - {"doc_id", "chunk_id"}:
            assert declared == set(schema.filterable()), contract.rsc_id
        assert not declared & {"doc_type", "component", "authority"}, contract.rsc_id
        for flt in SAMPLES2[contract.rsc_id].get("filters", []):
            assert flt["field"] in contract.filters, f"{contract.rsc_id}: sample filter on {flt['field']}"
