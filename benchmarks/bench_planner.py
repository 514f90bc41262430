"""Benchmark: planner compile time against DAG size, and the engine's plan-cache hit.

Plans are realistic mixed DAGs (seeded RNG, so every run plans the same documents): about
60 % obligations over every query class, with hard filters on the corpus's metadata fields,
joined by all nine operators, some inputs shared between operators, under one root. Each
is planned against every contract shipped in the tree (``known_contracts()`` plus the RSC
files under ``backends/*/rsc``) with fixed generations and the ``fixtures/stats/broad.json``
statistics.

* ``compile`` — ``compile_plan(...)`` on an already parsed plan: matching, rules, memo,
  cost, the chosen physical tree and its fingerprints. Parsing and rendering are not timed.
* ``cache hit`` — ``Engine._plan(plan, generations, where)`` on a warm cache, the path
  ``Engine.plan``/``Engine.run`` take after reading the backends' generations: the plan's
  digest, the key over (plan digest, generations, statistics fingerprint) and the LRU lookup.
  Timed for the same plan object (its digest is computed once per object) and for an equal
  but new object each time (the digest is computed afresh: what a re-parsed plan pays).
  Reading generations (adapter I/O, worker-thread hops) is *not* in it; the engine has a
  statistics override, so no adapter statistics are gathered either.

Wall times on a shared machine include other jobs' interference; each row also gives the
minimum and this thread's CPU time.

    python -m benchmarks.bench_planner [--quick] [--repeats N] [--plans N] [--out DIR] [--results DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic

from planner import LogicalPlan, Statistics, compile_plan, plan_from_dict
from race.engine import Engine, known_contracts, load_statistics
from rsc import Contract, load_contract

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).parent / "out"
RESULTS = Path(__file__).parent / "results"
STATS = ROOT / "fixtures" / "stats" / "broad.json"
SIZES = (8, 16, 32, 64, 128, 256)
TARGET_COMPILE_MS = {64: 10.0}
TARGET_HIT_MS = 0.2
GENERATIONS = {"tantivy": "tantivy:bench", "lancedb": "lancedb:bench", "graph": "graph:bench"}

_KINDS = (
    "seek_support",
    "seek_refutation",
    "seek_exception_or_defeater",
    "seek_fresher_state",
    "seek_identity_counterexample",
    "seek_independent_origin",
)
_OPERATORS = ("union", "cascade", "fallback", "intersect", "join", "refine", "corroborate", "oppose", "freshen")
_TEXTS = (
    "SCRAM authentication bypass fixed release",
    "quill-compress decompression overflow",
    "fsync stall during checkpoint",
    "which component owns the replication protocol",
    "rollback procedure for a failed schema migration",
)


def all_contracts() -> tuple[Contract, ...]:
    """Every contract in the tree: the registered ones and any RSC file not registered yet."""
    by_ref = {c.ref: c for c in known_contracts()}
    for path in sorted(ROOT.glob("backends/*/rsc/*.json")):
        contract = load_contract(path)
        by_ref.setdefault(contract.ref, contract)
    return tuple(by_ref[ref] for ref in sorted(by_ref))


def _obligation(rng: random.Random, i: int) -> dict[str, Any]:
    query_class = rng.choice(
        ("lexical", "lexical", "conceptual", "broad_question", "identifier", "dependency", "symbol_relation")
    )
    query: dict[str, Any]
    if query_class in ("identifier", "dependency", "symbol_relation"):
        query = {"ids": [f"doc-{rng.randrange(40):03d}"]}
        if query_class == "identifier" and rng.random() < 0.5:
            query = {"text": f"CVE-2024-{rng.randrange(1000, 9999)}"}
    else:
        query = {"text": rng.choice(_TEXTS)}
    filters: list[dict[str, Any]] = []
    if rng.random() < 0.6:
        filters.append({"field": "doc_type", "value": rng.choice(("advisory", "runbook", "adr", "incident"))})
    if rng.random() < 0.3:
        filters.append({"field": "date", "op": "range", "gte": "2023-01-01"})
    if rng.random() < 0.2:
        filters.append({"field": "component", "op": "in", "values": ["storage", "security"]})
    ob: dict[str, Any] = {
        "id": f"o{i:03d}",
        "kind": rng.choice(_KINDS),
        "query": query,
        "query_class": query_class,
        "hard_filters": filters,
        "k": rng.choice((3, 5, 10, 20)),
        "required_coverage": rng.choice(("heuristic", "heuristic", "exhaustive_for_declared_fragment")),
    }
    if rng.random() < 0.2:
        ob["freshness"] = {"as_of": "2024-06-01", "max_age_days": 365}
    return ob


def _operator(rng: random.Random, i: int, pool: list[str]) -> dict[str, Any]:
    name = f"p{i:03d}"
    op = rng.choice(_OPERATORS) if len(pool) >= 2 else rng.choice(("refine", "freshen"))
    if op in ("join", "oppose"):
        a, b = rng.sample(pool, 2)
        if op == "join":
            return {"id": name, "op": op, "left": a, "right": b, "via": "cites"}
        return {"id": name, "op": op, "support": a, "refutation": b}
    if op == "refine":
        return {"id": name, "op": op, "input": rng.choice(pool), "filters": [{"field": "status", "value": "accepted"}]}
    if op == "freshen":
        return {"id": name, "op": op, "input": rng.choice(pool), "as_of": "2024-06-01", "mode": "mark"}
    inputs = rng.sample(pool, min(len(pool), rng.choice((2, 2, 3, 4))))
    return {"id": name, "op": op, "inputs": inputs}


def mixed_plan(size: int, seed: int) -> dict[str, Any]:
    """A plan of exactly ``size`` nodes whose root reaches every node; some inputs shared."""
    rng = random.Random(seed)
    n_ops = max(1, round(size * 0.4))
    n_obs = size - n_ops
    obligations = [_obligation(rng, i) for i in range(n_obs)]
    unreferenced = [o["id"] for o in obligations]
    referenced: list[str] = []
    operators: list[dict[str, Any]] = []
    for i in range(n_ops - 1):
        # Mostly consume nodes nobody reads yet (a tree), sometimes re-read one (a DAG).
        pool = unreferenced[:4] if len(unreferenced) >= 2 or not referenced else [*unreferenced, *referenced[-3:]]
        if referenced and rng.random() < 0.15:
            pool = [*pool, rng.choice(referenced)]
        op = _operator(rng, i, pool)
        ins = [v for k, v in op.items() if k in ("input", "left", "right", "support", "refutation")] + op.get(
            "inputs", []
        )
        for node in ins:
            if node in unreferenced:
                unreferenced.remove(node)
                referenced.append(node)
        operators.append(op)
        unreferenced.append(op["id"])
    operators.append({"id": f"p{n_ops - 1:03d}", "op": "union", "inputs": unreferenced})
    return {
        "schema_version": "race.plan/1",
        "root": f"p{n_ops - 1:03d}",
        "obligations": obligations,
        "operators": operators,
        "budget": {"max_nodes": max(256, size)},
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _time(fn: Callable[[], object], repeats: int, warmup: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (this thread) milliseconds per call."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.thread_time()
        fn()
        cpu.append((time.thread_time() - started_cpu) * 1000.0)
        wall.append((time.perf_counter() - started) * 1000.0)
    return wall, cpu


def _summary(wall_ms: list[float], cpu_ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(_percentile(wall_ms, 0.5), 4),
        "p95_ms": round(_percentile(wall_ms, 0.95), 4),
        "mean_ms": round(statistics.fmean(wall_ms), 4),
        "max_ms": round(max(wall_ms), 4),
        "min_ms": round(min(wall_ms), 4),
        "cpu_p50_ms": round(_percentile(cpu_ms, 0.5), 4),
    }


def _compile_times(
    plans: list[LogicalPlan], contracts: tuple[Contract, ...], stats: Statistics, repeats: int
) -> tuple[list[float], list[float]]:
    wall: list[float] = []
    cpu: list[float] = []
    for plan in plans:
        w, c = _time(
            lambda plan=plan: compile_plan(  # type: ignore[misc]
                plan, contracts=contracts, backend_generations=GENERATIONS, stats=stats
            ),
            repeats,
            warmup=2,
        )
        wall += w
        cpu += c
    return wall, cpu


def _cache_hits(
    engine: Engine, plans: list[LogicalPlan], repeats: int, *, new_object: bool
) -> tuple[list[float], list[float]]:
    """``Engine._plan`` on a warm cache: the key (plan digest, generations, statistics) and the lookup.

    With ``new_object`` every call gets an equal but new plan object (as when a plan file is
    parsed again), so the plan's digest is computed afresh each time.
    """
    wall: list[float] = []
    cpu: list[float] = []
    for plan in plans:
        engine._plan(plan, GENERATIONS, "bench")
        _, hit = engine._plan(plan.model_copy(), GENERATIONS, "bench")
        assert hit, "an equal plan must hit the cache"
        if new_object:
            copies = iter([plan.model_copy() for _ in range(repeats + 5)])
            w, c = _time(lambda copies=copies: engine._plan(next(copies), GENERATIONS, "bench"), repeats, warmup=5)  # type: ignore[misc]
        else:
            w, c = _time(lambda plan=plan: engine._plan(plan, GENERATIONS, "bench"), repeats, warmup=5)  # type: ignore[misc]
        wall += w
        cpu += c
    return wall, cpu


def _row(size: int, times: tuple[list[float], list[float]], target: float | None, **extra: Any) -> dict[str, Any]:
    wall, cpu = times
    return {
        "nodes": size,
        "samples": len(wall),
        **extra,
        **_summary(wall, cpu),
        "target_p50_ms": target,
        "pass": None if target is None else _percentile(wall, 0.5) <= target,
    }


def run(repeats: int, plans_per_size: int) -> dict[str, Any]:
    contracts = all_contracts()
    stats = load_statistics(STATS)
    plans = {size: [plan_from_dict(mixed_plan(size, seed)) for seed in range(plans_per_size)] for size in SIZES}
    report: dict[str, Any] = {
        "benchmark": "planner",
        "contracts": [c.ref for c in contracts],
        "statistics": str(STATS.relative_to(ROOT)),
        "repeats": repeats,
        "plans_per_size": plans_per_size,
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    rows = []
    for size in SIZES:
        explain = compile_plan(plans[size][0], contracts=contracts, backend_generations=GENERATIONS, stats=stats)
        times = _compile_times(plans[size], contracts, stats, repeats)
        rows.append(
            _row(
                size, times, TARGET_COMPILE_MS.get(size), plans=plans_per_size, alternatives=explain.bounds.alternatives
            )
        )
    report["compile"] = rows
    for mode in ("same_object", "new_object"):
        rows = []
        for size in SIZES:
            engine = Engine({}, extra_contracts=contracts, statistics=stats)
            times = _cache_hits(engine, plans[size], repeats * 10, new_object=mode == "new_object")
            # The target is for the cached path; a new object pays for its digest once (shown, not judged).
            rows.append(_row(size, times, TARGET_HIT_MS if mode == "same_object" else None))
        report[f"cache_hit_{mode}"] = rows
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    report["environment"] = {
        "python": platform.python_version(),
        "pydantic": pydantic.VERSION,
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
    }
    return report


def _verdict(row: dict[str, Any]) -> str:
    return "-" if row["pass"] is None else ("pass" if row["pass"] else "**FAIL**")


def _target(row: dict[str, Any]) -> str:
    return "-" if row["target_p50_ms"] is None else f"<= {row['target_p50_ms']} ms"


def render_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# Planner: compile time and plan-cache hit",
        "",
        f"Contracts ({len(report['contracts'])}): {', '.join(report['contracts'])}.",
        f"Statistics: `{report['statistics']}`. Mixed plans (seeded RNG), {report['plans_per_size']} per size,"
        f" {report['repeats']} timed compiles each (cache hits: 10x as many).",
        f"Environment: Python {env['python']}, pydantic {env['pydantic']}, {env['platform']}, {env['cpus']} CPUs;"
        f" load average {report['load_average_before']} before, {report['load_average_after']} after"
        " (other jobs shared the machine: wall times include their interference; `cpu p50` is this thread's"
        " CPU time).",
    ]
    for section in ("compile",):
        lines += [
            "",
            "## compile_plan: parsed plan in, Explain out",
            "",
            "Matching, rules, memo, costs, the chosen physical tree and its fingerprints. Parsing and"
            " rendering are not timed.",
            "",
            "| nodes | plans | samples | memo alternatives | min ms | p50 ms | p95 ms | mean ms | cpu p50 ms"
            " | target p50 | result |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for row in report[section]:
            lines.append(
                f"| {row['nodes']} | {row['plans']} | {row['samples']} | {row['alternatives']} | {row['min_ms']:.3f}"
                f" | {row['p50_ms']:.3f}"
                f" | {row['p95_ms']:.3f} | {row['mean_ms']:.3f} | {row['cpu_p50_ms']:.3f} | {_target(row)}"
                f" | {_verdict(row)} |"
            )
    for mode, title in (
        ("same_object", "the same plan object (its digest is computed once)"),
        ("new_object", "an equal, new plan object each time (digest computed afresh)"),
    ):
        lines += [
            "",
            f"## Plan-cache hit, `Engine._plan` on a warm cache, {title}",
            "",
            "Measured: the plan digest, the key over (plan digest, backend generations, statistics"
            " fingerprint) and the LRU lookup. Not measured: reading the backends' generations, which"
            " `Engine.plan`/`Engine.run` do before the lookup on every call (adapter I/O and worker-thread hops).",
            "",
            "| nodes | samples | p50 ms | p95 ms | mean ms | cpu p50 ms | target p50 | result |",
            "|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for row in report[f"cache_hit_{mode}"]:
            lines.append(
                f"| {row['nodes']} | {row['samples']} | {row['p50_ms']:.4f} | {row['p95_ms']:.4f}"
                f" | {row['mean_ms']:.4f} | {row['cpu_p50_ms']:.4f} | {_target(row)} | {_verdict(row)} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_planner", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 repeats, 2 plans per size; results/ is left alone")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--plans", type=int, default=None, help="plans per size")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the commit-ready copies go")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 20)
    plans = args.plans or (2 if args.quick else 5)
    gc.collect()
    report = run(repeats, plans)
    text = json.dumps(report, indent=2, sort_keys=True) + "\n"
    markdown = render_markdown(report)
    targets = [(d, True) for d in [args.out]] + ([] if args.quick else [(args.results, True)])
    for directory, _ in targets:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "planner.json").write_text(text)
        (directory / "planner.md").write_text(markdown)
    sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
