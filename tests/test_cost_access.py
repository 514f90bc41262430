"""The cost model per access kind (``planner/access.py``): what a candidate is for an exact scan,
an ANN probe, a graph walk and a remote call, and where the priors came from."""

from __future__ import annotations

import pytest

from planner import Statistics, estimate_scan
from planner.access import PRIOR_DEGREE, kind_of
from race.engine import known_contracts
from rsc import BackendStatistics, Contract, Filter, GraphPattern, Query
from tests.conftest import ROOT


def _contract(rsc_id: str) -> Contract:
    from rsc import load_contract

    [path] = list((ROOT / "backends").glob(f"*/rsc/{rsc_id}.json"))
    return load_contract(path)


def _stats(backend: str, rows: int, **access: float) -> Statistics:
    counts = {"doc_type": {"a": rows // 10, "b": rows - rows // 10}}
    return Statistics(
        backends={backend: BackendStatistics(backend=backend, rows=rows, value_counts=counts, access=access)}
    )


def test_every_contract_has_a_kind_and_measured_priors_name_their_source() -> None:
    kinds = {c.rsc_id: kind_of(c) for c in known_contracts()}
    assert kinds["lancedb.exact_matrix"] == "exact" and kinds["lancedb.ann_prefilter"] == "ann"
    assert kinds["graph.traverse"] == "graph" and kinds["tantivy.bm25"] == "exact"
    assert kind_of(_contract("remote.bm25")) == "remote"
    assert kind_of(_contract("milvus.flat_prefilter")) == "exact" and kind_of(_contract("milvus.ann_filtered")) == "ann"
    measured = ("lancedb.exact_matrix", "lancedb.ann_prefilter", "tantivy.bm25", "graph.traverse")
    for rsc_id in (*measured, "milvus.flat_prefilter", "milvus.ann_filtered"):
        assert _contract(rsc_id).cost.source.startswith("benchmarks/bench_cost_priors.py")
    assert _contract("remote.exact").cost.source.startswith("benchmarks/bench_remote.py")


def test_ann_counts_the_rows_of_the_probed_partitions() -> None:
    ann = _contract("lancedb.ann_prefilter")
    stats = _stats("lancedb", 1_000_000, ann_partitions=1000.0, ann_probes=63.0)
    est = estimate_scan(ann, k=10, pushed=(), stats=stats)
    assert est.candidates == 63_000 and "63/1000 partitions probed" in est.access
    price = ann.cost.base_latency_ms + 63_000 * ann.cost.per_candidate_us / 1000.0
    assert est.cost_ms == pytest.approx(price + ann.model_calls * stats.model_call_ms)
    # A filter keeping 10 % needs k / 0.1 rows at least: fewer than the probes read here.
    filtered = estimate_scan(ann, k=10, pushed=(Filter(field="doc_type", value="a"),), stats=stats)
    assert filtered.candidates == 63_000
    # At 1,000 rows probing 1/16 of 32 partitions reads fewer than k / selectivity: widened.
    small = _stats("lancedb", 1_000, ann_partitions=32.0, ann_probes=2.0)
    widened = estimate_scan(ann, k=10, pushed=(Filter(field="doc_type", value="a"),), stats=small)
    assert widened.candidates == 100
    # Without IVF facts the prior formula stands, and explain says so.
    bare = estimate_scan(ann, k=10, pushed=(), stats=_stats("lancedb", 1_000_000))
    assert "no IVF facts" in bare.access and bare.candidates == 10_000


def test_exact_counts_rows_times_selectivity() -> None:
    matrix = _contract("lancedb.exact_matrix")
    stats = _stats("lancedb", 1_000_000)
    est = estimate_scan(matrix, k=10, pushed=(Filter(field="doc_type", value="a"),), stats=stats)
    assert est.candidates == 100_000 and est.access == "exact scan: rows x selectivity"


@pytest.mark.parametrize(
    ("rsc_id", "depth", "direction", "expected"),
    [
        ("graph.identity", None, "out", 2.0),  # a lookup: one node a seed
        ("graph.neighbors", None, "out", 2 * (1 + 3.0)),
        ("graph.traverse", 2, "out", 2 * (1 + 3.0 + 9.0)),
        ("graph.traverse", 3, "out", 2 * (1 + 3.0 + 9.0 + 27.0)),
        ("graph.traverse", 2, "both", 2 * (1 + 6.0 + 36.0)),
    ],
)
def test_graph_walks_count_the_nodes_reached_from_the_mean_degree(
    rsc_id: str, depth: int | None, direction: str, expected: float
) -> None:
    contract = _contract(rsc_id)
    pattern = GraphPattern(depth=depth, direction=direction) if depth else None  # type: ignore[arg-type]
    query = Query(entities=("a", "b"), pattern=pattern)
    est = estimate_scan(contract, k=10, pushed=(), stats=_stats("graph", 100_000, mean_degree=3.0), query=query)
    assert est.candidates == expected and "mean degree 3" in est.access
    hits = min(10.0, expected - (2 if rsc_id != "graph.identity" else 0))
    cost = (
        contract.cost.base_latency_ms
        + (expected * contract.cost.per_candidate_us + hits * contract.cost.per_hit_us) / 1e3
    )
    assert est.cost_ms == pytest.approx(cost, abs=1e-6)


def test_graph_walks_are_capped_by_the_graph_and_the_node_budget() -> None:
    walk = _contract("graph.traverse")
    deep = Query(entities=("a",), pattern=GraphPattern(depth=8, node_budget=500))
    capped = estimate_scan(walk, k=10, pushed=(), stats=_stats("graph", 100_000, mean_degree=3.0), query=deep)
    assert capped.candidates == 500
    small = estimate_scan(walk, k=10, pushed=(), stats=_stats("graph", 89, mean_degree=3.0), query=deep)
    assert small.candidates == 89
    # No degree statistics: the prior degree, said in explain.
    guess = estimate_scan(walk, k=10, pushed=(), stats=_stats("graph", 100_000), query=deep)
    assert f"assumed {PRIOR_DEGREE:g}" in guess.access and guess.candidates == 500


def test_remote_pays_one_round_trip() -> None:
    remote = _contract("remote.bm25")
    est = estimate_scan(remote, k=10, pushed=(), stats=_stats("remote", 1_000_000))
    assert "1 round trip" in est.access
    assert est.cost_ms == pytest.approx(remote.cost.base_latency_ms + 1_000_000 * remote.cost.per_candidate_us / 1e3)
