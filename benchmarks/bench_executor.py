"""Executor benchmarks: each figure is a ratio of two things measured side by side in one
run, interleaved, so that the shared machine's noise hits both alike.

* ``bm25_leg``   one BM25 leg through ``Engine.run`` (plan cache warm, result cache cold)
                 beside the raw tantivy call it wraps (search, read the top-k rows, on a
                 worker thread as RACE does). Target: RACE p50 <= 1.2 x raw p50 + 1 ms.
* ``four_legs``  four independent legs of 50 ms simulated latency. Target: wall p50 <= 1.3 x 50 ms.
* ``cache_hit``  the same plan again (every generation unchanged) beside a cold run with
                 empty caches. Target: >= 50 x faster.
* ``hybrid``     (when the LanceDB backend is built) a broad_question through RACE (tantivy +
                 LanceDB ANN + RRF) beside LanceDB's native hybrid search on the same table
                 and filter. Target: RACE p50 <= the peer's p50.

    python -m benchmarks.bench_executor [--quick] [--index DIR]

Writes ``benchmarks/out/executor.json`` and ``benchmarks/out/executor.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from backends import Adapter
from planner import scans
from race.engine import Engine
from race.indexing.bundled import ensure_bundled_index
from race.state.cache import ResultCache
from rsc import Contract, ScanRequest, ScanResult, parse_contract

OUT = Path(__file__).parent / "out"
RESULTS = Path(__file__).parent / "results"
SIM_LATENCY_S = 0.050

BM25_PLAN = {
    "schema_version": "race.plan/1",
    "root": "o",
    "obligations": [
        {
            "id": "o",
            "kind": "seek_support",
            "query": {"text": "partition stall raft election quorum"},
            "query_class": "lexical",
            "k": 10,
        }
    ],
}


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000.0 for s in samples]
    return {"p50_ms": round(statistics.median(ms), 4), "p95_ms": round(_p(ms, 0.95), 4), "n": len(ms)}


async def _interleaved(
    runs: int, a: Callable[[], Awaitable[Any]], b: Callable[[], Awaitable[Any]], warmup: int = 5
) -> tuple[list[float], list[float]]:
    for _ in range(warmup):
        await a()
        await b()
    ta, tb = [], []
    for i in range(runs):
        first, second, into_first, into_second = (a, b, ta, tb) if i % 2 == 0 else (b, a, tb, ta)
        start = time.perf_counter()
        await first()
        into_first.append(time.perf_counter() - start)
        start = time.perf_counter()
        await second()
        into_second.append(time.perf_counter() - start)
    return ta, tb


async def bench_bm25_leg(engine: Engine, runs: int) -> dict[str, Any]:
    plan = engine.parse(BM25_PLAN)
    explain = await engine.plan(plan)
    request = scans(explain.physical)[0].request
    adapter = engine.adapters["tantivy"]
    index = adapter._index  # type: ignore[attr-defined]
    query = adapter._text_query(request)  # type: ignore[attr-defined]

    def raw_call() -> list[dict[str, Any]]:
        searcher = index.searcher()
        found = searcher.search(query, limit=request.k)
        return [json.loads(searcher.doc(address)["row"][0]) for _, address in found.hits]

    async def raw() -> None:
        await anyio.to_thread.run_sync(raw_call)

    async def race() -> None:
        engine.result_cache = ResultCache()
        engine.clear_receipt_cache()
        await engine.run(plan)

    t_race, t_raw = await _interleaved(runs, race, raw)
    race_s, raw_s = _summary(t_race), _summary(t_raw)
    limit = 1.2 * raw_s["p50_ms"] + 1.0
    return {
        "race": race_s,
        "raw_tantivy": raw_s,
        "ratio_p50": round(race_s["p50_ms"] / raw_s["p50_ms"], 3),
        "target": "race p50 <= 1.2 x raw p50 + 1 ms",
        "limit_ms": round(limit, 4),
        "pass": race_s["p50_ms"] <= limit,
    }


def _sim_contract(n: int) -> Contract:
    doc = {
        "schema_version": "race.rsc/1",
        "rsc_id": f"sim.leg{n}",
        "version": "1.0.0",
        "backend": f"sim{n}",
        "mode": "sleep",
        "translator_version": "1.0.0",
        "query_classes": ["lexical"],
        "query_parts": ["text"],
        "ordering": "score_desc",
        "score_kind": "bm25",
        "coverage": {"claim": "exhaustive_topk"},
        "filters": {},
        "identity_domain": "chunk",
        "source_domain": "simulated",
        "egress": "local",
        "model_calls": 0,
        "snapshot": {},
        "early_stop": {},
    }
    return parse_contract(json.dumps(doc), where=f"sim{n}")


class SleepingAdapter(Adapter):
    """A backend that answers every request after a fixed latency, with no hits."""

    backend = "sim"

    def __init__(self, n: int) -> None:
        self.n = n
        self.backend = f"sim{n}"  # type: ignore[misc]
        self._contract = _sim_contract(n)

    def contracts(self) -> tuple[Contract, ...]:  # type: ignore[override]
        return (self._contract,)

    @classmethod
    def build(cls, corpus: Any, index_dir: Path, progress: Any = None) -> str:
        raise NotImplementedError

    @classmethod
    def open(cls, index_dir: Path) -> SleepingAdapter:
        raise NotImplementedError

    @property
    def identity(self) -> str:
        return self.backend

    def generation(self) -> str:
        return f"{self.backend}:1"

    async def scan(self, request: ScanRequest) -> ScanResult:
        await anyio.sleep(SIM_LATENCY_S)
        return ScanResult(generation=self.generation(), exhausted=True, total_matches=0)


async def bench_four_legs(runs: int) -> dict[str, Any]:
    adapters: dict[str, Adapter] = {f"sim{n}": SleepingAdapter(n) for n in range(4)}
    engine = Engine(adapters)
    plan = engine.parse(
        {
            "schema_version": "race.plan/1",
            "root": "u",
            "obligations": [
                {
                    "id": f"leg{n}",
                    "kind": "seek_support",
                    "query": {"text": f"leg {n}"},
                    "query_class": "lexical",
                    "allow_contracts": [f"sim.leg{n}"],
                }
                for n in range(4)
            ],
            "operators": [{"id": "u", "op": "union", "inputs": [f"leg{n}" for n in range(4)]}],
        }
    )
    walls = []
    for _ in range(runs):
        engine.result_cache = ResultCache()
        engine.clear_receipt_cache()
        start = time.perf_counter()
        receipt = await engine.run(plan)
        walls.append(time.perf_counter() - start)
        assert sorted(receipt.operational.calls) == [f"sim{n}" for n in range(4)]
    summary = _summary(walls)
    limit = 1.3 * SIM_LATENCY_S * 1000.0
    return {
        "wall": summary,
        "leg_latency_ms": SIM_LATENCY_S * 1000.0,
        "ratio_p50": round(summary["p50_ms"] / (SIM_LATENCY_S * 1000.0), 3),
        "target": "wall p50 <= 1.3 x 50 ms",
        "limit_ms": limit,
        "pass": summary["p50_ms"] <= limit,
    }


async def bench_cache_hit(engine: Engine, plan_doc: dict[str, Any], runs: int) -> dict[str, Any]:
    plan = engine.parse(plan_doc)

    async def cold() -> None:
        engine.result_cache = ResultCache()
        engine.plan_cache = type(engine.plan_cache)()
        engine.clear_receipt_cache()
        for adapter in engine.adapters.values():
            forget = getattr(adapter, "forget_query_vectors", None)
            if forget is not None:
                forget()
        await engine.run(plan)

    async def hit() -> None:
        await engine.run(plan)

    t_cold, t_hit = [], []
    for _ in range(runs):
        start = time.perf_counter()
        await cold()
        t_cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        await hit()
        t_hit.append(time.perf_counter() - start)
    cold_s, hit_s = _summary(t_cold), _summary(t_hit)
    ratio = cold_s["p50_ms"] / hit_s["p50_ms"]
    return {
        "cold": cold_s,
        "hit": hit_s,
        "speedup_p50": round(ratio, 2),
        "target": "hit >= 50 x faster than cold",
        "pass": ratio >= 50.0,
    }


def _markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Executor benchmarks",
        "",
        f"{results['machine']}; {results['runs']} interleaved runs each; fixture corpus ({results['index']}).",
        "",
        "| benchmark | RACE p50 ms | peer p50 ms | ratio | target | pass |",
        "|---|---:|---:|---:|---|---|",
    ]
    b = results["bm25_leg"]
    lines.append(
        f"| single BM25 leg vs raw tantivy | {b['race']['p50_ms']} | {b['raw_tantivy']['p50_ms']} | "
        f"{b['ratio_p50']} | {b['target']} (<= {b['limit_ms']} ms) | {'yes' if b['pass'] else 'NO'} |"
    )
    f = results["four_legs"]
    lines.append(
        f"| 4 legs x 50 ms simulated | {f['wall']['p50_ms']} | 50 | {f['ratio_p50']} | {f['target']} | "
        f"{'yes' if f['pass'] else 'NO'} |"
    )
    for name, c in results["cache_hit"].items():
        lines.append(
            f"| result-cache hit vs cold ({name}) | {c['hit']['p50_ms']} | {c['cold']['p50_ms']} (cold) | "
            f"{c['speedup_p50']}x | {c['target']} | {'yes' if c['pass'] else 'NO'} |"
        )
    if "hybrid" in results:
        h = results["hybrid"]
        lines.append(
            f"| hybrid (tantivy + LanceDB ANN + RRF) vs LanceDB native hybrid | {h['race']['p50_ms']} | "
            f"{h['native']['p50_ms']} | {h['ratio_p50']} | {h['target']} | {'yes' if h['pass'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    runs = 40 if args.quick else 300
    fresh = Path(tempfile.mkdtemp(prefix="race-bench-"))
    index = Path(args.index) if args.index else ensure_bundled_index(fresh)
    engine = Engine.open(index)
    results: dict[str, Any] = {
        "machine": f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}",
        "runs": runs,
        "index": str(index.name),
    }
    results["bm25_leg"] = await bench_bm25_leg(engine, runs)
    results["four_legs"] = await bench_four_legs(max(10, runs // 10))
    results["cache_hit"] = {"bm25": await bench_cache_hit(engine, BM25_PLAN, max(10, runs // 4))}
    showcase = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "showcase.json").read_text())
    results["cache_hit"]["showcase"] = await bench_cache_hit(engine, showcase, max(10, runs // 4))
    if "lancedb" in engine.adapters:
        from benchmarks.bench_hybrid import bench_hybrid, hybrid_plan

        results["cache_hit"]["hybrid"] = await bench_cache_hit(engine, hybrid_plan(), max(10, runs // 10))
        results["hybrid"] = await bench_hybrid(engine, runs)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (CI-sized)")
    parser.add_argument("--index", help="an index directory (default: the bundled corpus, indexed into a temp dir)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    results = anyio.run(main_async, args)
    # A full run also refreshes the commit-ready copies; a quick one only writes out/.
    for out in [Path(args.out)] + ([] if args.quick else [RESULTS]):
        out.mkdir(parents=True, exist_ok=True)
        (out / "executor.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        (out / "executor.md").write_text(_markdown(results))
    print(_markdown(results))


if __name__ == "__main__":
    main()
