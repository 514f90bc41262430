"""A very wide plan under a short deadline: the deadline covers the whole run (race.planning).

A plan of N nodes (N-1 lexical obligations under one union) runs with a 1 s deadline over the
bundled index, set up first (``Engine.warm``: set-up is not charged to the deadline). Each
round runs it twice per tree, given as a dict (parsing and the plan's digest count against the
deadline) and as a parsed ``LogicalPlan``. Every run is fresh (empty result and receipt
caches), so that every leg is really asked for.

Trees are compared side by side in one sitting: each ``--tree NAME=PATH`` (default: this tree
as ``after``) runs in a worker process of its own that imports RACE from PATH (an older
checkout, say), and the rounds interleave the trees and forms so that every tree meets the
same load. ``--burners 0,6`` measures again beside that many CPU-bound processes
(benchmarks/busy.py). Every run is kept as a row (tree, form, burners, load average, wall,
the loop's largest lag measured during that run by tests/loop_lag.py, satisfied obligations,
gaps by kind: ``resource_limited`` names the nodes the run did not reach). Target: every run
ends within deadline + 100 ms; the table also counts deadline + 100 ms + the loop's lag.

    python -m benchmarks.bench_wide_deadline [--nodes 2000] [--deadline-ms 1000] [--rounds 5]
        [--tree after=. --tree before=/path/to/older/tree] [--burners 0,6]

Writes benchmarks/results/wide_deadline.json (every row, and a summary per tree, form and
burner count) and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
SLACK_MS = 100.0
WORDS = ("raft", "partition", "stall", "memory", "broker", "tls", "fsync", "leak", "heap", "quorum", "election", "cve")
FORMS = ("dict", "LogicalPlan")


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


# -- the worker: one tree, one engine, one run per line read --------------------------------


def worker(tree: str, nodes: int, deadline_ms: int) -> None:
    """Import RACE from ``tree``, open and warm the bundled index, then answer each form name
    read on stdin with one fresh run's row (JSON) on stdout."""
    sys.path.insert(0, tree)
    import anyio

    from planner import plan_from_dict
    from race.engine import Engine
    from race.indexing.bundled import ensure_bundled_index
    from race.state.cache import ResultCache
    from tests.loop_lag import LoopLag

    async def serve() -> None:
        engine = Engine.open(ensure_bundled_index())
        data = wide_plan(nodes, deadline_ms)
        parsed = plan_from_dict(data)
        setup_s = await engine.warm(parsed)
        print(json.dumps({"ready": True, "setup_s": round(setup_s, 3)}), flush=True)
        for line in sys.stdin:
            form = line.strip()
            engine.clear_receipt_cache()
            engine.result_cache = ResultCache()
            async with LoopLag() as lag:
                started = time.monotonic()
                receipt = await engine.run(data if form == "dict" else parsed)
                wall = (time.monotonic() - started) * 1000.0
            assert len(receipt.obligations) == nodes - 1 and len(receipt.operators) == 1
            row = {
                "wall_ms": round(wall, 1),
                "lag_ms": round(lag.max_ms, 1),
                "satisfied": sum(1 for o in receipt.obligations if o.status.value == "satisfied"),
                "gaps": dict(sorted(Counter(g.kind.value for g in receipt.gaps).items())),
            }
            print(json.dumps(row), flush=True)

    anyio.run(serve)


