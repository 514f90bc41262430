"""A filter that keeps 1 to 12 rows never puts a non-finite distance in a receipt, on any
vector path: LanceDB flat, ANN with prefilter and postfilter, the exact matrix (each through
a plan run by the engine), and Milvus FLAT and HNSW (through their scans)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import anyio
import lancedb
import pytest

from backends.lancedb.query import TABLE
from race.engine import Engine
from rsc import Filter, FilterOp, Query, ScanRequest
from tests.backends.conftest import milvus_available

LANCE_CONTRACTS = (
    "lancedb.flat_prefilter",
    "lancedb.ann_prefilter",
    "lancedb.ann_postfilter",
    "lancedb.exact_matrix",
)
QUERY = "the broker ran out of memory and was killed"


def _tiny_filters(index_dir: Path) -> dict[int, tuple[str, ...]]:
    """For each n in 1..12, n chunk ids of the index's own table, spread over its documents."""
    table = lancedb.connect(str(index_dir / "lancedb")).open_table(TABLE)
    ids = sorted(str(c) for c in table.to_arrow().column("chunk_id").to_pylist())[::17]
    assert len(ids) >= 12
    return {n: tuple(ids[:n]) for n in range(1, 13)}


def _plan(chunks: tuple[str, ...], contract: str) -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [
            {
                "id": "o",
                "kind": "seek_support",
                "query": {"text": QUERY},
                "query_class": "conceptual",
                "k": 10,
                "hard_filters": [{"field": "chunk_id", "op": "in", "values": list(chunks)}],
                "allow_contracts": [contract],
                "required_coverage": "heuristic",
            }
        ],
        "operators": [],
    }


@pytest.mark.parametrize("contract", LANCE_CONTRACTS)
def test_lancedb_receipts_of_tiny_filters_are_finite(index_dir: Path, contract: str) -> None:
    engine = Engine.open(index_dir)
    answered = 0
    for n, chunks in _tiny_filters(index_dir).items():
        receipt = engine.run_sync(_plan(chunks, contract))
        hits = [h for item in receipt.evidence for h in item.hits]
        assert all(h.custody.rsc.startswith(contract) for h in hits)
        assert all(h.chunk_id in chunks for h in hits)
        assert all(math.isfinite(h.custody.score) for h in hits), (contract, n)
        assert "NaN" not in receipt.model_dump_json() and "Infinity" not in receipt.model_dump_json()
        if contract != "lancedb.ann_postfilter":
            # Every path but the postfilter finds all n rows (or k of them).
            assert len(hits) == min(10, n), (contract, n, len(hits))
        answered += len(hits)
    # A postfilter keeps what survives the filter out of its top k: here, usually nothing.
    assert answered > 0 or contract == "lancedb.ann_postfilter"


@pytest.mark.skipif(not milvus_available(), reason="the race[milvus] extra is not installed")
@pytest.mark.parametrize("instance", ["milvus_flat", "milvus_ann"])
def test_milvus_scans_of_tiny_filters_are_finite(index_dir: Path, instance: str, request: Any) -> None:
    adapter = request.getfixturevalue(instance)
    contract = adapter.index_contracts()[0]
    for n, chunks in _tiny_filters(index_dir).items():
        scan = ScanRequest(
            obligation="o",
            rsc_id=contract.rsc_id,
            rsc_version=contract.version,
            backend=contract.backend,
            mode=contract.mode,
            query=Query(text=QUERY),
            k=10,
            pushed=(Filter(field="chunk_id", op=FilterOp.IN, values=chunks),),
        )
        result = anyio.run(adapter.scan, scan)
        assert all(h.chunk_id in chunks for h in result.hits)
        assert all(math.isfinite(h.custody.score) for h in result.hits), (instance, n)
        assert len(result.hits) == min(10, n), (instance, n, len(result.hits))
