"""Benchmark: the cost model's priors per access kind, measured on this machine.

Each contract's cost is ``base latency + candidates x price per candidate (+ hits x price per
hit)``, candidates counted by its access kind (``planner.access``). This measures both terms by
a least-squares fit of scan time over candidates (relative errors, so that small and large
tables weigh alike), the scans answered by the adapters directly
(``await adapter.scan(request)``: translation, the backend's search, hits with custody; no
planning, no model: the vector tables' query vectors come from the growth benchmark's seeded
stub):

* ``exact`` — ``lancedb.exact_matrix`` on the growth tables (``benchmarks.growth_index``) at
  10k and 1M rows, unfiltered and with ``doc_type`` filters keeping 10 % and 30 %: candidates
  rows x selectivity; ``tantivy.bm25`` and ``tantivy.exact`` on the same tables: candidates the
  rows (BM25 reads posting lists, so its price per row is an average, not a mechanism);
* ``ann`` — ``lancedb.ann_prefilter``/``ann_postfilter`` on both tables probing 1/64, 1/16
  and 1/8 of their IVF partitions (100 at 10k, 1000 at 1M): candidates rows x probes /
  partitions;
* ``graph`` — the graph adapter over a synthetic power-law graph (``bench_graph_expansion``'s,
  100k nodes, mean degree 3): ``graph.traverse`` 1 to 3 hops from single seeds with k=10
  (candidates: the nodes reached), the price per hit from k=10000 against k=10 on the same
  seeds, ``graph.identity`` as its base;
* ``exact`` and ``ann`` on Milvus — ``milvus.flat_prefilter`` (a FLAT collection) and
  ``milvus.ann_filtered`` (an HNSW collection, M=16, efConstruction=200), milvus-lite through
  pymilvus, over the growth benchmark's seeded rows and vectors at 2k, 5k and 10k rows,
  unfiltered and with the same ``doc_type`` filters, ``--milvus-queries`` queries per point (after a
  warm-up one), each scan by the adapter pinned to the collection's generation as a run
  pins it: the filtered search, the count of the rows the filter keeps and the generation check
  after it, which reads every row (about 0.2 ms a row here, so the time follows the rows more
  than the candidates and larger tables would take minutes). FLAT candidates rows x
  selectivity; HNSW candidates the count ``planner.access`` gives an ANN contract without IVF
  facts (it has no notion of HNSW graph search): max(10k, 10 sqrt(rows)) / sqrt(selectivity),
  capped at the rows;
* ``remote`` — not re-measured here: the round trip and per-row prices are the least-squares
  fit of ``benchmarks/bench_remote.py`` (``results/remote.md``) on this machine.

``--write`` puts the priors into ``backends/*/rsc/*.json`` with ``source`` naming this benchmark,
the date and the load average; ``--only milvus`` measures (and writes) the Milvus contracts
alone. Results: ``benchmarks/out/cost_priors.json`` and ``.md``.

    nice -n 10 .venv/bin/python -m benchmarks.bench_cost_priors [--queries N] [--only milvus] [--write]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from backends import Adapter
from backends.graph import GraphAdapter
from backends.ingest.corpus import Corpus
from backends.ingest.schema import default_schema
from backends.lancedb.adapter import LanceAdapter
from backends.tantivy.adapter import TantivyAdapter
from benchmarks.bench_graph_expansion import synthetic_graph
from benchmarks.growth_index import (
    BLOCK,
    DOC_TYPES,
    SyntheticEmbedder,
    TextPool,
    block_chunks,
    block_vectors,
    ensure_index,
    mixture,
    text_sources,
)
from planner.access import candidates_of
from rsc import Filter, GraphPattern, Query, ScanRequest

OUT = Path(__file__).parent / "out"
ROOT = Path(__file__).resolve().parent.parent
CACHE = Path("/tmp/race-bench-growth")
SEED = 7
SCALES = (10_000, 1_000_000)
MILVUS_SCALES = (2_000, 5_000, 10_000)
MILVUS_CACHE = Path("/tmp/race-bench-milvus")
MILVUS = {"FLAT": "milvus.flat_prefilter", "HNSW": "milvus.ann_filtered"}
"""The contract each collection's index type serves."""
PROBES = (1 / 64, 1 / 16, 1 / 8)
"""Shares of the IVF partitions probed (the indexes probe 1/16 at 1M: 63 of 1000)."""
REMOTE = {
    "remote.bm25": (6.666, 0.005523),
    "remote.exact": (5.504, 0.0013),
}
"""(round trip ms, µs a row) of ``results/remote.md``'s least-squares fit."""
VERSIONS = {
    "lancedb.exact_matrix": ("1.0.0", "vector_exact_matrix"),
    "lancedb.ann_prefilter": ("1.1.0", "vector_ann_prefilter"),
    "tantivy.bm25": ("1.0.0", "bm25"),
    "tantivy.exact": ("1.1.0", "exact_id"),
    "graph.identity": ("1.0.0", "graph_identity"),
    "graph.traverse": ("1.0.0", "graph_khop"),
    "milvus.flat_prefilter": ("1.0.0", "milvus_flat"),
    "milvus.ann_filtered": ("1.0.0", "milvus_ann"),
}


