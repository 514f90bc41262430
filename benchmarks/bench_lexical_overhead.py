"""A lexical leg through ``Engine.run`` split by stage, beside a raw tantivy search of the
same index for the same query.

Real text: the known-item set of ``benchmarks.build_stdlib_eval`` (docstrings of the installed
standard library and numpy, which nobody on the project wrote), indexed lexical only. Every run
is one ``seek_support`` obligation of query class ``lexical`` at ``k`` chunks, with
``cache=False`` (no result or receipt cache; the plan cache is warm, as it is for a repeated
query shape). Runs rotate over the set's queries and alternate with the raw search of the same
query, so that the shared machine's noise hits both alike.

The raw search is what the leg wraps: ``searcher.search`` of the adapter's own query for the
``k`` best and a read of each hit's stored row, on a worker thread (``raw thread``) and inline
(``raw inline``: the same call without the hop, to price the hop itself).

Stages of a RACE run (each the median over the runs; ``rest`` is what no stage timer saw):

* ``plan``    parse, the generations read and the plan-cache lookup (``operational.phases``);
* ``pins``    the snapshot pins;
* ``hop``     the worker-thread round trip of the scan (its thread call less the scan);
* ``search``  tantivy's ``searcher.search`` and its ``doc`` reads, inside the scan;
* ``hits``    the rest of the scan: rows decoded, cut at k, custody hits, the ``ScanResult``;
* ``leg``     the leg around the call: cache key, screening, the obligation's outcome;
* ``fusion``  fusion (``operational.phases``);
* ``receipt`` the receipt's records, less its evidence fingerprint;
* ``fingerprint`` ``Receipt.with_evidence_fingerprint``.

    .venv/bin/python -m benchmarks.bench_lexical_overhead [--set DIR] [--runs N] [--name NAME] [--freeze-gc]

``--freeze-gc`` calls ``gc.freeze()`` after the warm-up (what an application may do once its
engine is open): the collector then no longer walks the engine's long-lived objects.

``--set`` is a folder made by ``build_stdlib_eval`` (built into a temporary folder when not
given); its lexical index is built beside it at ``index-lexical`` when missing. Writes
``benchmarks/results/NAME.json`` and ``NAME.md`` (default ``lexical_overhead``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import orjson

from benchmarks import write_results
from planner import scans

STAGES = ("plan", "pins", "hop", "search", "hits", "leg", "fusion", "receipt", "fingerprint", "rest")
TARGET_MS = 0.3
ROTATION = 200
"""Queries the runs rotate over, each run once beforehand so that its plan is in the plan cache."""

_spent: dict[str, float] = defaultdict(float)


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[name] += time.perf_counter() - start

    return wrapper


class _TimedSearcher:
    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.search = _timed("search", inner.search)
        self.doc = _timed("search", inner.doc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _TimedIndex:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def searcher(self) -> _TimedSearcher:
        return _TimedSearcher(self._inner.searcher())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def instrument(engine: Any) -> None:
    """Stage timers around the tantivy adapter's scan, its worker-thread call, the receipt and
    its fingerprint. They add a few perf_counter calls; nothing else changes."""
    import backends.tantivy.adapter as tantivy_adapter
    from race.receipt import Receipt
    from race.run.detached import CallPool
    from race.run.executor import Executor

    tantivy_adapter.TantivyAdapter._scan = _timed("scan", tantivy_adapter.TantivyAdapter._scan)  # type: ignore[method-assign]
    blocking = tantivy_adapter.blocking

    async def timed_blocking(fn: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return await blocking(fn, *args)
        finally:
            _spent["call"] += time.perf_counter() - start

    tantivy_adapter.blocking = timed_blocking  # type: ignore[assignment]
    # A leg runs the adapter's ``scan_call`` on its worker thread itself (``CallPool.call_blocking``).
    call_blocking = CallPool.call_blocking

    async def timed_call_blocking(self: CallPool, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return await call_blocking(self, *args)
        finally:
            _spent["call"] += time.perf_counter() - start

    CallPool.call_blocking = timed_call_blocking  # type: ignore[method-assign]
    Executor.receipt = _timed("receipt_all", Executor.receipt)  # type: ignore[method-assign]
    Receipt.with_evidence_fingerprint = _timed("fingerprint", Receipt.with_evidence_fingerprint)  # type: ignore[method-assign]
    adapter = engine.adapters["tantivy"]
    adapter._index = _TimedIndex(adapter._index)


def _plan(text: str, k: int) -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "o",
        "obligations": [{"id": "o", "kind": "seek_support", "query": {"text": text}, "query_class": "lexical", "k": k}],
    }


def _stages(total_s: float, phases: dict[str, float]) -> dict[str, float]:
    ms = {name: value * 1000.0 for name, value in _spent.items()}
    out = {
        "plan": phases.get("plan", 0.0),
        "pins": phases.get("pins", 0.0),
        "hop": ms.get("call", 0.0) - ms.get("scan", 0.0),
        "search": ms.get("search", 0.0),
        "hits": ms.get("scan", 0.0) - ms.get("search", 0.0),
        "leg": phases.get("legs", 0.0) - ms.get("call", 0.0),
        "fusion": phases.get("fusion", 0.0),
        "receipt": ms.get("receipt_all", 0.0) - ms.get("fingerprint", 0.0),
        "fingerprint": ms.get("fingerprint", 0.0),
    }
    out["rest"] = total_s * 1000.0 - sum(out.values())
    return out


async def bench(engine: Any, queries: list[str], k: int, runs: int, freeze_gc: bool = False) -> dict[str, Any]:
    adapter = engine.adapters["tantivy"]
    index = adapter._index._inner

    plan_hits = 0

    async def race(text: str) -> tuple[float, dict[str, float], int]:
        nonlocal plan_hits
        _spent.clear()
        start = time.perf_counter()
        receipt = await engine.run(_plan(text, k), cache=False)
        total = time.perf_counter() - start
        plan_hits += receipt.operational.plan_cache == "hit"
        return total, _stages(total, dict(receipt.operational.phases)), len(receipt.evidence)

    def raw_call(query: Any) -> int:
        searcher = index.searcher()
        found = searcher.search(query, limit=k)
        return len([orjson.loads(searcher.doc(address)["row"][0]) for _, address in found.hits])

    async def query_of(text: str) -> Any:
        explain = await engine.plan(engine.parse(_plan(text, k)))
        return adapter._text_query(scans(explain.physical)[0].request)

    queries = queries[: min(len(queries), runs, ROTATION)]
    compiled = {text: await query_of(text) for text in queries}
    for text in queries:  # warm: every plan in the plan cache, imports, first searches
        await race(text)
        await anyio.to_thread.run_sync(raw_call, compiled[text])
    if freeze_gc:
        gc.freeze()
    plan_hits = 0
    totals: list[float] = []
    thread: list[float] = []
    inline: list[float] = []
    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    hits: list[int] = []
    for i in range(runs):
        text = queries[i % len(queries)]
        query = compiled[text]
        order = ("race", "thread", "inline") if i % 2 == 0 else ("inline", "thread", "race")
        for what in order:
            if what == "race":
                total, split, found = await race(text)
                totals.append(total * 1000.0)
                hits.append(found)
                for name in STAGES:
                    stages[name].append(split[name])
            elif what == "thread":
                start = time.perf_counter()
                await anyio.to_thread.run_sync(raw_call, query)
                thread.append((time.perf_counter() - start) * 1000.0)
            else:
                start = time.perf_counter()
                raw_call(query)
                inline.append((time.perf_counter() - start) * 1000.0)
    race_p50, thread_p50 = statistics.median(totals), statistics.median(thread)
    split_p50 = {name: round(statistics.median(values), 4) for name, values in stages.items()}
    receipt_p50 = split_p50["receipt"] + split_p50["fingerprint"]
    return {
        "k": k,
        "runs": runs,
        "hits_p50": statistics.median(hits),
        "plan_cache_hits": plan_hits,
        "race_p50_ms": round(race_p50, 4),
        "raw_thread_p50_ms": round(thread_p50, 4),
        "raw_inline_p50_ms": round(statistics.median(inline), 4),
        "overhead_p50_ms": round(race_p50 - thread_p50, 4),
        "overhead_less_receipt_ms": round(race_p50 - thread_p50 - receipt_p50, 4),
        "target": f"overhead less the receipt's construction <= {TARGET_MS} ms",
        "pass": race_p50 - thread_p50 - receipt_p50 <= TARGET_MS,
        "stages_p50_ms": split_p50,
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# A lexical leg's overhead over raw tantivy, by stage",
        "",
        f"{results['machine']}; {results['documents']} documents of real text ({results['set']}); "
        f"load average {results['load_before']} before, {results['load_after']} after. "
        "Medians in ms; RACE with `cache=False` (plan cache warm), runs interleaved with the raw search "
        "of the same query." + (" `gc.freeze()` after the warm-up." if results.get("gc_frozen") else ""),
        "",
        "| k | hits | RACE | raw (thread) | raw (inline) | overhead | overhead less receipt | pass |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results["legs"]:
        lines.append(
            f"| {r['k']} | {r['hits_p50']:g} | {r['race_p50_ms']} | {r['raw_thread_p50_ms']} | "
            f"{r['raw_inline_p50_ms']} | {r['overhead_p50_ms']} | {r['overhead_less_receipt_ms']} | "
            f"{'yes' if r['pass'] else 'NO'} |"
        )
    lines += ["", "| stage | " + " | ".join(f"k={r['k']}" for r in results["legs"]) + " |"]
    lines.append("|---|" + "---:|" * len(results["legs"]))
    for name in STAGES:
        lines.append(f"| {name} | " + " | ".join(f"{r['stages_p50_ms'][name]}" for r in results["legs"]) + " |")
    return "\n".join(lines) + "\n"


def _prepare(folder: Path | None) -> tuple[Path, Path]:
    from benchmarks import build_stdlib_eval
    from race.indexing.indexing import build_index

    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="race-lexical-"))
        build_stdlib_eval.main(["--out", str(folder)])
    index = folder / "index-lexical"
    if not (index / "race.json").exists() and not any(index.glob("*")):
        build_index(folder / "docs.jsonl", index, vectors=False)
    return folder, index


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from race.engine import Engine

    folder, index = _prepare(args.set)
    engine = Engine.open(index)
    instrument(engine)
    queries = [json.loads(line)["text"] for line in (folder / "queries.jsonl").read_text().splitlines() if line]
    load_before = [round(x, 2) for x in os.getloadavg()]
    legs = [
        await bench(engine, queries, k, args.runs if k < 1000 else max(20, args.runs // 5), args.freeze_gc)
        for k in args.k
    ]
    return {
        "machine": f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}",
        "set": "stdlib docstrings (benchmarks.build_stdlib_eval)",
        "documents": len(queries),
        "gc_frozen": args.freeze_gc,
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "legs": legs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=Path, help="a folder made by benchmarks.build_stdlib_eval")
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--k", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--name", default="lexical_overhead")
    parser.add_argument("--freeze-gc", action="store_true", help="gc.freeze() after the warm-up")
    args = parser.parse_args()
    results = anyio.run(main_async, args)
    write_results(args.name, results, markdown(results))


if __name__ == "__main__":
    main()
