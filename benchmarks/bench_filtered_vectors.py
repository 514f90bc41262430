"""Benchmark: filtered vector search in LanceDB, flat vs ANN, prefilter vs postfilter.

Synthetic 384-d float32 vectors with cluster structure (low-dimensional latent clusters of
Zipf-like sizes, projected up through a random matrix, ambient noise added, L2-normalised),
one keyword column ``kw`` whose values select 1 %, 10 % and 50 % of the rows, assigned
independently of the clusters. Queries are fresh draws from the same mixture, not stored
rows. For each selectivity (and unfiltered) and each path:

* ``numpy_exact`` — the floor: one matmul over the pre-sliced filtered rows + argpartition;
* ``flat_prefilter`` / ``ann_prefilter`` / ``ann_postfilter`` — exactly the LanceDB queries
  the adapter issues (``backends.lancedb.adapter.vector_query``), against a table indexed
  exactly as the adapter indexes it (``ann_index_config`` + a BITMAP index on ``kw``).

Recall@k is measured against exact numpy ground truth over the filtered rows. The minimum
ANN+prefilter recall over all measured selectivities, rounded down to 2 decimals, is what
the ``lancedb.ann_prefilter`` contract may claim. Results go to
``benchmarks/out/filtered_vectors.json`` and ``.md``.

    python -m benchmarks.bench_filtered_vectors [--rows N] [--queries Q] [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import math
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
from lancedb.index import Bitmap

from backends.lancedb.build import ann_index_config, ann_nprobes, ann_partitions
from backends.lancedb.query import MODE_ANN_POSTFILTER, MODE_ANN_PREFILTER, MODE_FLAT, vector_query
from rsc import canonical_pretty, fingerprint

OUT = Path(__file__).parent / "out"
DIMS = 384
LATENT_DIMS = 24
K = 10
WARMUP = 3
SELECTIVITIES: tuple[tuple[str, float], ...] = (("sel_01", 0.01), ("sel_10", 0.10), ("sel_50", 0.50))
PATHS = ("numpy_exact", "flat_prefilter", "ann_prefilter", "ann_postfilter")
ANN_PATHS = ("ann_prefilter", "ann_postfilter")
_MODE = {"flat_prefilter": MODE_FLAT, "ann_prefilter": MODE_ANN_PREFILTER, "ann_postfilter": MODE_ANN_POSTFILTER}

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Mixture:
    """A Gaussian mixture in a low-dimensional latent space, seen through a fixed projection."""

    centers: npt.NDArray[np.float64]
    weights: npt.NDArray[np.float64]
    projection: npt.NDArray[np.float64]
    spread: float
    noise: float

    @classmethod
    def make(cls, rows: int, rng: np.random.Generator) -> Mixture:
        clusters = max(8, rows // 500)
        sizes = np.arange(1, clusters + 1, dtype=np.float64) ** -0.8
        return cls(
            centers=rng.standard_normal((clusters, LATENT_DIMS)),
            weights=sizes / sizes.sum(),
            projection=rng.standard_normal((LATENT_DIMS, DIMS)) / math.sqrt(LATENT_DIMS),
            spread=0.55,
            noise=0.35 / math.sqrt(DIMS),
        )

    def sample(self, n: int, rng: np.random.Generator) -> F32:
        labels = rng.choice(len(self.weights), size=n, p=self.weights)
        latent = self.centers[labels] + self.spread * rng.standard_normal((n, LATENT_DIMS))
        points = latent @ self.projection + self.noise * rng.standard_normal((n, DIMS))
        points /= np.linalg.norm(points, axis=1, keepdims=True)
        # numpy 2 keeps float64 through the arithmetic above; the store holds float32.
        return points.astype(np.float32)


def keyword_column(rows: int, rng: np.random.Generator) -> npt.NDArray[np.str_]:
    """Exact shares: 1 % sel_01, 10 % sel_10, 50 % sel_50, the rest ``other``; shuffled."""
    values = np.full(rows, "other", dtype=object)
    start = 0
    for name, share in SELECTIVITIES:
        count = round(rows * share)
        values[start : start + count] = name
        start += count
    return np.asarray(rng.permutation(values), dtype=str)


@dataclass
class Measure:
    seconds: list[float] = field(default_factory=list)
    recalls: list[float] = field(default_factory=list)
    returned: list[int] = field(default_factory=list)

    def add(self, seconds: float, got: set[int], truth: set[int]) -> None:
        self.seconds.append(seconds)
        self.recalls.append(len(got & truth) / len(truth))
        self.returned.append(len(got))


def _report(builds: list[Measure]) -> dict[str, Any]:
    """Latency and recall pooled over every index build, and each build's mean recall."""
    pooled = Measure()
    for m in builds:
        pooled.seconds += m.seconds
        pooled.recalls += m.recalls
        pooled.returned += m.returned
    ms = np.asarray(pooled.seconds) * 1e3
    out: dict[str, Any] = {
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p95_ms": round(float(np.percentile(ms, 95)), 3),
        "mean_ms": round(float(ms.mean()), 3),
        "recall_at_k": round(float(np.mean(pooled.recalls)), 4),
        "recall_min": round(float(np.min(pooled.recalls)), 4),
        "mean_returned": round(float(np.mean(pooled.returned)), 2),
        "short_of_k": int(sum(1 for r in pooled.returned if r < K)),
    }
    if len(builds) > 1:
        out["recall_by_build"] = [round(float(np.mean(m.recalls)), 4) for m in builds]
    return out