def request(rsc_id: str, query: Query, k: int, pushed: Sequence[Filter] = ()) -> ScanRequest:
    version, mode = VERSIONS[rsc_id]
    backend = rsc_id.split(".")[0]
    return ScanRequest(
        obligation="bench", rsc_id=rsc_id, rsc_version=version, backend=backend, mode=mode, query=query, k=k,
        pushed=tuple(pushed),
    )  # fmt: skip


async def timed(adapter: Adapter, req: ScanRequest) -> tuple[float, int]:
    started = time.perf_counter()
    result = await adapter.scan(req)
    return (time.perf_counter() - started) * 1e3, result.total_matches if result.total_matches is not None else 0


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """``ms = base + price x candidates`` (both >= 0) by least relative squares (each point
    weighted by 1 / its time, so a 3 ms scan at 10k rows counts as much as a 400 ms one at
    1M): (base ms, price µs)."""
    x = np.array([p[0] for p in points], dtype=np.float64)
    y = np.array([p[1] for p in points], dtype=np.float64)
    if len(set(x.tolist())) < 2:
        return 0.0, float(np.median(y) / max(x[0], 1.0) * 1e3)
    w = 1.0 / np.maximum(y, 1e-6)
    design = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (base, slope), *_ = np.linalg.lstsq(design, y * w, rcond=None)
    if base < 0:
        return 0.0, float(np.median(y / x) * 1e3)
    if slope < 0:
        return float(np.median(y)), 0.0
    return float(base), float(slope * 1e3)


def medians(samples: dict[float, list[float]]) -> list[tuple[float, float]]:
    return [(c, float(np.median(v))) for c, v in sorted(samples.items())]


