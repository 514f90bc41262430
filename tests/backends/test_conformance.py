"""One conformance suite over every backend: each RSC's claims are checked against what
its adapter actually does (ordering, score kind, model calls, custody, and above all the
filter support class of every field it declares)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from backends import Adapter
from race.engine import Engine
from rsc import (
    Contract,
    CoverageClaim,
    Filter,
    FilterOp,
    FilterSupportClass,
    Query,
    ScanRequest,
    ScanResult,
)
from tests.conftest import FIXTURES

SAMPLES: dict[str, Any] = json.loads((FIXTURES / "cases" / "conformance.json").read_text())["contracts"]
SAMPLES.update(json.loads((FIXTURES / "cases" / "conformance_attached.json").read_text())["contracts"])
LOCAL_BACKENDS = ["tantivy", "lancedb", "graph"]
MILVUS_BACKENDS = {"milvus-flat": "milvus_flat", "milvus-hnsw": "milvus_ann"}
"""Milvus collections (milvus-lite, started by tests/backends/conftest.py), one per index type."""
ATTACHED_BACKENDS = {
    "attached-lancedb": "attached_lance",
    "attached-tantivy": "attached_tantivy",
    "attached-milvus": "attached_milvus",
}
"""Catalog instances RACE did not build (tests/backends/attached.py)."""
FIXTURE_BACKENDS = {**MILVUS_BACKENDS, **ATTACHED_BACKENDS}


@pytest.fixture(params=[*LOCAL_BACKENDS, *FIXTURE_BACKENDS])
def adapter(request: pytest.FixtureRequest, session_engine: Engine) -> Adapter:
    name = request.param
    if name in FIXTURE_BACKENDS:
        found: Adapter = request.getfixturevalue(FIXTURE_BACKENDS[name])
        return found
    assert name in session_engine.adapters, f"backend {name} is not built into the test index"
    return session_engine.adapters[name]


def _request(
    contract: Contract, *, k: int | None = None, pushed: tuple[Filter, ...] = (), residual: tuple[Filter, ...] = ()
) -> ScanRequest:
    sample = SAMPLES[contract.rsc_id]
    return ScanRequest(
        obligation="conformance",
        rsc_id=contract.rsc_id,
        rsc_version=contract.version,
        backend=contract.backend,
        mode=contract.mode,
        query=Query.model_validate(sample["query"]),
        k=k or sample.get("k", 5),
        pushed=pushed,
        residual=residual,
        params=sample.get("params", {}),
    )


def _scan(adapter: Adapter, request: ScanRequest) -> ScanResult:
    return anyio.run(adapter.scan, request)


def test_every_contract_has_a_sample_and_names_its_backend(adapter: Adapter) -> None:
    # The contracts shipped, and those written for the index the adapter opened (which the engine plans with).
    contracts = (*adapter.contracts(), *adapter.index_contracts())
    assert adapter.index_contracts()
    for contract in contracts:
        assert contract.backend == adapter.backend
        assert contract.rsc_id in SAMPLES, f"fixtures/cases/conformance.json lacks {contract.rsc_id}"


def test_ordering_score_kind_model_calls_and_custody(adapter: Adapter) -> None:
    generation = adapter.generation()
    for contract in adapter.index_contracts():
        request = _request(contract)
        result = _scan(adapter, request)
        assert result.hits, f"{contract.rsc_id}: the sample query finds nothing"
        assert len(result.hits) <= request.k
        # A scan makes at most the calls its contract declares; a query it already embedded, none.
        assert result.model_calls <= contract.model_calls
        if contract.model_calls and hasattr(adapter, "forget_query_vectors"):
            adapter.forget_query_vectors()
            assert _scan(adapter, request).model_calls == contract.model_calls
        assert result.generation == generation
        assert [h.custody.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
        for hit in result.hits:
            c = hit.custody
            assert c.score_kind is contract.score_kind
            assert c.rsc == contract.ref and c.backend == contract.backend
            assert c.index_generation == generation
            assert c.source_hash.startswith("sha256:")
            assert c.line_start <= c.line_end
        scores = [h.custody.score for h in result.hits]
        if contract.ordering == "score_desc":
            assert scores == sorted(scores, reverse=True)
        elif contract.ordering in ("distance_asc", "hops_asc"):
            assert scores == sorted(scores)
        else:
            keys = [h.key for h in result.hits]
            assert keys == sorted(keys)


def test_same_request_same_result(adapter: Adapter) -> None:
    for contract in adapter.index_contracts():
        request = _request(contract)
        assert _scan(adapter, request) == _scan(adapter, request)


def _filters(contract: Contract) -> list[Filter]:
    return [Filter.model_validate(f) for f in SAMPLES[contract.rsc_id].get("filters", [])]


def test_filter_support_classes_are_honest(adapter: Adapter) -> None:
    """native_prefilter_exact must return exactly the filtered top-k; anything weaker must at
    least never return a row that fails the filter."""
    rows = max(adapter.statistics().rows, 1)
    checked = 0
    for contract in adapter.index_contracts():
        for flt in _filters(contract):
            support = contract.filter_support(flt.field)
            assert support.support is not FilterSupportClass.UNSUPPORTED, f"sample filter on {flt.field} unsupported"
            request = _request(contract)
            if support.support is FilterSupportClass.POSTFILTER_ONLY:
                result = _scan(adapter, _request(contract, residual=(flt,)))
            else:
                result = _scan(adapter, _request(contract, pushed=(flt,)))
            assert all(flt.matches(h.metadata) for h in result.hits), f"{contract.rsc_id}: a row fails {flt.describe()}"
            if support.support is FilterSupportClass.NATIVE_PREFILTER_EXACT:
                everything = _scan(adapter, _request(contract, k=min(rows, 10_000)))
                expected = [h for h in everything.hits if flt.matches(h.metadata)][: request.k]
                assert [h.key for h in result.hits] == [h.key for h in expected], (
                    f"{contract.rsc_id}: filtered top-k is not the unfiltered ranking restricted to {flt.describe()}"
                )
                assert [h.custody.score for h in result.hits] == pytest.approx([h.custody.score for h in expected])
            checked += 1
    assert checked, "no filter was checked for this backend"


def test_sorted_access_is_the_exact_top_d(adapter: Adapter) -> None:
    """I9: a contract that declares sorted access answers depth d with the first d rows of any
    deeper answer, scores included, so reading deeper never reorders what was read."""
    checked = 0
    for contract in adapter.index_contracts():
        if not contract.early_stop.sorted_access:
            continue
        shallow = _scan(adapter, _request(contract, k=3))
        deep = _scan(adapter, _request(contract, k=12))
        pairs = [(h.key, h.custody.score) for h in deep.hits]
        assert [(h.key, h.custody.score) for h in shallow.hits] == pairs[: len(shallow.hits)], contract.rsc_id
        assert {h.custody.access for h in deep.hits} <= {"sorted"}
        assert len(shallow.hits) == min(3, len(deep.hits)), contract.rsc_id
        checked += 1
    if not checked and all(c.coverage.claim is CoverageClaim.APPROXIMATE for c in adapter.index_contracts()):
        pytest.skip(f"{adapter.backend}: an index served only approximately has no exact order to read")
    assert checked, f"{adapter.backend}: no contract declares sorted access"


def _random_access(contract: Contract, chunk_ids: list[str], pushed: tuple[Filter, ...] = ()) -> ScanRequest:
    base = _request(contract, k=len(chunk_ids), pushed=pushed)
    identity = Filter(field="chunk_id", op=FilterOp.IN, values=tuple(chunk_ids))
    return base.model_copy(update={"pushed": (*base.pushed, identity), "params": {**base.params, "access": "random"}})


def test_random_access_scores_named_rows_as_sorted_access_does(adapter: Adapter) -> None:
    """I9: a contract that declares random access scores the rows it is asked about exactly
    (bit for bit what sorted access reports for them), and only rows its filters admit."""
    if not any(c.early_stop.random_access for c in adapter.index_contracts()):
        pytest.skip(f"no {adapter.backend} contract declares random access")
    for contract in adapter.index_contracts():
        if not contract.early_stop.random_access:
            continue
        assert contract.filter_support("chunk_id").support is not FilterSupportClass.UNSUPPORTED, contract.rsc_id
        references = [contract]
        if not contract.early_stop.sorted_access and contract.score_calibration is not None:
            # Exact scores come from the exact contracts of the same calibration. Two exact
            # implementations of one calibration agree to float32 rounding (LanceDB's flat scan
            # and the exact matrix); the random access equals one of them bit for bit.
            references = [
                c
                for c in adapter.index_contracts()
                if c.early_stop.sorted_access and c.score_calibration == contract.score_calibration
            ]
        answers = [_scan(adapter, _request(reference, k=40)) for reference in references]
        everything = answers[0]
        asked = [h.chunk_id for h in everything.hits][::3]
        found = _scan(adapter, _random_access(contract, asked))
        assert sorted(h.chunk_id for h in found.hits) == sorted(asked), contract.rsc_id
        bit_for_bit = []
        for reference, answer in zip(references, answers, strict=True):
            scores = {h.key: h.custody.score for h in answer.hits}
            assert all(h.key in scores for h in found.hits), f"{reference.rsc_id} ranks other rows"
            assert [h.custody.score for h in found.hits] == pytest.approx(
                [scores[h.key] for h in found.hits], rel=0, abs=2.0**-22
            ), f"{contract.rsc_id} against {reference.rsc_id}"
            if all(h.custody.score == scores[h.key] for h in found.hits):
                bit_for_bit.append(reference.rsc_id)
        assert bit_for_bit, f"{contract.rsc_id}: random access equals no exact contract's scores bit for bit"
        for hit in found.hits:
            assert hit.custody.access == "random", "a random-access rank is not the input's rank; custody says so"
        for flt in _filters(contract):
            if contract.filter_support(flt.field).support is FilterSupportClass.POSTFILTER_ONLY:
                continue
            kept = _scan(adapter, _random_access(contract, asked, pushed=(flt,)))
            expected = sorted(h.chunk_id for h in everything.hits if h.chunk_id in asked and flt.matches(h.metadata))
            assert sorted(h.chunk_id for h in kept.hits) == expected, f"{contract.rsc_id}: {flt.describe()}"


OPERATOR_CASES: tuple[dict[str, Any], ...] = (
    {"field": "doc_type", "op": "ne", "value": "adr"},
    {"field": "component", "op": "not_in", "values": ["storage", "security"]},
    {"field": "version", "op": "prefix", "value": "3."},
    {"field": "doc_id", "op": "prefix", "value": "adr-"},
    {"field": "status", "op": "exists"},
    {"field": "date", "op": "ne", "value": "2024-12-10"},
    {
        "op": "any_of",
        "any_of": [
            {"field": "doc_type", "op": "eq", "value": "adr"},
            {"field": "component", "op": "eq", "value": "security"},
        ],
    },
    {
        "op": "any_of",
        "any_of": [
            {"field": "date", "op": "range", "gte": "2025-01-01"},
            {"field": "version", "op": "prefix", "value": "4"},
        ],
    },
    # Quotes never close a literal: the first matches nothing, the second every row with the field.
    {"field": "doc_type", "op": "eq", "value": "adr' OR '1'='1\" or doc_type != \""},
    {"field": "doc_type", "op": "ne", "value": "adr' OR '1'='1\" or doc_type != \""},
)
"""Filters with the operators beyond eq/in/range, over the bundled corpus's fields."""


