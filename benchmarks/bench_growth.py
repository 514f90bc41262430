"""Benchmark: how RACE's query latency grows with the corpus, 10k -> 100k -> 1M chunks; sharded
instances against one index; indexing local vs on Ray; Ray's scheduling overhead per plan.

Queries. Five query types, each a real plan through ``Engine.run`` (planning, generation
reads, the scan, custody, the receipt), every plan distinct (no plan, receipt or result
cache hit); every engine (scale and layout) is open at once and the same query texts run on
each, all (engine, type) pairs interleaved query by query:

* ``bm25`` — a ``lexical`` obligation: tantivy BM25 (``tantivy.bm25``);
* ``exact_filtered`` — ``conceptual`` with a ``doc_type`` filter (10 % of the rows) and
  ``exhaustive_for_declared_fragment`` coverage: the exact matrix (``lancedb.exact_matrix``);
* ``ann`` — ``conceptual``, ``heuristic``, allowed only ``lancedb.ann_prefilter``: LanceDB
  IVF_FLAT, partitions and probes sized to the table as ``race index`` sizes them;
* ``hybrid`` — ``broad_question``: a tantivy leg and a LanceDB leg fused by RRF, the legs the
  planner chooses (which LanceDB path it takes differs by scale: the table says which);
* ``hybrid_ann`` — the same, allowed only ``tantivy.bm25`` and ``lancedb.ann_prefilter``.

Data (``benchmarks.growth_index``). Chunk text is real: paragraphs of this machine's licences,
``/usr/share/doc`` files and Python stdlib docstrings, sampled with a seed. Vectors are
SYNTHETIC (embedding a million chunks on 2 cores would take days): a seeded Gaussian mixture
of 384-d unit vectors; query vectors come from the same mixture through an injected embedder
stub, seeded by the query text. Queries are three words of a random paragraph. The indexes
are built once into ``--cache`` (default ``/tmp/race-bench-growth``) and reused.

Sharded. When ``backends.sharding.sharded`` is present, the 100k table is also served as 2 and 4
local shards (``ShardedAdapter``, every k-th block of 10k rows per shard, the same rows in
all) and the same four query types are measured against it in the same run.

Indexing and batch (skipped with ``--quick`` or ``--no-ray``). A real-text corpus of a few
hundred paragraphs (JSONL, ``--index-docs``) is indexed with the model by ``race index``
locally, then on a local Ray cluster (``ray.init(num_cpus=2)``) with 1 and 2 embedding
workers. In the same cluster, a batch of real plans of the four types over that index runs
through ``race batch`` locally (concurrency 2) and on 2 Ray actors; the overhead per plan is
(Ray wall - local wall) / plans, with the actors' start-up (each opens an engine) measured
apart, as ``benchmarks.bench_batch`` measures it on the fixture plans.

Results go to ``benchmarks/out/growth.json``, ``growth.md`` and ``growth.png``.

    nice -n 10 .venv/bin/python -m benchmarks.bench_growth [--quick] [--queries N] [--no-ray]
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import lancedb
import numpy as np
import tantivy

from backends import Adapter
from backends.lancedb.adapter import LanceAdapter
from backends.lancedb.build import ann_nprobes, ann_partitions
from backends.tantivy.adapter import TantivyAdapter
from benchmarks.growth_index import (
    BLOCK,
    DOC_TYPES,
    SyntheticEmbedder,
    TextPool,
    ensure_index,
    mixture,
    shard_blocks,
    text_sources,
)
from race.engine import Engine
from race.state.cache import ResultCache
from rsc import canonical_pretty, fingerprint

OUT = Path(__file__).parent / "out"
CACHE = Path("/tmp/race-bench-growth")
SCALES = (10_000, 100_000, 1_000_000)
SHARDS = (2, 4)
SHARDED_SCALE = 100_000
KINDS = ("bm25", "exact_filtered", "ann", "hybrid", "hybrid_ann")
FILTER = {"field": "doc_type", "value": DOC_TYPES[3]}
K = 10
WARMUP = 3
SEED = 7


def plan_for(kind: str, text: str) -> dict[str, Any]:
    ob: dict[str, Any] = {"id": "o", "kind": "seek_support", "query": {"text": text}, "k": K}
    if kind == "bm25":
        ob["query_class"] = "lexical"
    elif kind == "exact_filtered":
        ob.update(query_class="conceptual", hard_filters=[FILTER], required_coverage="exhaustive_for_declared_fragment")
    elif kind == "ann":
        ob.update(query_class="conceptual", required_coverage="heuristic", allow_contracts=["lancedb.ann_prefilter"])
    elif kind == "hybrid_ann":
        ob.update(query_class="broad_question", allow_contracts=["tantivy.bm25", "lancedb.ann_prefilter"])
    else:
        ob["query_class"] = "broad_question"
    return {"schema_version": "race.plan/1", "root": "o", "obligations": [ob]}


def _pct(seconds: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(seconds) * 1e3, q)), 3)


def local_engine(folder: Path, embedder: SyntheticEmbedder) -> Engine:
    adapters: dict[str, Adapter] = {
        "lancedb": LanceAdapter.open(folder, embedder=embedder),
        "tantivy": TantivyAdapter.open(folder),
    }
    return Engine(adapters)


def sharded_engine(folders: Sequence[Path], embedder: SyntheticEmbedder) -> Engine:
    from backends.sharding.sharded import ShardedAdapter

    adapters: dict[str, Adapter] = {
        "lancedb": ShardedAdapter("lancedb", [LanceAdapter.open(f, embedder=embedder) for f in folders]),
        "tantivy": ShardedAdapter("tantivy", [TantivyAdapter.open(f) for f in folders]),
    }
    return Engine(adapters)


async def measure(
    engines: Sequence[tuple[Engine, Sequence[str]]], texts: dict[str, list[str]], warmup: int
) -> list[dict[str, Any]]:
    """p50/p95 of every (engine, query type), all of them interleaved query by query: round
    ``n`` runs query ``n`` of every type on every engine, in an order rotated by ``n``, so
    that the machine's load moves every figure alike."""
    pairs = [(e, kind) for e, (_, kinds) in enumerate(engines) for kind in kinds]
    seconds: dict[tuple[int, str], list[float]] = {p: [] for p in pairs}
    served: dict[tuple[int, str], set[str]] = {p: set() for p in pairs}
    gaps: dict[tuple[int, str], set[str]] = {p: set() for p in pairs}
    short: dict[tuple[int, str], int] = dict.fromkeys(pairs, 0)
    for n in range(len(texts[KINDS[0]])):
        for j in range(len(pairs)):
            e, kind = pairs[(n + j) % len(pairs)]
            engine = engines[e][0]
            plan = engine.parse(plan_for(kind, texts[kind][n]))
            # Distinct texts make every plan new on one engine; the caches are emptied all the same.
            engine.result_cache = ResultCache()
            engine.clear_receipt_cache()
            started = time.perf_counter()
            receipt = await engine.run(plan)
            elapsed = time.perf_counter() - started
            if receipt.operational.receipt_cache == "hit" or receipt.operational.result_cache.get("hits"):
                raise SystemExit(f"{kind}: a cache answered a query meant to be measured")
            if n < warmup:
                continue
            seconds[(e, kind)].append(elapsed)
            served[(e, kind)].update(receipt.obligations[0].served_by)
            gaps[(e, kind)].update(g.kind.value for g in receipt.gaps)
            short[(e, kind)] += int(len(receipt.evidence) < K)
    out: list[dict[str, Any]] = [{} for _ in engines]
    for e, kind in pairs:
        out[e][kind] = {
            "p50_ms": _pct(seconds[(e, kind)], 50),
            "p95_ms": _pct(seconds[(e, kind)], 95),
            "mean_ms": round(float(np.mean(seconds[(e, kind)])) * 1e3, 3),
            "queries": len(seconds[(e, kind)]),
            "served_by": sorted(served[(e, kind)]),
            "gaps": sorted(gaps[(e, kind)]),
            "fewer_than_k": short[(e, kind)],
        }
    return out