async def scan_table(
    rows: int,
    lance: LanceAdapter,
    tantivy: TantivyAdapter,
    texts: Sequence[str],
    found: dict[str, dict[float, list[float]]],
) -> None:
    """Every table scan of one scale, query by query, the first three as warm-up."""
    filters = doc_type_filters()
    ids = [f"c{i:07d}" for i in random.Random(SEED).sample(range(rows), len(texts))]
    partitions = lance.statistics().access.get("ann_partitions", 0.0)

    def keep(n: int, rsc: str, candidates: float, ms: float) -> None:
        if n >= 3:
            found.setdefault(rsc, {}).setdefault(candidates, []).append(ms)

    for n, text in enumerate(texts):
        for sel, pushed in filters.items():
            ms, _ = await timed(lance, request("lancedb.exact_matrix", Query(text=text), 10, pushed))
            keep(n, "lancedb.exact_matrix", rows * sel, ms)
        ms, _ = await timed(tantivy, request("tantivy.bm25", Query(text=text), 10))
        keep(n, "tantivy.bm25", float(rows), ms)
        ms, _ = await timed(tantivy, request("tantivy.exact", Query(ids=(ids[n],)), 10))
        keep(n, "tantivy.exact", float(rows), ms)
        for share in PROBES:
            probes = max(1, round(partitions * share))
            lance._nprobes = probes  # the benchmark varies the probes the index was sized with
            # A query vector of its own per probe count: LanceDB keeps the partitions a vector
            # probed warm for the next search with it.
            fresh = Query(text=f"{text} probes {probes}")
            ms, _ = await timed(lance, request("lancedb.ann_prefilter", fresh, 10))
            keep(n, "lancedb.ann_prefilter", rows * probes / partitions, ms)