def exact_topk(matrix: F32, query: F32, k: int) -> npt.NDArray[np.intp]:
    """Row positions of the k smallest cosine distances (unit vectors: largest dot)."""
    scores = matrix @ query
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    ordered: npt.NDArray[np.intp] = top[np.argsort(-scores[top], kind="stable")]
    return ordered


def create_table(folder: Path, vectors: F32, keywords: npt.NDArray[np.str_]) -> tuple[Any, float]:
    rows = len(vectors)
    data = pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "kw": pa.array(keywords.tolist(), type=pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), type=pa.float32()), DIMS),
        }
    )
    table = lancedb.connect(str(folder)).create_table("bench", data)
    started = time.perf_counter()
    table.create_index("kw", config=Bitmap())
    return table, time.perf_counter() - started


@dataclass(frozen=True)
class Case:
    name: str
    share: float
    where: str | None
    positions: npt.NDArray[np.intp]
    subset: F32
    truths: tuple[frozenset[int], ...]


def _cases(vectors: F32, keywords: npt.NDArray[np.str_], probes: F32) -> list[Case]:
    cases = []
    for name, share, where in [*((n, s, f"kw = '{n}'") for n, s in SELECTIVITIES), ("unfiltered", 1.0, None)]:
        positions = np.flatnonzero(keywords == name) if where is not None else np.arange(len(vectors))
        subset = np.ascontiguousarray(vectors[positions])
        truths = tuple(frozenset(int(p) for p in positions[exact_topk(subset, q, K)]) for q in probes)
        cases.append(Case(name, share, where, positions, subset, truths))
    return cases