def _check(kind: str, result: dict[str, Any], where: str) -> None:
    """Each query type was served by the path it is meant to measure, with no gap."""
    wanted = {
        "bm25": ("tantivy.bm25",),
        "exact_filtered": ("lancedb.exact_matrix",),
        "ann": ("lancedb.ann_prefilter",),
        "hybrid": ("tantivy.bm25",),
        "hybrid_ann": ("tantivy.bm25", "lancedb.ann_prefilter"),
    }[kind]
    ids = {s.split("@")[0] for s in result["served_by"]}
    if not set(wanted) <= ids or result["gaps"]:
        raise SystemExit(f"{where}: {kind} was served by {result['served_by']} with gaps {result['gaps']}")


def query_texts(pool: TextPool, queries: int, salt: int) -> dict[str, list[str]]:
    drawn = pool.queries((queries + WARMUP) * len(KINDS), SEED + salt)
    n = queries + WARMUP
    return {kind: drawn[i * n : (i + 1) * n] for i, kind in enumerate(KINDS)}


def _ray_shards_available() -> bool:
    try:
        import backends.sharding.ray  # noqa: F401
    except ImportError:
        return False
    return True


def sharded_available() -> bool:
    try:
        import backends.sharding.sharded  # noqa: F401
    except ImportError:
        return False
    return True


