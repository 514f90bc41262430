"""Benchmark: 2-hop expansion through the graph adapter's scan path beside raw networkx.

One synthetic power-law-ish MultiDiGraph (seeded RNG), one adapter over that same graph
object (``GraphAdapter.from_graph``). For each seed, side by side in one run:

* ``raw``  — ``nx.single_source_shortest_path_length(G, seed, cutoff=2)``;
* ``walk`` — the adapter's bounded walk alone (``backends.graph.traverse.bounded_reach``);
* ``scan`` — a ``ScanRequest`` built and answered by ``await adapter.scan(...)``: walk,
  ordering, hits with custody, the worker-thread hop.

Each scan's hit set is checked against the raw reach. Per-seed p50/p95 and the
RACE/raw overhead ratios go to ``benchmarks/out/graph_expansion.json`` and ``.md``.

    python -m benchmarks.bench_graph_expansion [--nodes N --edges M --seeds S] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import networkx as nx

from backends.graph import GraphAdapter
from backends.graph.traverse import bounded_reach
from backends.ingest.corpus import EDGE_RELATIONS
from rsc import GraphPattern, Query, ScanRequest

OUT = Path(__file__).parent / "out"
_ALPHA = 0.6
_K = 10_000
_DOC_SHARE = 0.8
_WARMUP = 5


def synthetic_graph(nodes: int, edges: int, seed: int) -> Any:
    """A graph in the adapter's layout whose in- and out-degrees follow one Zipf-like ranking.

    The same ranking for both ends makes hubs hubs in both directions, so a 2-hop walk
    through one reaches thousands of nodes, as citation and mention graphs do.
    """
    rng = random.Random(seed)
    n_docs = int(nodes * _DOC_SHARE)
    ids = [f"doc-{i:06d}" for i in range(n_docs)] + [f"entity:e-{i:06d}" for i in range(nodes - n_docs)]
    ranked = ids[:]
    rng.shuffle(ranked)
    cum: list[float] = []
    total = 0.0
    for r in range(nodes):
        total += (r + 1) ** -_ALPHA
        cum.append(total)
    srcs = rng.choices(ranked, cum_weights=cum, k=edges)
    dsts = rng.choices(ranked, cum_weights=cum, k=edges)
    graph = nx.MultiDiGraph()
    graph.graph["edges_source"] = {"path": "edges.jsonl", "source_hash": "sha256:" + "0" * 64}
    for i, doc in enumerate(ids[:n_docs]):
        graph.add_node(
            doc,
            kind="document",
            metadata={"doc_id": doc, "doc_type": ("adr", "changelog", "runbook")[i % 3]},
            chunks=(f"{doc}#0",),
            title=doc,
            text=f"synthetic document {doc}",
            source_path=f"docs/{doc}.md",
            line_start=1,
            line_end=9,
            char_start=0,
            char_end=200,
            source_hash="sha256:" + "1" * 64,
        )
    first_line: dict[str, int] = {}
    for line, (src, dst) in enumerate(zip(srcs, dsts, strict=True), start=1):
        if src == dst:
            continue
        graph.add_edge(src, dst, key=EDGE_RELATIONS[line % len(EDGE_RELATIONS)], line=line)
        for end in (src, dst):
            first_line.setdefault(end, line)
    for entity in ids[n_docs:]:
        line = first_line.get(entity, 0)
        graph.add_node(entity, kind="entity", line=line, text=f"edge line {line}")
    return graph


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _summary(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000.0 for v in values_s]
    return {
        "p50_ms": round(_percentile(ms, 0.50), 4),
        "p95_ms": round(_percentile(ms, 0.95), 4),
        "mean_ms": round(statistics.fmean(ms), 4),
        "max_ms": round(max(ms), 4),
    }


def _request(seed_id: str, n: int) -> ScanRequest:
    return ScanRequest(
        obligation=f"bench-{n}",
        rsc_id="graph.traverse",
        rsc_version="1.0.0",
        backend="graph",
        mode="graph_khop",
        query=Query(ids=(seed_id,), pattern=GraphPattern(direction="out", depth=2, node_budget=1_000_000)),
        k=_K,
    )


@dataclass
class Pass:
    """One measured pass over the seeds: per-seed seconds of each path, and what was checked."""

    raw_s: list[float] = field(default_factory=list)
    walk_s: list[float] = field(default_factory=list)
    scan_s: list[float] = field(default_factory=list)
    reached: list[int] = field(default_factory=list)
    hits: int = 0
    truncated: int = 0
    mismatches: list[str] = field(default_factory=list)
    full_collections: int = 0

    def report(self) -> dict[str, Any]:
        raw, walk, scan = _summary(self.raw_s), _summary(self.walk_s), _summary(self.scan_s)
        per_seed_ratio = [s / r for s, r in zip(self.scan_s, self.raw_s, strict=True) if r > 0]
        return {
            "raw_networkx": raw,
            "race_walk": walk,
            "race_scan": scan,
            "overhead": {
                "scan_over_raw_p50": round(scan["p50_ms"] / raw["p50_ms"], 2),
                "scan_over_raw_p95": round(scan["p95_ms"] / raw["p95_ms"], 2),
                "scan_over_raw_total": round(sum(self.scan_s) / sum(self.raw_s), 2),
                "walk_over_raw_total": round(sum(self.walk_s) / sum(self.raw_s), 2),
                "per_seed_ratio_p50": round(_percentile(per_seed_ratio, 0.5), 2),
                "scan_minus_walk_us_per_hit": round((sum(self.scan_s) - sum(self.walk_s)) / max(1, self.hits) * 1e6, 2),
            },
            "full_gc_collections": self.full_collections,
        }


def measure_pass(adapter: GraphAdapter, graph: Any, chosen: list[str]) -> Pass:
    """Raw networkx, the bare walk and the full scan for each seed, interleaved seed by seed."""
    out = Pass()
    full_before = gc.get_stats()[2]["collections"]

    async def measure() -> None:
        for n, seed_id in enumerate(chosen):
            a = time.perf_counter()
            oracle = nx.single_source_shortest_path_length(graph, seed_id, cutoff=2)
            b = time.perf_counter()
            bounded_reach(graph, (seed_id,), relations=None, direction="out", depth=2, node_budget=1_000_000)
            c = time.perf_counter()
            result = await adapter.scan(_request(seed_id, n))
            d = time.perf_counter()
            if n < _WARMUP:
                continue
            out.raw_s.append(b - a)
            out.walk_s.append(c - b)
            out.scan_s.append(d - c)
            out.hits += len(result.hits)
            expected = {node: hop for node, hop in oracle.items() if node != seed_id}
            out.reached.append(len(expected))
            got = {h.doc_id: int(h.custody.score) for h in result.hits}
            if len(expected) > _K:
                out.truncated += 1
                ok = result.total_matches == len(expected) and all(expected.get(k) == v for k, v in got.items())
            else:
                ok = got == expected and result.model_calls == 0 and not result.gaps
            if not ok:
                out.mismatches.append(seed_id)

    anyio.run(measure)
    out.full_collections = gc.get_stats()[2]["collections"] - full_before
    return out


def run(nodes: int, edges: int, seeds: int, rng_seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    graph = synthetic_graph(nodes, edges, rng_seed)
    t1 = time.perf_counter()
    adapter = GraphAdapter.from_graph(graph, corpus_revision=f"synthetic-{rng_seed}")
    t2 = time.perf_counter()
    picker = random.Random(rng_seed + 1)
    all_nodes = sorted(graph.nodes)
    chosen = [all_nodes[picker.randrange(len(all_nodes))] for _ in range(seeds + _WARMUP)]
    gc.collect()
    default = measure_pass(adapter, graph, chosen)
    # A long-running process that has loaded its indexes can move them out of the
    # collector's reach; hit materialization allocates enough to trigger full collections
    # that otherwise walk the whole graph, so the second pass shows that cost apart.
    gc.collect()
    gc.freeze()
    try:
        frozen = measure_pass(adapter, graph, chosen)
    finally:
        gc.unfreeze()
    mismatches = sorted(set(default.mismatches) | set(frozen.mismatches))
    reached = [float(r) for r in default.reached]
    return {
        "schema_version": "race.bench/1",
        "benchmark": "graph_expansion",
        "params": {"nodes": nodes, "edges": edges, "seeds": seeds, "rng_seed": rng_seed, "depth": 2, "k": _K},
        "graph": {
            "nodes": graph.number_of_nodes(),
            "edges": graph.number_of_edges(),
            "max_out_degree": max(d for _, d in graph.out_degree()),
            "generate_s": round(t1 - t0, 3),
            "from_graph_s": round(t2 - t1, 3),
        },
        "reached_per_seed": {
            "p50": _percentile(reached, 0.5),
            "p95": _percentile(reached, 0.95),
            "max": max(default.reached),
            "hits_total": default.hits,
            "truncated_at_k": default.truncated,
        },
        **default.report(),
        "gc_frozen": frozen.report(),
        "hit_sets_match_networkx": not mismatches,
        "mismatched_seeds": mismatches[:10],
        "environment": {
            "python": platform.python_version(),
            "networkx": nx.__version__,
            "machine": platform.machine(),
            "system": platform.system(),
        },
    }


def _table(section: dict[str, Any]) -> list[str]:
    rows = [
        ("raw `single_source_shortest_path_length(cutoff=2)`", section["raw_networkx"]),
        ("RACE walk (`bounded_reach`)", section["race_walk"]),
        ("RACE `adapter.scan` (request, walk, hits, thread hop)", section["race_scan"]),
    ]
    o = section["overhead"]
    return [
        "| path | p50 ms | p95 ms | mean ms | max ms |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {t['p50_ms']:.3f} | {t['p95_ms']:.3f} | {t['mean_ms']:.3f} | {t['max_ms']:.3f} |"
            for name, t in rows
        ),
        "",
        (
            f"Overhead RACE scan / raw: p50 {o['scan_over_raw_p50']}x, p95 {o['scan_over_raw_p95']}x, "
            f"total {o['scan_over_raw_total']}x (per-seed ratio p50 {o['per_seed_ratio_p50']}x). "
            f"Walk alone / raw: {o['walk_over_raw_total']}x. Scan minus walk: "
            f"{o['scan_minus_walk_us_per_hit']} us per hit. Full GC collections during the pass: "
            f"{section['full_gc_collections']}."
        ),
    ]


def render_markdown(report: dict[str, Any]) -> str:
    p, g = report["params"], report["graph"]
    reach, env = report["reached_per_seed"], report["environment"]
    setting = (
        f"Synthetic MultiDiGraph: {g['nodes']} nodes, {g['edges']} edges (asked {p['nodes']}/{p['edges']}, "
        f"Zipf-like degrees, max out-degree {g['max_out_degree']}, RNG seed {p['rng_seed']}). "
        f"{p['seeds']} seeds, depth 2, direction out, all relations, k={p['k']}."
    )
    reached = (
        f"Nodes reached per seed (excluding the seed): p50 {reach['p50']:.0f}, p95 {reach['p95']:.0f}, "
        f"max {reach['max']}; {reach['hits_total']} hits in all; {reach['truncated_at_k']} seeds exceeded k."
    )
    setup = (
        f"Setup: graph generated in {g['generate_s']} s; `GraphAdapter.from_graph` "
        f"(layout check + generation fingerprint) {g['from_graph_s']} s."
    )
    lines = [
        "# Graph expansion: 2-hop through RACE vs raw networkx",
        "",
        setting,
        reached,
        f"Hit sets equal networkx's reach for every seed: {'yes' if report['hit_sets_match_networkx'] else 'NO'}.",
        "",
        "## Default garbage collector",
        "",
        *_table(report),
        "",
        "## Same seeds after `gc.freeze()` (loaded graph outside the collector's reach)",
        "",
        *_table(report["gc_frozen"]),
        "",
        setup,
        f"Environment: Python {env['python']}, networkx {env['networkx']}, {env['system']} {env['machine']}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_graph_expansion", description=__doc__)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=500_000)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--rng-seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="10k nodes, 50k edges, 20 seeds")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.edges, args.seeds = 10_000, 50_000, 20
    report = run(args.nodes, args.edges, args.seeds, args.rng_seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "graph_expansion.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    markdown = render_markdown(report)
    (args.out / "graph_expansion.md").write_text(markdown)
    sys.stdout.write(markdown)
    return 0 if report["hit_sets_match_networkx"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