def measure_tables(pool: TextPool, queries: int, log: Any) -> dict[str, Any]:
    embedder = SyntheticEmbedder(mixture(SEED), SEED)
    texts = pool.queries(queries + 3, SEED + 11)
    by_contract: dict[str, dict[float, list[float]]] = {}
    for rows in SCALES:
        folder = CACHE / f"idx-{rows}"
        ensure_index(folder, range(rows // BLOCK), SEED, pool, log)
        lance = LanceAdapter.open(folder, embedder=embedder)
        tantivy = TantivyAdapter.open(folder)
        anyio.run(scan_table, rows, lance, tantivy, texts, by_contract)
        log(f"  {rows} rows measured")
    return {rsc: medians(samples) for rsc, samples in by_contract.items()}


def doc_type_filters() -> dict[float, tuple[Filter, ...]]:
    return {
        1.0: (),
        0.3: (Filter(field="doc_type", op="in", values=list(DOC_TYPES[:3])),),
        0.1: (Filter(field="doc_type", value=DOC_TYPES[3]),),
    }


def milvus_candidates(rsc: str, rows: int, sel: float) -> float:
    """The candidates ``planner.access`` counts for the contract (k=10, no index facts)."""
    from backends.milvus import MilvusAdapter

    contract = next(c for c in MilvusAdapter.contracts() if c.rsc_id == rsc)
    return candidates_of(contract, rows=rows, sel=sel, k=10, stats=None, query=None).candidates


def measure_milvus(pool: TextPool, queries: int, log: Any) -> dict[str, Any]:
    """Both Milvus contracts on milvus-lite collections of the growth benchmark's rows."""
    from milvus_lite import server_manager_instance

    from backends.milvus import MilvusAdapter
    from backends.milvus.adapter import LITE_FILE

    mix = mixture(SEED)
    embedder = SyntheticEmbedder(mix, SEED)
    texts = pool.queries(queries + 1, SEED + 13)
    found: dict[str, dict[float, list[float]]] = {}
    for rows in MILVUS_SCALES:
        blocks = range(math.ceil(rows / BLOCK))
        chunks = tuple(c for b in blocks for c in block_chunks(pool, b, SEED))[:rows]
        vectors = np.concatenate([block_vectors(mix, b, SEED) for b in blocks])[:rows]
        corpus = Corpus.model_construct(
            root="synthetic", revision=f"bench-milvus-{SEED}-{rows}", chunks=chunks, edges=(),
            corpus_schema=default_schema(),
        )  # fmt: skip
        for index_type, rsc in MILVUS.items():
            folder = MILVUS_CACHE / f"{index_type.lower()}-{rows}"
            started = time.perf_counter()
            MilvusAdapter.build(corpus, folder, embedder=embedder, index_type=index_type, vectors=vectors)
            built = time.perf_counter() - started
            adapter = MilvusAdapter.open(folder, embedder=embedder)
            try:
                pinned = adapter.pinned(adapter.generation())

                async def run(pinned: Adapter = pinned, rsc: str = rsc, rows: int = rows) -> None:
                    for n, text in enumerate(texts):
                        for sel, pushed in doc_type_filters().items():
                            ms, _ = await timed(pinned, request(rsc, Query(text=text), 10, pushed))
                            if n >= 1:
                                found.setdefault(rsc, {}).setdefault(milvus_candidates(rsc, rows, sel), []).append(ms)

                anyio.run(run)
            finally:
                adapter.close()
                server_manager_instance.release_server(str(folder / MilvusAdapter.backend / LITE_FILE))
            log(f"  milvus {index_type} {rows} rows: built in {built:.1f} s, measured")
    return {rsc: medians(samples) for rsc, samples in found.items()}


def measure_graph(seeds: int, log: Any) -> dict[str, Any]:
    graph = synthetic_graph(100_000, 300_000, SEED)
    adapter = GraphAdapter.from_graph(graph, corpus_revision=f"synthetic-{SEED}")
    nodes = sorted(graph.nodes)
    chosen = [nodes[i] for i in random.Random(SEED + 1).sample(range(len(nodes)), seeds + 3)]
    walks: list[tuple[float, float]] = []
    identity: list[float] = []
    per_hit: list[float] = []

    async def run() -> None:
        for n, seed in enumerate(chosen):
            warm = n < 3
            ms, _ = await timed(adapter, request("graph.identity", Query(ids=(seed,)), 10))
            if not warm:
                identity.append(ms)
            for depth in (1, 2, 3):
                pattern = GraphPattern(direction="out", depth=depth, node_budget=1_000_000)
                ms, reached = await timed(adapter, request("graph.traverse", Query(ids=(seed,), pattern=pattern), 10))
                if not warm:
                    walks.append((float(reached + 1), ms))
                if depth == 2 and not warm and reached > 50:
                    wide, _ = await timed(
                        adapter, request("graph.traverse", Query(ids=(seed,), pattern=pattern), 10_000)
                    )
                    per_hit.append((wide - ms) * 1e3 / (min(reached, 10_000) - 10))

    anyio.run(run)
    log(f"  graph: {len(walks)} walks, {len(per_hit)} wide ones")
    return {
        "graph.traverse": walks,
        "graph.identity_ms": float(np.median(identity)),
        "per_hit_us": float(np.median(per_hit)) if per_hit else 0.0,
        "mean_degree": graph.number_of_edges() / graph.number_of_nodes(),
    }


def milvus_priors(milvus: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for rsc, kind in (("milvus.flat_prefilter", "exact"), ("milvus.ann_filtered", "ann")):
        base, price = fit(milvus[rsc])
        out[rsc] = {"kind": kind, "base_latency_ms": base, "per_candidate_us": price, "points": milvus[rsc]}
    return out


def priors(tables: dict[str, Any], graph: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for rsc in ("lancedb.exact_matrix", "tantivy.bm25", "tantivy.exact"):
        base, price = fit(tables[rsc])
        out[rsc] = {"kind": "exact", "base_latency_ms": base, "per_candidate_us": price, "points": tables[rsc]}
    base, price = fit(tables["lancedb.ann_prefilter"])
    ann = {"kind": "ann", "base_latency_ms": base, "per_candidate_us": price, "points": tables["lancedb.ann_prefilter"]}
    out["lancedb.ann_prefilter"] = ann
    out["lancedb.ann_postfilter"] = {**ann, "points": "as lancedb.ann_prefilter (the same search, unfiltered)"}
    base, price = fit(graph["graph.traverse"])
    walk = {"kind": "graph", "base_latency_ms": base, "per_candidate_us": price, "per_hit_us": graph["per_hit_us"]}
    out["graph.traverse"] = {**walk, "points": len(graph["graph.traverse"])}
    out["graph.neighbors"] = {**walk, "max_hops": 1, "points": "as graph.traverse"}
    out["graph.identity"] = {**walk, "base_latency_ms": graph["graph.identity_ms"], "max_hops": 0}
    for rsc, (trip, row) in REMOTE.items():
        out[rsc] = {"kind": "remote", "base_latency_ms": trip, "per_candidate_us": row, "points": "results/remote.md"}
    return out


def write_priors(found: dict[str, dict[str, Any]], source: str) -> list[str]:
    written = []
    for rsc, prior in sorted(found.items()):
        path = ROOT / "backends" / rsc.split(".")[0] / "rsc" / f"{rsc}.json"
        doc = json.loads(path.read_text())
        cost = {
            "base_latency_ms": round(prior["base_latency_ms"], 3),
            "per_candidate_us": float(f"{prior['per_candidate_us']:.3g}"),
            "kind": prior["kind"],
            "source": source if prior["kind"] != "remote" else "benchmarks/bench_remote.py (results/remote.md)",
        }
        if prior.get("per_hit_us"):
            cost["per_hit_us"] = float(f"{prior['per_hit_us']:.3g}")
        if "max_hops" in prior:
            cost["max_hops"] = prior["max_hops"]
        doc["cost"] = cost
        path.write_text(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        written.append(str(path.relative_to(ROOT)))
    return written


def render(report: dict[str, Any]) -> str:
    lines = [
        "# Cost priors per access kind, measured on this machine",
        "",
        f"{report['machine']}; load average before/after {report['load_before']} / {report['load_after']}; "
        f"{report['queries']} queries per point (median; Milvus {report.get('milvus_queries', 5)}), "
        "adapters' scans only (no planning).",
        "",
        "| contract | kind | base ms | µs a candidate | µs a hit | points (candidates, median ms) |",
        "|---|---|---:|---:|---:|---|",
    ]
    for rsc, p in sorted(report["priors"].items()):
        pts = p.get("points", "as graph.traverse; base: identity lookups")
        shown = ", ".join(f"({c:g}, {m:.2f})" for c, m in pts) if isinstance(pts, list) else str(pts)
        lines.append(
            f"| {rsc} | {p['kind']} | {p['base_latency_ms']:.3f} | {p['per_candidate_us']:.3g} | "
            f"{p.get('per_hit_us', 0):.3g} | {shown} |"
        )
    degree = report.get("graph_mean_degree")
    if degree is not None:
        lines += ["", f"Graph: {degree:.2f} edges a node; walks of 1-3 hops fitted over the nodes reached."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_cost_priors", description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--write", action="store_true", help="write the priors into backends/*/rsc/*.json")
    parser.add_argument("--milvus-queries", type=int, default=5, help="queries per Milvus point (each reads every row)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", choices=("milvus",), help="measure (and write) only these contracts")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    pool = TextPool(text_sources())
    found: dict[str, dict[str, Any]] = {}
    graph: dict[str, Any] = {}
    if args.only is None:
        tables = measure_tables(pool, args.queries, print)
        graph = measure_graph(args.queries, print)
        found.update(priors(tables, graph))
    found.update(milvus_priors(measure_milvus(pool, args.milvus_queries, print)))
    load_after = os.getloadavg()
    day = time.strftime("%Y-%m-%d", time.gmtime())
    load = f"{load_before[0]:.1f}-{load_after[0]:.1f}"
    source = f"benchmarks/bench_cost_priors.py, {day}, 2-core VM, load {load} (results/cost_priors.md)"
    report = {
        "schema_version": "race.bench/1",
        "benchmark": "cost_priors",
        "queries": args.queries,
        "milvus_queries": args.milvus_queries,
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in load_after],
        "priors": found,
        "graph_mean_degree": graph.get("mean_degree"),
        "source": source,
    }
    if args.write:
        report["written"] = write_priors(found, source)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cost_priors.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    (args.out / "cost_priors.md").write_text(render(report))
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