def ray_sharded_engine(folders: Sequence[Path]) -> Engine:
    """BM25 shards each opened and scanned in a Ray actor (``backends.sharding.ray.RayShard``).
    Only tantivy: a Ray shard opens LanceDB with the model, and these tables' vectors are not
    the model's."""
    from backends.sharding.ray import RayShard
    from backends.sharding.sharded import ShardedAdapter

    return Engine({"tantivy": ShardedAdapter("tantivy", [RayShard(TantivyAdapter, f) for f in folders])})


def run_queries(
    scales: Sequence[int],
    queries: int,
    cache: Path,
    pool: TextPool,
    shards: Sequence[int],
    log: Callable[[str], None],
    *,
    ray_shards: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    embedder = SyntheticEmbedder(mixture(SEED), SEED)
    builds: dict[str, Any] = {}
    for rows in scales:
        builds[str(rows)] = ensure_index(cache / f"idx-{rows}", range(rows // BLOCK), SEED, pool, log)
    for n in shards:
        for i, blocks in enumerate(shard_blocks(SHARDED_SCALE, n)):
            key = f"{SHARDED_SCALE}-shard{i}of{n}"
            builds[key] = ensure_index(cache / f"idx-{key}", blocks, SEED, pool, log)
    configs: list[tuple[int, str, Callable[[], Engine], tuple[str, ...]]] = []
    for rows in scales:
        configs.append((rows, "local", partial(local_engine, cache / f"idx-{rows}", embedder), KINDS))
        if rows == SHARDED_SCALE:
            for n in shards:
                dirs = [cache / f"idx-{SHARDED_SCALE}-shard{i}of{n}" for i in range(n)]
                configs.append((rows, f"{n} shards", partial(sharded_engine, dirs, embedder), KINDS))
            for n in shards if ray_shards else ():
                dirs = [cache / f"idx-{SHARDED_SCALE}-shard{i}of{n}" for i in range(n)]
                configs.append((rows, f"{n} shards, Ray actors", partial(ray_sharded_engine, dirs), ("bm25",)))
    if ray_shards:
        _start_ray()
    engines: list[tuple[Engine, Sequence[str]]] = []
    opened: list[float] = []
    for _, _, make, kinds in configs:
        started = time.perf_counter()
        engines.append((make(), kinds))
        opened.append(time.perf_counter() - started)
    # The same query texts on every engine (each engine's caches are its own).
    results = anyio.run(measure, engines, query_texts(pool, queries, 0), WARMUP)
    rows_out: list[dict[str, Any]] = []
    for (rows, layout, _, kinds), result, seconds in zip(configs, results, opened, strict=True):
        for kind in kinds:
            _check(kind, result[kind], f"{rows} {layout}")
        rows_out.append({"chunks": rows, "layout": layout, "open_s": round(seconds, 3), **result})
        log(f"  {rows} {layout}: " + ", ".join(f"{k} p50 {result[k]['p50_ms']:.2f} ms" for k in kinds))
    if ray_shards:
        import ray

        ray.shutdown()
    return rows_out, builds


def _start_ray() -> None:
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024)


# -- indexing and batch on Ray ----------------------------------------------------------------


def write_corpus(pool: TextPool, docs: int, folder: Path) -> Path:
    """``docs`` paragraphs of the pool, seeded, as a JSONL corpus (one chunk each, mostly)."""
    rng = np.random.default_rng([SEED, 0x1DE])
    picks = rng.choice(len(pool.sources), size=docs, replace=False)
    path = folder / "corpus.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for n, i in enumerate(sorted(int(p) for p in picks)):
            source, text = pool.sources[i]
            doc = {"id": f"p{n:04d}", "title": Path(source).name, "text": text, "doc_type": DOC_TYPES[n % 10]}
            out.write(json.dumps(doc) + "\n")
    return path


def run_ray(pool: TextPool, docs: int, plans_per_kind: int, log: Callable[[str], None]) -> dict[str, Any]:
    import ray

    from race.indexing.distributed import build_index_on_ray
    from race.indexing.indexing import build_index

    work = Path(tempfile.mkdtemp(prefix="race-bench-growth-ray-"))
    try:
        corpus = write_corpus(pool, docs, work)
        index_rows: list[dict[str, Any]] = []
        started = time.perf_counter()
        build_index(corpus, work / "local")
        index_rows.append({"mode": "race index, local", "seconds": time.perf_counter() - started})
        chunks = int(json.loads((work / "local" / "race-index.json").read_text())["chunks"])
        log(f"  indexed {chunks} chunks locally in {index_rows[-1]['seconds']:.1f} s")
        started = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024)
        cluster_start = time.perf_counter() - started
        try:
            for workers in (1, 2):
                started = time.perf_counter()
                build_index_on_ray(corpus, work / f"ray-{workers}", address="auto", workers=workers)
                index_rows.append(
                    {"mode": f"race index --ray, {workers} worker(s)", "seconds": time.perf_counter() - started}
                )
                log(f"  indexed on Ray, {workers} worker(s), in {index_rows[-1]['seconds']:.1f} s")
            same = _same_vectors(work / "local", [work / f"ray-{w}" for w in (1, 2)])
            batch = _batch_overhead(pool, work / "local", plans_per_kind, log)
        finally:
            ray.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for row in index_rows:
        row["chunks_per_s"] = round(chunks / row["seconds"], 2)
        row["vs_local"] = round(index_rows[0]["seconds"] / row["seconds"], 3)
        row["seconds"] = round(row["seconds"], 2)
    return {
        "index_chunks": chunks,
        "index_documents": docs,
        "index_rows": index_rows,
        "ray_vectors_equal_local": same,
        "ray_cluster_start_s": round(cluster_start, 2),
        "batch": batch,
    }


def _batch_overhead(pool: TextPool, index: Path, plans_per_kind: int, log: Callable[[str], None]) -> dict[str, Any]:
    """``race batch``'s two ways of running plan lines, timed with warm engines on both sides:
    one local engine running ``race.evaluation.batch.run_line`` 2 at a time (``run_outcomes``, as
    ``race batch`` does), and 2 Ray actors (``race.evaluation.batch_ray.PlanRunner``, the body of
    ``race batch --ray``'s actors) fed as ``run_batch_on_ray`` feeds them (2 queued per actor,
    records taken as they come). Each side first runs one warm-up plan per engine, so that
    neither the actors' start (each opens an engine and loads the model) nor the first model
    call is in the figures; the actors' start is reported apart."""
    import orjson
    import ray

    from race.evaluation.batch import LineResult, plan_lines, run_line, run_outcomes
    from race.evaluation.batch_ray import PlanRunner
    from race.options import EngineOptions

    texts = query_texts(pool, plans_per_kind, 99)
    warm = plan_lines([orjson.dumps(plan_for(k, texts[k][0])) for k in ("exact_filtered", "hybrid")])
    lines = [orjson.dumps(plan_for(k, texts[k][n])) for n in range(WARMUP, WARMUP + plans_per_kind) for k in KINDS]
    options = EngineOptions(index=index)
    out: dict[str, Any] = {"plans": len(lines)}
    for label, items in (("real", plan_lines(lines)), ("bad_json", plan_lines([b"not json"] * len(lines)))):
        engine = options.open()
        for item in warm:
            anyio.run(partial(run_line, engine, item, plans="warm"))
        local: dict[int, LineResult] = {}

        async def run(i: int, engine: Engine = engine, items: Any = items) -> LineResult:
            return await run_line(engine, items[i], plans="plans.jsonl")

        started = time.perf_counter()
        anyio.run(partial(run_outcomes, run, len(items), concurrency=2, emit=local.__setitem__))
        local_s = time.perf_counter() - started
        started = time.perf_counter()
        runner = ray.remote(num_cpus=1)(PlanRunner)
        actors = [runner.remote(options, "plans.jsonl") for _ in range(2)]
        ray.get([a.run.remote(item) for a, item in zip(actors, warm, strict=True)])
        actor_start = time.perf_counter() - started
        try:
            started = time.perf_counter()
            remote = _feed(actors, items)
            ray_s = time.perf_counter() - started
        finally:
            for actor in actors:
                ray.kill(actor)
        differ = [i for i in range(len(items)) if _normal(local[i].record) != _normal(remote[i].record)]
        out[label] = {
            "local_concurrency2_s": round(local_s, 3),
            "ray_2_actors_s": round(ray_s, 3),
            "ray_actor_start_s": round(actor_start, 2),
            "overhead_ms_per_plan": round(1e3 * (ray_s - local_s) / len(items), 2),
            "records_differing": len(differ),
            "differing_gaps": sorted({g for i in differ for g in _gap_kinds(local[i].record, remote[i].record)}),
        }
        log(f"  batch {label}: local {local_s:.2f} s, Ray {ray_s:.2f} s, {len(differ)} records differ")
    return out


def _feed(actors: Sequence[Any], items: Sequence[Any]) -> dict[int, Any]:
    """``run_batch_on_ray``'s dispatch over already started actors: 2 plans queued per actor."""
    import ray

    todo = iter(range(len(items)))
    pending: dict[Any, tuple[int, int]] = {}
    done: dict[int, Any] = {}

    def submit(actor: int) -> None:
        index = next(todo, None)
        if index is not None:
            pending[actors[actor].run.remote(items[index])] = (index, actor)

    for actor in range(len(actors)):
        for _ in range(2):
            submit(actor)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        index, actor = pending.pop(ready[0])
        done[index] = ray.get(ready[0])
        submit(actor)
    return done


def _normal(record: bytes) -> bytes:
    from race.evaluation.batch import receipt_of

    receipt = receipt_of(record)
    return receipt.normalized_bytes() if receipt is not None else record


def _gap_kinds(*records: bytes) -> set[str]:
    from race.evaluation.batch import receipt_of

    kinds: set[str] = set()
    for record in records:
        receipt = receipt_of(record)
        kinds |= {g.kind.value for g in receipt.gaps} if receipt is not None else {"error record"}
    return kinds


def _same_vectors(local: Path, others: Sequence[Path]) -> bool:
    def vectors(index: Path) -> bytes:
        table = lancedb.connect(str(index / "lancedb")).open_table("chunks").to_arrow().sort_by("chunk_id")
        return bytes(np.asarray(table.column("vector").combine_chunks().flatten(), dtype=np.float32).tobytes())

    reference = vectors(local)
    return all(vectors(o) == reference for o in others)


# -- report -----------------------------------------------------------------------------------


def growth_factors(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """p50 at the largest local scale over p50 at the one before, per query type (and the ratio
    of the scales, against which sub-linear is judged)."""
    local = sorted((r for r in rows if r["layout"] == "local"), key=lambda r: r["chunks"])
    out: dict[str, dict[str, float]] = {}
    for small, large in itertools.pairwise(local):
        key = f"{small['chunks']}->{large['chunks']}"
        out[key] = {"scale": large["chunks"] / small["chunks"]}
        for kind in KINDS:
            out[key][kind] = round(large[kind]["p50_ms"] / small[kind]["p50_ms"], 3)
    return out


_SHARD_MARKERS = {
    ("2", False): ("s", 1.12),
    ("4", False): ("D", 1.26),
    ("2", True): ("^", 0.89),
    ("4", True): ("v", 0.79),
}


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["queries"]
    local = sorted((r for r in rows if r["layout"] == "local"), key=lambda r: r["chunks"])
    panels = 2 if report.get("ray") else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.6), squeeze=False)
    ax = axes[0][0]
    xs = [r["chunks"] for r in local]
    for kind, color in zip(KINDS, ("C0", "C1", "C2", "C3", "C4"), strict=True):
        ax.plot(xs, [r[kind]["p50_ms"] for r in local], "o-", color=color, label=f"{kind} p50")
        ax.plot(xs, [r[kind]["p95_ms"] for r in local], "x--", color=color, alpha=0.6, label=f"{kind} p95")
        for r in rows:
            if r["layout"] != "local" and kind in r:
                # Nudged apart along x so that they do not hide each other (and the local point).
                marker, nudge = _SHARD_MARKERS[(r["layout"].split()[0], "Ray" in r["layout"])]
                ax.plot([r["chunks"] * nudge], [r[kind]["p50_ms"]], marker, color=color, mfc="none", ms=7)
    if len(xs) > 1:
        base = local[0]["bm25"]["p50_ms"]
        ax.plot(xs, [base * x / xs[0] for x in xs], ":", color="grey", label="linear (from bm25 at 10k)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks (vectors synthetic, text real)")
    ax.set_ylabel("ms per query through Engine.run")
    sharded = (
        "\nopen at 100k: 2/4 local shards (square/diamond), BM25 on 2/4 Ray shards (triangle up/down)"
        if any(r["layout"] != "local" for r in rows)
        else ""
    )
    ax.set_title("Query latency vs corpus size" + sharded, fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    if panels == 2:
        ray = report["ray"]
        ax2 = axes[0][1]
        modes = [r["mode"].replace("race index", "").strip(" ,") or "local" for r in ray["index_rows"]]
        ax2.bar(modes, [r["chunks_per_s"] for r in ray["index_rows"]], color=["C0", "C5", "C6"])
        ax2.set_ylabel("chunks/s (real text, MiniLM embeddings)")
        ax2.set_title(f"race index of {ray['index_chunks']} chunks: local vs Ray workers", fontsize=9)
        ax2.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_ray(ray: dict[str, Any]) -> list[str]:
    b = ray["batch"]
    where = f" (measured in a separate run, `{ray['from']}`)" if ray.get("from") else ""
    lines = [
        f"## Indexing {ray['index_chunks']} real-text chunks ({ray['index_documents']} paragraphs, MiniLM "
        f"embeddings), local vs Ray (`ray.init(num_cpus=2)`){where}",
        "",
        "| mode | seconds | chunks/s | vs local |",
        "|---|---:|---:|---:|",
        *(
            f"| {r['mode']} | {r['seconds']:.1f} | {r['chunks_per_s']:.2f} | {r['vs_local']:.2f}x |"
            for r in ray["index_rows"]
        ),
        "",
        f"Vectors of both Ray builds byte-equal to the local build's: {ray['ray_vectors_equal_local']}. Cluster "
        f"start {ray['ray_cluster_start_s']:.1f} s (in no row).",
        "",
        f"## Ray's scheduling overhead per plan in `race batch` ({b['plans']} plans, warm engines on both sides)",
        "",
        "| plans | local, concurrency 2: s | 2 Ray actors: s | actor start s | overhead ms/plan | records differing |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, name in (("real", "real plans of the query types over that index"), ("bad_json", "bad-JSON lines")):
        m = b[label]
        gaps = f" ({', '.join(m['differing_gaps'])})" if m["records_differing"] else ""
        lines.append(
            f"| {name} | {m['local_concurrency2_s']:.2f} | {m['ray_2_actors_s']:.2f} | {m['ray_actor_start_s']:.1f} "
            f"| {m['overhead_ms_per_plan']:.2f} | {m['records_differing']}{gaps} |"
        )
    if b["real"]["overhead_ms_per_plan"] < 0:
        lines += [
            "",
            "The real plans' figure is negative: a speed-up, not an overhead. The local batch runs its plans in one "
            "process (2 at a time on threads), the actors in two processes, and these plans embed their query "
            "with the model; the scheduling overhead is the bad-JSON row.",
        ]
    lines += [
        "",
        "Overhead per plan = (Ray wall - local wall) / plans, both after one warm-up plan per engine; bad-JSON "
        "lines fail at once, so their overhead is nearly all scheduling and transport. The actors are "
        "`race batch --ray`'s (`PlanRunner`), fed as `run_batch_on_ray` feeds them. `benchmarks/results/batch.md` "
        "measures the same on the fixture plans, actor start included per invocation.",
    ]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    p, env = report["params"], report["environment"]
    lines = [
        "# Growth: query latency 10k -> 1M chunks, sharded vs one index, indexing and batch on Ray",
        "",
        (
            f"Run `{report['run_id']}`, 2-core shared VM, `nice -n 10`. Every query is a distinct plan through "
            f"`Engine.run` (k={p['k']}), {p['queries']} measured queries per type and "
            f"layout after {p['warmup']} warm-up ones. **Vectors are synthetic** at every scale (a seeded mixture of "
            f"{p['dims']}-d unit vectors, {p['clusters']} clusters); query vectors come from the same mixture through "
            "an injected embedder stub (the benchmark's query-vector source only, seeded by the query text). **Chunk "
            f"text is real**: {p['paragraphs']} paragraphs of this machine's licences, /usr/share/doc files and Python "
            "stdlib docstrings, 1 to 3 per chunk, seeded; a query is three words of a random paragraph. "
            f"exact_filtered: `doc_type = {FILTER['value']}` (10 % of the rows), exhaustive coverage. ann: "
            "IVF_FLAT, partitions round(sqrt(rows)), nprobes max(20, partitions/16) widened until k rows. hybrid: "
            "the planner's legs, fused by RRF; hybrid_ann: the same with only tantivy.bm25 and "
            "lancedb.ann_prefilter allowed. Every engine (scale, layout) is open at once and runs the same query "
            "texts, all (engine, type) pairs interleaved query by query."
        ),
        "",
        "| chunks | layout | query | p50 ms | p95 ms | served by |",
        "|---:|---|---|---:|---:|---|",
    ]
    for row in report["queries"]:
        for kind in (k for k in KINDS if k in row):
            m = row[kind]
            lines.append(
                f"| {row['chunks']:,} | {row['layout']} | {kind} | {m['p50_ms']:.2f} | {m['p95_ms']:.2f} | "
                f"{', '.join(s.split('@')[0] for s in m['served_by'])} |"
            )
    lines += ["", "p50 growth factor (p50 at the larger scale / p50 at the smaller; linear = the scale ratio):", ""]
    lines += ["| scales | ratio of chunks | " + " | ".join(KINDS) + " |", "|---|---:|" + "---:|" * len(KINDS)]
    for key, f in report["growth_p50"].items():
        lines.append(f"| {key} | {f['scale']:.0f}x | " + " | ".join(f"{f[k]:.2f}x" for k in KINDS) + " |")
    ann = report["params"]["ann_by_scale"]
    lines += [
        "",
        "ANN probes by scale: "
        + ", ".join(f"{s}: {a['partitions']} partitions, {a['nprobes']} probed" for s, a in ann.items())
        + ".",
    ]
    sharded = [r for r in report["queries"] if r["layout"] != "local"]
    if sharded:
        lines.append(
            f"Sharded rows: the {SHARDED_SCALE:,}-chunk table split into local shards (`backends.sharding.sharded."
            "ShardedAdapter`, every n-th block of 10k rows per shard), scatter-gather with an exact top-k merge; "
            "`n shards` are in-process shards, `n shards, Ray actors` are tantivy shards each opened and scanned in "
            "a Ray actor (`backends.sharding.ray.RayShard`, `ray.init(num_cpus=2)`), BM25 only: a Ray shard opens "
            "LanceDB with the model, and these tables' vectors are synthetic. Sharded BM25 ranks by per-shard "
            "BM25 (each shard's own IDF), so its top-k can differ from one index's."
        )
    else:
        lines.append(f"Sharded rows: not measured ({report['sharded_note']}).")
    ray = report.get("ray")
    if ray:
        lines += ["", *render_ray(ray)]
    else:
        lines += ["", f"Indexing and batch on Ray: not measured in this run ({report['ray_note']})."]
    builds = "; ".join(
        f"{k}: " + ", ".join(f"{n} {s} s" for n, s in v.items()) for k, v in report["builds_s"].items() if v
    )
    lines += [
        "",
        (
            f"Index builds this run (cached in {p['cache']} otherwise): {builds or 'none, all reused'}. Environment: "
            f"Python {env['python']}, lancedb {env['lancedb']}, tantivy-py {env['tantivy']}, numpy {env['numpy']}, "
            f"{env['system']} {env['machine']}, git {env['git']}."
        ),
        "",
    ]
    return "\n".join(lines)


def _git() -> str:
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_growth", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k chunks only, no shards, no Ray: under a minute")
    parser.add_argument("--queries", type=int, default=None, help="measured queries per type (default 100; 20 quick)")
    parser.add_argument("--scales", type=int, nargs="*", default=None, help="chunk counts, multiples of 10000")
    parser.add_argument("--no-ray", action="store_true", help="skip indexing and batch on Ray")
    parser.add_argument("--ray-only", action="store_true", help="only indexing and batch on Ray: growth_ray.json")
    parser.add_argument("--ray-from", type=Path, default=None, help="a growth_ray.json to report instead of measuring")
    parser.add_argument("--no-shards", action="store_true", help="skip the sharded rows")
    parser.add_argument("--no-ray-shards", action="store_true", help="skip the BM25 rows on Ray shard actors")
    parser.add_argument("--index-docs", type=int, default=320, help="paragraphs of the Ray indexing corpus")
    parser.add_argument("--batch-plans", type=int, default=25, help="plans per query type in the Ray batch")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the indexes are built once and kept")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    scales = tuple(args.scales or ((10_000,) if args.quick else SCALES))
    queries = args.queries or (20 if args.quick else 100)
    if any(s <= 0 or s % BLOCK for s in scales) or queries < 1:
        parser.error(f"--scales must be positive multiples of {BLOCK}; --queries >= 1")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    pool = TextPool(text_sources())
    log(f"text pool: {len(pool.sources)} paragraphs")
    if args.ray_only:
        measured = run_ray(pool, args.index_docs, args.batch_plans, log)
        measured["environment"] = {"git": _git(), "text_digest": pool.digest}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "growth_ray.json").write_text(canonical_pretty(measured) + "\n", encoding="utf-8")
        sys.stdout.write("\n".join(render_ray(measured)) + "\n")
        return 0
    shards: tuple[int, ...] = ()
    sharded_note = ""
    if args.quick or args.no_shards or SHARDED_SCALE not in scales:
        sharded_note = "skipped in this run (--quick, --no-shards, or no 100k scale)"
    elif not sharded_available():
        sharded_note = "backends.sharding.sharded is not in this tree"
    else:
        shards = SHARDS
    ray_shards = bool(shards) and not args.no_ray_shards and _ray_shards_available()
    rows, builds = run_queries(scales, queries, args.cache, pool, shards, log, ray_shards=ray_shards)
    ray_note = "--quick or --no-ray"
    ray = None
    if args.ray_from is not None:
        ray = {**json.loads(args.ray_from.read_text()), "from": f"--ray-only, {args.ray_from.name}"}
    elif not (args.quick or args.no_ray):
        try:
            ray = run_ray(pool, args.index_docs, args.batch_plans, log)
        except Exception as exc:  # the query figures stand on their own; say why these are missing
            ray_note = f"failed: {type(exc).__name__}: {exc}"
            log(f"Ray part {ray_note}")
    params = {
        "scales": list(scales),
        "queries": queries,
        "warmup": WARMUP,
        "k": K,
        "seed": SEED,
        "dims": 384,
        "clusters": 500,
        "paragraphs": len(pool.sources),
        "text_digest": pool.digest,
        "filter": FILTER,
        "shards": list(shards),
        "cache": str(args.cache),
        "ann_by_scale": {
            str(s): {"partitions": ann_partitions(s), "nprobes": ann_nprobes(ann_partitions(s))} for s in scales
        },
    }
    report: dict[str, Any] = {
        "schema_version": "race.bench/1",
        "benchmark": "growth",
        "run_id": fingerprint(params)[len("xxh3_128:") :][:12],
        "params": params,
        "synthetic": "vectors (documents and queries) are synthetic at every scale; chunk text is real",
        "queries": rows,
        "growth_p50": growth_factors(rows),
        "sharded_note": sharded_note,
        "ray_note": ray_note,
        "builds_s": builds,
        "environment": {
            "python": platform.python_version(),
            "lancedb": lancedb.__version__,
            "tantivy": getattr(tantivy, "__version__", "unknown"),
            "numpy": np.__version__,
            "machine": platform.machine(),
            "system": platform.system(),
            "git": _git(),
        },
    }
    if ray is not None:
        report["ray"] = ray
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "growth.json").write_text(canonical_pretty(report) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (args.out / "growth.md").write_text(markdown, encoding="utf-8")
    plot(report, args.out / "growth.png")
    sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
