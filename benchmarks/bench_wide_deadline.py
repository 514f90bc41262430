"""A very wide plan under a short deadline: the deadline covers the whole run (race.planning).

A plan of N nodes (N-1 lexical obligations under one union) runs with a 1 s deadline over the
bundled index, set up first (``Engine.warm``: set-up is not charged to the deadline). Each
round runs it twice, interleaved: given as a dict (parsing and the plan's digest count against
the deadline) and as a parsed ``LogicalPlan``. Every run is fresh (empty result and receipt
caches), so that every leg is really asked for. Reported per input form: wall p50 and max, the
largest ratio of wall to deadline, the loop's largest lag (tests/loop_lag.py), how many
obligations were satisfied, and the gaps by kind (``resource_limited`` names the nodes the run
did not reach). Target: every run ends within deadline + 100 ms + the loop's lag.

    python -m benchmarks.bench_wide_deadline [--nodes 2000] [--deadline-ms 1000] [--rounds 5]

Writes benchmarks/results/wide_deadline.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from planner import LogicalPlan, plan_from_dict
from race.engine import Engine
from race.indexing.bundled import ensure_bundled_index
from race.receipt import Receipt
from race.state.cache import ResultCache
from tests.loop_lag import LoopLag

RESULTS = Path(__file__).parent / "results"
SLACK_MS = 100.0
WORDS = ("raft", "partition", "stall", "memory", "broker", "tls", "fsync", "leak", "heap", "quorum", "election", "cve")


def wide_plan(nodes: int, deadline_ms: int) -> dict[str, Any]:
    """``nodes - 1`` lexical obligations, each its own query, under one union."""
    obligations = [
        {
            "id": f"o{i:04d}",
            "kind": "seek_support",
            "query": {"text": f"{WORDS[i % 12]} {WORDS[(i * 7 + 3) % 12]} {WORDS[(i * 5 + 1) % 12]}"},
            "query_class": "lexical",
            "k": 5,
            "allow_contracts": ["tantivy.bm25"],
        }
        for i in range(nodes - 1)
    ]
    return {
        "schema_version": "race.plan/1",
        "root": "all",
        "obligations": obligations,
        "operators": [{"id": "all", "op": "union", "inputs": [o["id"] for o in obligations]}],
        "budget": {"deadline_ms": deadline_ms, "max_nodes": nodes},
    }


async def _one(engine: Engine, plan: dict[str, Any] | LogicalPlan) -> tuple[float, float, Receipt]:
    engine.clear_receipt_cache()
    engine.result_cache = ResultCache()
    async with LoopLag() as lag:
        started = time.monotonic()
        receipt = await engine.run(plan)
        wall = (time.monotonic() - started) * 1000.0
    return wall, lag.max_ms, receipt


async def measure(nodes: int, deadline_ms: int, rounds: int) -> dict[str, Any]:
    engine = Engine.open(ensure_bundled_index())
    data = wide_plan(nodes, deadline_ms)
    parsed = plan_from_dict(data)
    setup_s = await engine.warm(parsed)
    forms: dict[str, list[tuple[float, float, Receipt]]] = {"dict": [], "LogicalPlan": []}
    for i in range(rounds):
        order = ("dict", "LogicalPlan") if i % 2 == 0 else ("LogicalPlan", "dict")
        for form in order:
            forms[form].append(await _one(engine, data if form == "dict" else parsed))
    out: dict[str, Any] = {}
    for form, runs in forms.items():
        walls = [w for w, _, _ in runs]
        lags = [lag for _, lag, _ in runs]
        gaps: Counter[str] = Counter()
        satisfied = []
        for _, _, receipt in runs:
            gaps.update(g.kind.value for g in receipt.gaps)
            satisfied.append(sum(1 for o in receipt.obligations if o.status.value == "satisfied"))
            assert len(receipt.obligations) == nodes - 1 and len(receipt.operators) == 1
        out[form] = {
            "wall_p50_ms": round(statistics.median(walls), 1),
            "wall_max_ms": round(max(walls), 1),
            "max_wall_over_deadline": round(max(walls) / deadline_ms, 3),
            "loop_lag_max_ms": round(max(lags), 1),
            "within_deadline_plus_slack": sum(1 for w in walls if w <= deadline_ms + SLACK_MS),
            "within_deadline_plus_slack_plus_lag": sum(1 for w, lag, _ in runs if w <= deadline_ms + SLACK_MS + lag),
            "runs": len(runs),
            "satisfied_per_run": satisfied,
            "gaps_by_kind_over_all_runs": dict(sorted(gaps.items())),
        }
    return {
        "schema_version": "race.bench.wide_deadline/1",
        "nodes": nodes,
        "deadline_ms": deadline_ms,
        "rounds": rounds,
        "setup_s": round(setup_s, 3),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "forms": out,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# {result['nodes']}-node plan, {result['deadline_ms']} ms deadline",
        "",
        f"{result['rounds']} runs per input form, interleaved; load average {result['load_average_1m_at_end']}"
        f" on {result['cpus']} CPUs at the end.",
        "",
        "| input | wall p50 ms | wall max ms | max wall/deadline | loop lag max ms | within +100 ms | "
        "within +100 ms + lag | satisfied per run | gaps (all runs) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for form, f in result["forms"].items():
        gaps = ", ".join(f"{k} {v}" for k, v in f["gaps_by_kind_over_all_runs"].items())
        lines.append(
            f"| {form} | {f['wall_p50_ms']} | {f['wall_max_ms']} | {f['max_wall_over_deadline']} | "
            f"{f['loop_lag_max_ms']} | {f['within_deadline_plus_slack']}/{f['runs']} | "
            f"{f['within_deadline_plus_slack_plus_lag']}/{f['runs']} | {f['satisfied_per_run']} | {gaps} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--deadline-ms", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "wide_deadline.json")
    args = parser.parse_args()
    result = anyio.run(measure, args.nodes, args.deadline_ms, args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result), end="")


if __name__ == "__main__":
    main()
