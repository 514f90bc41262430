"""Batch plans and indexing on Ray: throughput of `race batch` locally (1, 2, 4 plans at once on
one engine) and on a local Ray cluster (2 actors), against running the same plans one by one;
Ray's overhead per plan, measured on plan lines that fail at once (bad JSON), so that nearly
all their time is scheduling and transport; and `race index` of the bundled corpus locally vs
embedding on 1 and 2 Ray actors (each loads the model once; the build is otherwise local).

Every plan is a fixture plan with its own caller identity generation, so no plan is a plan,
receipt or result cache hit of another: each does its full work. Cluster start-up and actor
start-up (each actor opens its own engine) are reported apart from the batch times.

    .venv/bin/python -m benchmarks.bench_batch [--quick]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from race.engine import Engine
from race.evaluation.batch import LineResult, plan_lines
from race.evaluation.batch_file import run_batch_file
from race.indexing.bundled import BUNDLED_CORPUS
from race.indexing.indexing import build_index
from race.options import EngineOptions

HERE = Path(__file__).parent
PLANS = sorted((HERE.parent / "fixtures" / "plans").glob("*.json"))


def distinct_plans(copies: int) -> list[bytes]:
    lines = []
    for copy in range(copies):
        for path in PLANS:
            plan: dict[str, Any] = json.loads(path.read_text())
            plan["generations"] = {**plan.get("generations", {}), "identity": f"bench-batch/{copy}"}
            lines.append(orjson.dumps(plan))
    return lines


def timed_batch(plans: Path, out: Path, options: EngineOptions, **kw: Any) -> tuple[float, int]:
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    summary = run_batch_file(plans, out, options, **kw)
    return time.perf_counter() - started, summary.receipts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer plans (CI-sized)")
    args = parser.parse_args()
    copies = 2 if args.quick else 10
    work = Path(tempfile.mkdtemp(prefix="race-bench-batch-"))
    index = work / "index"
    started = time.perf_counter()
    build_index(BUNDLED_CORPUS, index)
    index_seconds = time.perf_counter() - started
    options = EngineOptions(index=index)
    lines = distinct_plans(copies)
    plans = work / "plans.jsonl"
    plans.write_bytes(b"\n".join(lines) + b"\n")
    n = len(lines)
    rows: list[dict[str, Any]] = []

    engine = Engine.open(index)
    engine.run_sync(PLANS[0])  # load the model and open every backend before timing
    started = time.perf_counter()
    for line in lines:
        engine.run_sync(line.decode())
    one_by_one = time.perf_counter() - started
    rows.append({"mode": "one by one (Engine.run_sync)", "seconds": one_by_one, "plans": n})

    for concurrency in (1, 2, 4):
        seconds, receipts = timed_batch(plans, work / "local.jsonl", options, concurrency=concurrency)
        assert receipts == n
        rows.append({"mode": f"race batch, local, concurrency {concurrency}", "seconds": seconds, "plans": n})

    import ray

    from race.evaluation.batch_ray import run_batch_on_ray
    from race.indexing.distributed import build_index_on_ray

    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024)
    cluster_start = time.perf_counter() - started
    try:
        # `race batch --ray` starts its actors (each opens its own engine) per invocation; two
        # bad-JSON lines (one per actor) measure that start-up alone.
        started = time.perf_counter()
        run_batch_on_ray(plan_lines([b"not json"] * 2), options, plans="two.jsonl", actors=2, emit=lambda _: None)
        actor_start = time.perf_counter() - started
        seconds, receipts = timed_batch(plans, work / "ray.jsonl", options, concurrency=2, ray="auto")
        assert receipts == n
        rows.append({"mode": "race batch --ray (2 actors), incl. actor start", "seconds": seconds, "plans": n})
        rows.append(
            {"mode": "race batch --ray (2 actors), excl. actor start", "seconds": seconds - actor_start, "plans": n}
        )
        bad = plan_lines([b"not json"] * n)
        got: list[LineResult] = []
        started = time.perf_counter()
        run_batch_on_ray(bad, options, plans="bad.jsonl", actors=2, emit=got.append)
        ray_bad = time.perf_counter() - started - actor_start
        assert len(got) == n
        bad_file = work / "bad.jsonl"
        bad_file.write_bytes(b"not json\n" * n)
        local_bad, _ = timed_batch(bad_file, work / "bad-out.jsonl", options, concurrency=2)
        index_rows = [{"mode": "race index, local", "seconds": index_seconds}]
        for workers in (1, 2):
            started = time.perf_counter()
            build_index_on_ray(BUNDLED_CORPUS, work / f"ray-index-{workers}", address="auto", workers=workers)
            seconds = time.perf_counter() - started
            index_rows.append({"mode": f"race index --ray, {workers} worker(s)", "seconds": seconds})
    finally:
        ray.shutdown()
    rows.append({"mode": "bad-JSON lines on Ray (2 actors), excl. actor start", "seconds": ray_bad, "plans": n})
    rows.append({"mode": "bad-JSON lines, local, concurrency 2", "seconds": local_bad, "plans": n})
    for row in rows:
        row["plans_per_s"] = row["plans"] / row["seconds"]
        row["ms_per_plan"] = 1000.0 * row["seconds"] / row["plans"]
    chunks = int(json.loads((index / "race-index.json").read_text())["chunks"])
    for row in index_rows:
        row["chunks_per_s"] = chunks / row["seconds"]
    result = {
        "plans": n,
        "distinct_fixture_plans": len(PLANS),
        "ray_cluster_start_s": cluster_start,
        "ray_actor_start_s": actor_start,
        "ray_overhead_ms_per_plan": 1000.0 * (ray_bad - local_bad) / n,
        "rows": rows,
        "index_chunks": chunks,
        "index_rows": index_rows,
    }
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "batch.json").write_text(json.dumps(result, indent=2) + "\n")
    table = [
        f"# Batch plans: {n} plans ({len(PLANS)} fixture plans x {copies} caller identities), 2-core VM",
        "",
        "| mode | seconds | plans/s | ms/plan |",
        "|---|---:|---:|---:|",
        *(f"| {r['mode']} | {r['seconds']:.2f} | {r['plans_per_s']:.1f} | {r['ms_per_plan']:.1f} |" for r in rows),
        "",
        f"Ray cluster start (`ray.init(num_cpus=2)`): {cluster_start:.1f} s; actor start (2 actors, each opening "
        f"an engine): {actor_start:.1f} s. Ray overhead per plan (bad-JSON lines, Ray minus local, actor start "
        f"excluded): {result['ray_overhead_ms_per_plan']:.2f} ms.",
        "",
        f"## Indexing the bundled corpus ({chunks} chunks), embedding locally or on Ray actors",
        "",
        "| mode | seconds | chunks/s |",
        "|---|---:|---:|",
        *(f"| {r['mode']} | {r['seconds']:.1f} | {r['chunks_per_s']:.1f} |" for r in index_rows),
        "",
    ]
    (out / "batch.md").write_text("\n".join(table))
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
