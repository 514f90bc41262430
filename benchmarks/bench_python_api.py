"""The Python API's own cost, each figure a ratio of two calls measured side by side in one run,
interleaved, so that the shared machine's noise hits both alike.

* ``search``    ``await engine.search(text, ...)`` beside ``await engine.run(plan)`` of the plan
                ``engine.plan_for_search`` writes for it, both on a cached receipt (what is left is
                the API's own work: building and parsing the plan). Target: overhead <= 0.5 ms.
* ``sync``      ``engine.run_sync(plan)`` from synchronous code beside ``await engine.run(plan)``
                on a cached receipt: the cost of the thread hand-off to the engine's loop.
                Target: sync p50 <= 2 x async p50. Beside them, what that cost is made of: the
                hand-off alone (a coroutine that returns at once, through the same loop), and
                ``await engine.run(plan)`` when the loop has slept 1 ms before it, as the
                engine's loop has before every sync call (the awaited calls above run back to
                back, on a loop that never sleeps).
* ``rows``      ``receipt.to_arrow()`` and ``to_pandas()`` of a k=50 hybrid receipt.

    python -m benchmarks.bench_python_api [--quick] [--index DIR]

Writes ``benchmarks/out/python_api.{json,md}`` and, without ``--quick``, ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from race.engine import Engine
from race.indexing.bundled import ensure_bundled_index

OUT = Path(__file__).parent / "out"
RESULTS = Path(__file__).parent / "results"
TEXT = "the broker ran out of memory during a partition"


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": round(_p(samples, 0.5) * 1e3, 4), "p90_ms": round(_p(samples, 0.9) * 1e3, 4)}


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


BLOCK = 20
"""Calls of each kind in a row; the kinds alternate block by block."""


async def _nothing() -> None:
    return None


def measure(engine: Engine, runs: int) -> dict[str, Any]:
    plan = engine.plan_for_search(TEXT, k=10)
    engine.run_sync(plan)  # warm: set-up, plan cache, receipt cache
    search_s: list[float] = []
    run_s: list[float] = []
    sync_s: list[float] = []
    async_s: list[float] = []
    hand_off_s: list[float] = []
    slept_s: list[float] = []

    async def async_side() -> None:
        for _ in range(BLOCK):
            started = time.perf_counter()
            await engine.search(TEXT, k=10)
            search_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            await engine.run(plan)
            run_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            await engine.run(plan)
            async_s.append(time.perf_counter() - started)
        for _ in range(BLOCK):
            await asyncio.sleep(0.001)
            started = time.perf_counter()
            await engine.run(plan)
            slept_s.append(time.perf_counter() - started)

    # The async calls run on the engine's own loop (as a program's loop would); the sync calls
    # from this thread, interleaved in blocks.
    for _ in range(5 * runs // BLOCK):
        engine._portal.call(async_side)
        sync_s.extend(_timed(lambda: engine.run_sync(plan)) for _ in range(BLOCK))
        hand_off_s.extend(_timed(lambda: engine._portal.call(_nothing)) for _ in range(BLOCK))
    wide = engine.search_sync(TEXT, k=50)
    arrow_s = [_timed(wide.to_arrow) for _ in range(runs)]
    pandas_s = [_timed(wide.to_pandas) for _ in range(runs)]
    search, run, sync, run_async = _ms(search_s), _ms(run_s), _ms(sync_s), _ms(async_s)
    hand_off, slept = _ms(hand_off_s), _ms(slept_s)
    return {
        "machine": f"{platform.machine()} CPython {platform.python_version()}",
        "load": [round(x, 2) for x in os.getloadavg()],
        "runs": runs * 5,
        "search": {
            "search": search,
            "run": run,
            "overhead_ms": round(search["p50_ms"] - run["p50_ms"], 4),
            "target": "search p50 - run p50 <= 0.5 ms",
            "pass": search["p50_ms"] - run["p50_ms"] <= 0.5,
        },
        "sync": {
            "run_sync": sync,
            "await_run": run_async,
            "ratio": round(sync["p50_ms"] / run_async["p50_ms"], 3),
            "target": "run_sync p50 <= 2 x await run p50",
            "pass": sync["p50_ms"] <= 2 * run_async["p50_ms"],
            "hand_off": hand_off,
            "await_run_after_sleep": slept,
        },
        "rows": {"hits": len(wide.to_records()), "to_arrow": _ms(arrow_s), "to_pandas": _ms(pandas_s)},
        "stdev_note": f"search p50 spread {statistics.pstdev(search_s) * 1e3:.4f} ms",
    }


def markdown(r: dict[str, Any]) -> str:
    s, y, w = r["search"], r["sync"], r["rows"]
    return "\n".join(
        [
            "# Python API",
            "",
            f"{r['machine']}; {r['runs']} interleaved calls each on a cached receipt; load {r['load']}.",
            "",
            "| benchmark | p50 ms | beside | p50 ms | figure | target | pass |",
            "|---|---:|---|---:|---:|---|---|",
            f"| `await engine.search(...)` | {s['search']['p50_ms']} | `await engine.run(plan)` | "
            f"{s['run']['p50_ms']} | {s['overhead_ms']} ms | {s['target']} | {'yes' if s['pass'] else 'NO'} |",
            f"| `engine.run_sync(plan)` | {y['run_sync']['p50_ms']} | `await engine.run(plan)` | "
            f"{y['await_run']['p50_ms']} | {y['ratio']}x | {y['target']} | {'yes' if y['pass'] else 'NO'} |",
            f"| `engine._portal.call(nothing)` (the hand-off alone) | {y['hand_off']['p50_ms']} | "
            f"`await engine.run(plan)` after the loop slept 1 ms | {y['await_run_after_sleep']['p50_ms']} | | | |",
            f"| `to_arrow()` of {w['hits']} hits | {w['to_arrow']['p50_ms']} | `to_pandas()` | "
            f"{w['to_pandas']['p50_ms']} | | | |",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer calls; write benchmarks/out only")
    parser.add_argument("--index", type=Path, help="index directory (default: the bundled fixture corpus)")
    args = parser.parse_args()
    with Engine.open(args.index or ensure_bundled_index()) as engine:
        result = measure(engine, 20 if args.quick else 200)
    for out in [OUT] + ([] if args.quick else [RESULTS]):
        out.mkdir(parents=True, exist_ok=True)
        (out / "python_api.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        (out / "python_api.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
