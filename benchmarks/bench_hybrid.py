"""Hybrid search through RACE beside LanceDB's native hybrid search.

RACE runs a ``broad_question`` as a tantivy BM25 leg and a LanceDB vector leg at the same
time and fuses them by RRF. The peer is LanceDB's own hybrid query (its full-text index plus
its vector search, fused by its default RRF reranker) on a copy of the same table, with the
same filter and k. Both embed the query with the same local model on every call, as both
must. Used by ``benchmarks.bench_executor``.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio.to_thread
import lancedb
from lancedb.index import FTS

from backends.lancedb.query import TABLE, VECTOR
from race.engine import Engine
from race.state.cache import ResultCache

QUERY = "the broker ran out of memory and was killed"
FILTER_SQL = "doc_type = 'incident'"
K = 10


def hybrid_plan() -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "h",
        "obligations": [
            {
                "id": "h",
                "kind": "seek_support",
                "query": {"text": QUERY},
                "query_class": "broad_question",
                "hard_filters": [{"field": "doc_type", "value": "incident"}],
                "k": K,
            }
        ],
    }


def _summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000.0 for s in samples)
    return {"p50_ms": round(statistics.median(ms), 4), "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 4), "n": len(ms)}


async def bench_hybrid(engine: Engine, runs: int) -> dict[str, Any]:
    lance = engine.adapters["lancedb"]
    source = lance._path  # type: ignore[attr-defined]
    embedder = lance._embedder  # type: ignore[attr-defined]
    copy = Path(tempfile.mkdtemp(prefix="race-native-hybrid-")) / "lancedb"
    shutil.copytree(source, copy)
    table = lancedb.connect(str(copy)).open_table(TABLE)
    table.create_index("text", config=FTS())

    def native_call() -> list[str]:
        vector = embedder.embed([QUERY])[0]
        found = (
            table.search(query_type="hybrid", vector_column_name=VECTOR)
            .vector(vector)
            .text(QUERY)
            .where(FILTER_SQL, prefilter=True)
            .limit(K)
            .to_arrow()
        )
        return [str(c) for c in found.column("chunk_id").to_pylist()]

    plan = engine.parse(hybrid_plan())
    explain = await engine.plan(plan)

    async def race() -> None:
        engine.result_cache = ResultCache()
        engine.clear_receipt_cache()
        # The peer embeds the query on every call; so does RACE here (no kept vector).
        lance.forget_query_vectors()  # type: ignore[attr-defined]
        await engine.run(plan)

    async def native() -> None:
        await anyio.to_thread.run_sync(native_call)

    for _ in range(3):
        await race()
        await native()
    t_race: list[float] = []
    t_native: list[float] = []
    for i in range(max(10, runs // 5)):
        order = ((race, t_race), (native, t_native)) if i % 2 == 0 else ((native, t_native), (race, t_race))
        for call, into in order:
            start = time.perf_counter()
            await call()
            into.append(time.perf_counter() - start)
    shutil.rmtree(copy.parent, ignore_errors=True)
    race_s, native_s = _summary(t_race), _summary(t_native)
    legs = [leg.rsc for leg in getattr(explain.physical, "legs", ())]
    return {
        "race": race_s,
        "native": native_s,
        "race_legs": legs,
        "ratio_p50": round(race_s["p50_ms"] / native_s["p50_ms"], 3),
        "target": "race p50 <= native hybrid p50",
        "pass": race_s["p50_ms"] <= native_s["p50_ms"],
    }