class Worker:
    """A worker process of one tree, with its own empty cache directory."""

    def __init__(self, name: str, tree: Path, nodes: int, deadline_ms: int, cache: Path) -> None:
        self.name = name
        env = {**os.environ, "RACE_CACHE_DIR": str(cache / name)}
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree), "--nodes", str(nodes)]
        argv += ["--deadline-ms", str(deadline_ms)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
        self.setup_s = float(self._read()["setup_s"])

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} ended (exit {self.proc.wait()})")
        found: dict[str, Any] = json.loads(line)
        return found

    def run(self, form: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(form + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


# -- the sitting: trees and forms interleaved, at each burner count ------------------------


def measure(trees: dict[str, Path], nodes: int, deadline_ms: int, rounds: int, burners: list[int]) -> dict[str, Any]:
    from benchmarks.busy import _start_burners, _stop

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as cache:
        workers = [Worker(name, path, nodes, deadline_ms, Path(cache)) for name, path in trees.items()]
        try:
            for n in burners:
                group = _start_burners(n)
                try:
                    time.sleep(10.0 if n else 0.0)  # the burners settle; the load average climbs
                    for i in range(rounds):
                        # Each round turns the order round, so no tree or form always goes first.
                        order = [(w, f) for f in FORMS for w in workers]
                        shift = i % len(order)
                        for w, form in order[shift:] + order[:shift]:
                            row = w.run(form)
                            rows.append({"tree": w.name, "form": form, "burners": n, "round": i, **row})
                            rows[-1]["load_1m"] = round(os.getloadavg()[0], 2)
                            rows[-1]["runnable"] = _runnable()
                finally:
                    _stop(group)
        finally:
            for w in workers:
                w.close()
    return {
        "schema_version": "race.bench.wide_deadline/2",
        "nodes": nodes,
        "deadline_ms": deadline_ms,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "trees": {name: str(path) for name, path in trees.items()},
        "summary": summarize(rows, deadline_ms),
        "rows": rows,
    }


def _runnable() -> int | None:
    """Threads runnable right now (Linux's /proc/loadavg), this process's included: the load
    average lags a change of load by about a minute, this does not."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def summarize(rows: list[dict[str, Any]], deadline_ms: int) -> list[dict[str, Any]]:
    """One line per (burners, tree, form), in the order they were first measured."""
    keys = list(dict.fromkeys((r["burners"], r["tree"], r["form"]) for r in rows))
    out = []
    for burners, tree, form in keys:
        runs = [r for r in rows if (r["burners"], r["tree"], r["form"]) == (burners, tree, form)]
        walls = [r["wall_ms"] for r in runs]
        gaps: Counter[str] = Counter()
        for r in runs:
            gaps.update(r["gaps"])
        out.append(
            {
                "burners": burners,
                "tree": tree,
                "form": form,
                "runs": len(runs),
                "load_1m_mean": round(statistics.fmean(r["load_1m"] for r in runs), 2),
                "runnable_median": statistics.median(r["runnable"] or 0 for r in runs),
                "wall_p50_ms": round(statistics.median(walls), 1),
                "wall_max_ms": round(max(walls), 1),
                "loop_lag_max_ms": round(max(r["lag_ms"] for r in runs), 1),
                "within_deadline_plus_slack": sum(1 for w in walls if w <= deadline_ms + SLACK_MS),
                "within_deadline_plus_slack_plus_lag": sum(
                    1 for r in runs if r["wall_ms"] <= deadline_ms + SLACK_MS + r["lag_ms"]
                ),
                "satisfied_median": statistics.median(r["satisfied"] for r in runs),
                "gaps_by_kind_over_all_runs": dict(sorted(gaps.items())),
            }
        )
    return out


def markdown(result: dict[str, Any]) -> str:
    trees = ", ".join(f"`{name}` = {path}" for name, path in result["trees"].items())
    lines = [
        f"# {result['nodes']}-node plan, {result['deadline_ms']} ms deadline",
        "",
        f"{result['rounds']} runs per tree, form and burner count, interleaved, on {result['cpus']} CPUs; "
        f"trees: {trees}. Load: the 1-minute load average after each run, averaged; runnable: the threads "
        "runnable at that moment (/proc/loadavg), median.",
        "",
        "| burners | tree | input | load | runnable | wall p50 ms | wall max ms | loop lag max ms | within +100 ms | "
        "within +100 ms + lag | satisfied (median) | gaps (all runs) |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in result["summary"]:
        gaps = ", ".join(f"{k} {v}" for k, v in s["gaps_by_kind_over_all_runs"].items())
        lines.append(
            f"| {s['burners']} | {s['tree']} | {s['form']} | {s['load_1m_mean']} | {s['runnable_median']} | "
            f"{s['wall_p50_ms']} | "
            f"{s['wall_max_ms']} | {s['loop_lag_max_ms']} | {s['within_deadline_plus_slack']}/{s['runs']} | "
            f"{s['within_deadline_plus_slack_plus_lag']}/{s['runs']} | {s['satisfied_median']} | {gaps} |"
        )
    lines += ["", "Every run, in order:", ""]
    lines.append("| burners | round | tree | input | load | runnable | wall ms | lag ms | satisfied |")
    lines.append("|---:|---:|---|---|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        lines.append(
            f"| {r['burners']} | {r['round']} | {r['tree']} | {r['form']} | {r['load_1m']} | {r['runnable']} | "
            f"{r['wall_ms']} | "
            f"{r['lag_ms']} | {r['satisfied']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--deadline-ms", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a tree to measure (repeatable)")
    parser.add_argument("--burners", default="0", help="comma-separated CPU-bound process counts, e.g. 0,6")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS / "wide_deadline.json")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.nodes, args.deadline_ms)
        return
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.tree)} or {"after": ROOT}
    burners = [int(n) for n in args.burners.split(",")]
    result = measure(trees, args.nodes, args.deadline_ms, args.rounds, burners)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result), end="")


if __name__ == "__main__":
    main()