def run(rows: int, queries: int, seed: int, builds: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    mixture = Mixture.make(rows, rng)
    t0 = time.perf_counter()
    vectors = mixture.sample(rows, rng)
    keywords = keyword_column(rows, rng)
    probes = mixture.sample(queries + WARMUP, rng)
    cases = _cases(vectors, keywords, probes)
    generate_s = time.perf_counter() - t0
    nprobes = ann_nprobes(ann_partitions(rows))
    measures: dict[tuple[str, str], list[Measure]] = {(c.name, p): [] for c in cases for p in PATHS}
    index_s: list[float] = []
    folder = Path(tempfile.mkdtemp(prefix="race-bench-vectors-"))
    try:
        table, bitmap_s = create_table(folder, vectors, keywords)
        for build in range(builds):
            # LanceDB's k-means takes no seed: every training gives other partitions and
            # another recall, so the ANN paths are measured over several trainings.
            started = time.perf_counter()
            table.create_index("vector", config=ann_index_config(rows), name="vector_idx", replace=True)
            index_s.append(time.perf_counter() - started)
            # The exact paths do not read the ANN index; one pass over them is enough.
            paths = PATHS if build == 0 else ANN_PATHS
            for case in cases:
                current = {path: Measure() for path in paths}
                for n, query in enumerate(probes):
                    for path in paths:
                        started = time.perf_counter()
                        if path == "numpy_exact":
                            got = {int(p) for p in case.positions[exact_topk(case.subset, query, K)]}
                        else:
                            found = vector_query(
                                table, _MODE[path], query, case.where, K, nprobes=nprobes, columns=["id"]
                            ).to_arrow()
                            got = {int(i) for i in found.column("id").to_pylist()}
                        elapsed = time.perf_counter() - started
                        if n >= WARMUP:
                            current[path].add(elapsed, got, set(case.truths[n]))
                for path, measure in current.items():
                    measures[(case.name, path)].append(measure)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    results = [
        {
            "filter": c.name,
            "selectivity": c.share,
            "matching_rows": len(c.positions),
            **{path: _report(measures[(c.name, path)]) for path in PATHS},
        }
        for c in cases
    ]
    ann_recall_min = min(float(np.mean(m.recalls)) for c in cases for m in measures[(c.name, "ann_prefilter")])
    params = {
        "rows": rows,
        "queries": queries,
        "index_builds": builds,
        "seed": seed,
        "k": K,
        "dims": DIMS,
        "latent_dims": LATENT_DIMS,
        "clusters": len(mixture.weights),
        "cluster_sizes": "zipf(0.8)",
        "ann_index": f"IVF_FLAT cosine num_partitions={ann_partitions(rows)}",
        "nprobes": nprobes,
        "prefilter_probe": f"minimum_nprobes={nprobes}, maximum_nprobes=0 (widen until k)",
        "postfilter_probe": f"nprobes={nprobes}",
    }
    return {
        "schema_version": "race.bench/1",
        "benchmark": "filtered_vectors",
        "run_id": fingerprint(params)[len("xxh3_128:") :][:12],
        "params": params,
        "setup_s": {
            "generate_and_ground_truth": round(generate_s, 3),
            "ann_index_per_build": [round(s, 3) for s in index_s],
            "bitmap_index": round(bitmap_s, 3),
        },
        "results": results,
        "ann_prefilter_recall_min": round(ann_recall_min, 4),
        "rsc_recall": math.floor(round(ann_recall_min, 4) * 100) / 100,
        "environment": {
            "python": platform.python_version(),
            "lancedb": lancedb.__version__,
            "numpy": np.__version__,
            "pyarrow": pa.__version__,
            "machine": platform.machine(),
            "system": platform.system(),
        },
    }


def render_markdown(report: dict[str, Any]) -> str:
    p, env, setup = report["params"], report["environment"], report["setup_s"]
    lines = [
        "# Filtered vector search: LanceDB flat vs ANN, prefilter vs postfilter",
        "",
        (
            f"Run `{report['run_id']}`: {p['rows']} rows of {p['dims']}-d float32 unit vectors "
            f"({p['clusters']} latent clusters in {p['latent_dims']} dims, {p['cluster_sizes']} sizes, projected "
            f"and noised), seed {p['seed']}, {p['queries']} queries per filter, k={p['k']}. "
            f"Index: {p['ann_index']}, trained {p['index_builds']} times (LanceDB's k-means is unseeded); the ANN "
            f"paths are measured after each training, the exact paths once. ANN+prefilter {p['prefilter_probe']}; "
            f"ANN+postfilter {p['postfilter_probe']}. The keyword filter is independent of the clusters. "
            "Latency and recall are pooled over trainings; `per training` is each training's mean recall@10."
        ),
        "",
        "| filter | matching rows | path | p50 ms | p95 ms | recall@10 | per training | worst query | mean returned "
        "| queries < k |",
        "|---|---:|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for row in report["results"]:
        for path in PATHS:
            m = row[path]
            per_build = " / ".join(f"{r:.3f}" for r in m.get("recall_by_build", ())) or "-"
            lines.append(
                f"| {row['filter']} ({row['selectivity']:.0%}) | {row['matching_rows']} | {path} | "
                f"{m['p50_ms']:.2f} | {m['p95_ms']:.2f} | {m['recall_at_k']:.4f} | {per_build} | "
                f"{m['recall_min']:.2f} | {m['mean_returned']:.1f} | {m['short_of_k']} |"
            )
    index_s = ", ".join(f"{s:.1f}" for s in setup["ann_index_per_build"])
    lines += [
        "",
        (
            f"Minimum ANN+prefilter recall@10 over all filters and trainings: "
            f"{report['ann_prefilter_recall_min']:.4f}; the `lancedb.ann_prefilter` contract may claim "
            f"{report['rsc_recall']:.2f}."
        ),
        (
            f"Setup: data and exact ground truth {setup['generate_and_ground_truth']} s, ANN index trainings "
            f"{index_s} s, BITMAP index {setup['bitmap_index']} s. Environment: Python {env['python']}, "
            f"lancedb {env['lancedb']}, numpy {env['numpy']}, pyarrow {env['pyarrow']}, {env['system']} "
            f"{env['machine']}."
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_filtered_vectors", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rows", type=int, default=None, help="table rows (default 100000; 5000 with --quick)")
    parser.add_argument("--queries", type=int, default=None, help="queries per filter (default 200; 30 with --quick)")
    parser.add_argument("--builds", type=int, default=5, help="ANN index trainings to measure (default 5)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--quick", action="store_true", help="about 5000 rows, for a run in well under a minute")
    args = parser.parse_args(argv)
    rows = args.rows or (5_000 if args.quick else 100_000)
    queries = args.queries or (30 if args.quick else 200)
    if rows < 1000 or queries < 1 or args.builds < 1:
        parser.error("--rows must be >= 1000 (so the 1 % filter selects >= 10 rows); --queries, --builds >= 1")
    report = run(rows, queries, args.seed, args.builds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "filtered_vectors.json").write_text(canonical_pretty(report) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (args.out / "filtered_vectors.md").write_text(markdown, encoding="utf-8")
    sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