def test_every_operator_is_applied_as_declared_or_declared_impossible(adapter: Adapter) -> None:
    """Each operator case on each contract: a contract that declares it applies it (every hit
    passes the direct evaluation ``Filter.matches``; an exact prefilter answers exactly the
    unfiltered ranking restricted to the rows that pass); one that does not declare it is never
    asked (the planner makes it ineligible, I4)."""
    rows = max(adapter.statistics().rows, 1)
    applied = declared_impossible = 0
    for contract in adapter.index_contracts():
        everything = None
        for case in OPERATOR_CASES:
            flt = Filter.model_validate(case)
            if not contract.applies(flt):
                declared_impossible += 1
                continue
            postfilter = any(s.support is FilterSupportClass.POSTFILTER_ONLY for s in contract.filter_supports(flt))
            request = _request(contract, residual=(flt,)) if postfilter else _request(contract, pushed=(flt,))
            result = _scan(adapter, request)
            assert all(flt.matches(h.metadata) for h in result.hits), f"{contract.rsc_id}: a row fails {flt.describe()}"
            if contract.prefilters_exactly(flt):
                everything = everything or _scan(adapter, _request(contract, k=min(rows, 10_000)))
                expected = [h.key for h in everything.hits if flt.matches(h.metadata)][: request.k]
                assert [h.key for h in result.hits] == expected, f"{contract.rsc_id}: {flt.describe()}"
            applied += 1
    assert applied + declared_impossible == len(OPERATOR_CASES) * len(adapter.index_contracts())
    if not applied:
        # A backend that applies none of them (an attached index RACE did not build) declares none.
        new_ops = {FilterOp.NE, FilterOp.NOT_IN, FilterOp.PREFIX, FilterOp.EXISTS, FilterOp.ANY_OF}
        declared = {op for c in adapter.index_contracts() for s in c.filters.values() for op in s.ops}
        assert not declared & new_ops, f"{adapter.backend} declares {sorted(declared & new_ops)} and applies none"
