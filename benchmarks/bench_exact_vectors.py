"""Benchmark: the exact vector path (``backends/lancedb/exact.py``) against the numpy floor,
LanceDB's flat scan and LanceDB's ANN with prefilter, side by side in one run.

The data are those of ``bench_filtered_vectors``: 100k 384-d float32 unit vectors with
cluster structure, fresh queries from the same mixture, and a keyword ``kw`` selecting 1 %,
10 % and 50 % of the rows independently of the clusters. A second keyword ``kw_other`` has
the same shares, drawn independently again. The exact matrix groups its rows by one field
(the lowest-cardinality one, here ``kw``) and keeps a copy sorted by each other field, so a
filter on ``kw`` reads one run of the matrix and a filter on ``kw_other`` one run of its
copy: both are measured. Tiny filters
(``tiny``, 1 to 12 matching rows) check that no distance is ever non-finite.

Per query, in this order, every path answers the same query and filter:

* ``numpy_exact`` — the floor: one matmul over rows pre-sliced for that filter, argpartition;
* ``exact_matrix`` — ``ExactMatrix.search``: filter resolution from the encoded columns,
  scoring, the float64 settling of the cut, ties by key (the rows' columns not read);
* ``flat_prefilter`` and ``ann_prefilter`` — the LanceDB queries the adapter issues, with a
  BITMAP index on the keywords (filters on ``kw`` only, and ``kw_other`` is not indexed).

Recall@k is against float64 ground truth with ties by key (as the exact path ranks); for the
exact path the distances are also compared with LanceDB's flat scan (same rows, distances
to float32 rounding). Results go to ``benchmarks/out/exact_vectors.json`` and ``.md``.

    python -m benchmarks.bench_exact_vectors [--rows N] [--queries Q] [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
from lancedb.index import Bitmap
from threadpoolctl import threadpool_info

from backends.lancedb.build import ann_index_config, ann_nprobes, ann_partitions
from backends.lancedb.exact import ExactMatrix
from backends.lancedb.matrix_store import MatrixStore
from backends.lancedb.query import MODE_ANN_PREFILTER, MODE_FLAT, vector_query
from benchmarks.bench_filtered_vectors import DIMS, SELECTIVITIES, Measure, Mixture, exact_topk, keyword_column
from rsc import Filter, canonical_pretty, fingerprint

OUT = Path(__file__).parent / "out"
K = 10
WARMUP = 3
PATHS = ("numpy_exact", "exact_matrix", "flat_prefilter", "ann_prefilter")
EXACT_ONLY = ("numpy_exact", "exact_matrix")
TARGET_RATIO = 1.5

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Case:
    name: str
    field: str | None
    share: float
    filters: tuple[Filter, ...]
    where: str | None
    positions: npt.NDArray[np.intp]
    subset: F32
    paths: tuple[str, ...]


def _ids(n: int) -> list[str]:
    # Zero-padded, so that key order is row order and the float64 reference is easy to tie-break.
    return [f"r{i:07d}" for i in range(n)]


def create_table(folder: Path, vectors: F32, columns: dict[str, npt.NDArray[np.str_]]) -> Any:
    rows = len(vectors)
    ids = _ids(rows)
    meta = [json.dumps({name: str(values[i]) for name, values in columns.items()}) for i in range(rows)]
    data = pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "chunk_id": pa.array(ids),
            "doc_id": pa.array(ids),
            "metadata_json": pa.array(meta),
            **{name: pa.array(values.tolist(), type=pa.string()) for name, values in columns.items()},
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), type=pa.float32()), DIMS),
        }
    )
    table = lancedb.connect(str(folder / "db")).create_table("bench", data)
    table.create_index("kw", config=Bitmap())
    return table


def reference_topk(vectors: F32, positions: npt.NDArray[np.intp], query: F32, k: int) -> list[tuple[int, float]]:
    """float64 cosine distances rounded once to float32, ties by row (= key) order."""
    wide = vectors[positions].astype(np.float64)
    q = query.astype(np.float64)
    cosine = (wide @ q) / (np.linalg.norm(wide, axis=1) * np.linalg.norm(q))
    distances = np.clip((1.0 - cosine).astype(np.float32), 0.0, 2.0)
    order = np.lexsort((positions, distances))[:k]
    return [(int(positions[i]), float(distances[i])) for i in order]


def _cases(vectors: F32, columns: dict[str, npt.NDArray[np.str_]], exact_only: bool = False) -> list[Case]:
    cases = []
    every = np.arange(len(vectors))
    cases.append(Case("unfiltered", None, 1.0, (), None, every, vectors, EXACT_ONLY if exact_only else PATHS))
    for field in ("kw", "kw_other"):
        for value, share in SELECTIVITIES:
            positions = np.flatnonzero(columns[field] == value)
            paths = PATHS if field == "kw" and not exact_only else EXACT_ONLY
            cases.append(
                Case(
                    f"{field}={value}",
                    field,
                    share,
                    (Filter(field=field, value=value),),
                    f"{field} = '{value}'",
                    positions,
                    np.ascontiguousarray(vectors[positions]),
                    paths,
                )
            )
    return sorted(cases, key=lambda c: (c.field is None, c.field or "", c.share))


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values) * 1e3, q)), 4)


def run(rows: int, queries: int, seed: int, exact_only: bool = False) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    mixture = Mixture.make(rows, rng)
    t0 = time.perf_counter()
    vectors = mixture.sample(rows, rng)
    columns = {"kw": keyword_column(rows, rng), "kw_other": keyword_column(rows, rng)}
    tiny = np.full(rows, "none", dtype=object)
    tiny_positions = rng.permutation(rows)[: sum(range(1, 13))]
    start = 0
    for size in range(1, 13):
        tiny[tiny_positions[start : start + size]] = f"t{size:02d}"
        start += size
    columns["tiny"] = np.asarray(tiny, dtype=str)
    probes = mixture.sample(queries + WARMUP, rng)
    cases = _cases(vectors, columns, exact_only)
    generate_s = time.perf_counter() - t0
    nprobes = ann_nprobes(ann_partitions(rows))
    folder = Path(tempfile.mkdtemp(prefix="race-bench-exact-"))
    setup: dict[str, float] = {"generate": round(generate_s, 3)}
    try:
        started = time.perf_counter()
        table = create_table(folder, vectors, columns)
        setup["table_and_bitmap"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        if not exact_only:
            table.create_index("vector", config=ann_index_config(rows), name="vector_idx", replace=True)
        setup["ann_index"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        store = MatrixStore(folder / "exact", folder / "db" / "bench.lance" / "_versions")
        built = store.build(table)
        if built is None:
            raise SystemExit(f"no exact matrix: {store.unavailable}")
        setup["exact_matrix_write_and_open"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        matrix = ExactMatrix(built.folder)
        setup["exact_matrix_open"] = round(time.perf_counter() - started, 3)
        row_of_id = _row_of_id(matrix)
        results = []
        for case in cases:
            results.append(_measure(case, matrix, row_of_id, table, vectors, probes, nprobes))
        tiny_report = _tiny(matrix, probes)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    params = {
        "rows": rows,
        "queries": queries,
        "seed": seed,
        "k": K,
        "dims": DIMS,
        "clusters": len(mixture.weights),
        "ann_index": f"IVF_FLAT cosine num_partitions={ann_partitions(rows)}",
        "nprobes": nprobes,
        "cluster_field": matrix.cluster,
        "exact_only": exact_only,
        "sorted_copies": list(matrix.copies),
    }
    ratios = {
        r["filter"]: round(r["exact_matrix"]["p50_ms"] / r["numpy_exact"]["p50_ms"], 3)
        for r in results
        if r["numpy_exact"]["p50_ms"] > 0
    }
    return {
        "schema_version": "race.bench/1",
        "benchmark": "exact_vectors",
        "run_id": fingerprint(params)[len("xxh3_128:") :][:12],
        "params": params,
        "setup_s": setup,
        "results": results,
        "exact_to_floor_p50": ratios,
        "target_ratio": TARGET_RATIO,
        "tiny_filters": tiny_report,
        "environment": {
            "python": platform.python_version(),
            "lancedb": lancedb.__version__,
            "numpy": np.__version__,
            "pyarrow": pa.__version__,
            "machine": platform.machine(),
            "system": platform.system(),
            "blas": [
                {k: info.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
                for info in threadpool_info()
                if info.get("user_api") == "blas"
            ],
        },
    }


def _row_of_id(matrix: ExactMatrix) -> npt.NDArray[np.intp]:
    """Matrix position -> generated row number (the matrix groups rows by its cluster field)."""
    ids = matrix.table.column("chunk_id").to_pylist()
    return np.asarray([int(str(c)[1:]) for c in ids], dtype=np.intp)


def _measure(
    case: Case,
    matrix: ExactMatrix,
    row_of_id: npt.NDArray[np.intp],
    table: Any,
    vectors: F32,
    probes: F32,
    nprobes: int,
) -> dict[str, Any]:
    measures = {path: Measure() for path in case.paths}
    agreement = {"queries": 0, "same_ids": 0, "max_abs_distance_diff": 0.0, "non_finite": 0}
    for n, query in enumerate(probes):
        truth = reference_topk(vectors, case.positions, query, K)
        truth_rows = {row for row, _ in truth}
        exact_rows: list[tuple[int, float]] = []
        flat_rows: list[tuple[int, float]] = []
        for path in case.paths:
            started = time.perf_counter()
            if path == "numpy_exact":
                got = {int(p) for p in case.positions[exact_topk(case.subset, query, K)]}
            elif path == "exact_matrix":
                ranking = matrix.search(query, case.filters, K)
                got = {int(row_of_id[p]) for p in ranking.positions}
            else:
                mode = MODE_FLAT if path == "flat_prefilter" else MODE_ANN_PREFILTER
                found = vector_query(table, mode, query, case.where, K, nprobes=nprobes, columns=["id"]).to_arrow()
                got = {int(i) for i in found.column("id").to_pylist()}
                if path == "flat_prefilter":
                    flat_rows = [(int(r["id"]), float(r["_distance"])) for r in found.to_pylist()]
            elapsed = time.perf_counter() - started
            if path == "exact_matrix":
                exact_rows = [
                    (int(row_of_id[p]), float(d)) for p, d in zip(ranking.positions, ranking.distances, strict=True)
                ]
                if {r for r, _ in exact_rows} != truth_rows:
                    raise SystemExit(f"{case.name}: the exact path's top-{K} is not the float64 reference's")
                agreement["non_finite"] += int(not np.isfinite(ranking.distances).all())
            if path == "flat_prefilter" and n >= WARMUP:
                agreement["queries"] += 1
                agreement["same_ids"] += int({r for r, _ in flat_rows} == {r for r, _ in exact_rows})
                by_row = dict(flat_rows)
                diffs = [abs(by_row[r] - d) for r, d in exact_rows if r in by_row]
                agreement["max_abs_distance_diff"] = max(agreement["max_abs_distance_diff"], *diffs, 0.0)
            if n >= WARMUP:
                measures[path].add(elapsed, got, truth_rows)
    out: dict[str, Any] = {
        "filter": case.name,
        "field": case.field,
        "selectivity": case.share,
        "matching_rows": len(case.positions),
    }
    for path, m in measures.items():
        out[path] = {
            "p50_ms": _pct(m.seconds, 50),
            "p95_ms": _pct(m.seconds, 95),
            "recall_at_k": round(float(np.mean(m.recalls)), 4),
            "recall_min": round(float(np.min(m.recalls)), 4),
        }
    if agreement["queries"]:
        out["exact_vs_lancedb_flat"] = agreement
    return out


def _tiny(matrix: ExactMatrix, probes: F32) -> dict[str, Any]:
    """Filters matching 1 to 12 rows: every answer is all of them, every distance finite."""
    answers = finite = 0
    for size in range(1, 13):
        flt = Filter(field="tiny", value=f"t{size:02d}")
        for query in probes[:20]:
            ranking = matrix.search(query, (flt,), K)
            answers += 1
            if ranking.total_matches != size or len(ranking.positions) != min(K, size):
                raise SystemExit(f"tiny filter of {size} rows answered {len(ranking.positions)}")
            finite += int(np.isfinite(ranking.distances).all())
    return {"filters": 12, "answers": answers, "all_distances_finite": finite}


def render_markdown(report: dict[str, Any]) -> str:
    p, env, setup = report["params"], report["environment"], report["setup_s"]
    blas = ", ".join(f"{b['internal_api']} {b['version']} {b['architecture']} x{b['num_threads']}" for b in env["blas"])
    lines = [
        "# Exact vector search: the exact matrix vs the numpy floor, LanceDB flat and ANN",
        "",
        (
            f"Run `{report['run_id']}`: {p['rows']} rows of {p['dims']}-d float32 unit vectors ({p['clusters']} "
            f"latent clusters), seed {p['seed']}, {p['queries']} fresh queries per filter, k={p['k']}, every path "
            "answering each query in turn, the numpy floor over the same rows pre-sliced. The matrix groups its "
            f"rows by `{p['cluster_field']}` and keeps a copy sorted by each of "
            f"{', '.join(f'`{c}`' for c in p['sorted_copies'])}: a filter on any of them reads runs of rows in "
            f"place. LanceDB: {p['ann_index']}, nprobes={p['nprobes']}, BITMAP index on `kw`. Recall@10 is "
            "against float64 ground truth with ties by key. `ratio` is exact_matrix p50 / numpy_exact p50 "
            f"(target <= {report['target_ratio']})."
        ),
        "",
        "| filter | matching rows | numpy floor p50 / p95 ms | exact matrix p50 / p95 ms | ratio | exact recall "
        "| LanceDB flat p50 / p95 ms | ANN+prefilter p50 / p95 ms | ANN recall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["results"]:
        floor, exact = row["numpy_exact"], row["exact_matrix"]
        flat, ann = row.get("flat_prefilter"), row.get("ann_prefilter")
        lines.append(
            f"| {row['filter']} ({row['selectivity']:.0%}) | {row['matching_rows']} | "
            f"{floor['p50_ms']:.3f} / {floor['p95_ms']:.3f} | {exact['p50_ms']:.3f} / {exact['p95_ms']:.3f} | "
            f"{report['exact_to_floor_p50'][row['filter']]:.2f} | {exact['recall_at_k']:.4f} | "
            + (f"{flat['p50_ms']:.2f} / {flat['p95_ms']:.2f}" if flat else "-")
            + " | "
            + (f"{ann['p50_ms']:.2f} / {ann['p95_ms']:.2f} | {ann['recall_at_k']:.4f}" if ann else "- | -")
            + " |"
        )
    agreements = [r["exact_vs_lancedb_flat"] for r in report["results"] if "exact_vs_lancedb_flat" in r]
    same = sum(a["same_ids"] for a in agreements)
    asked = sum(a["queries"] for a in agreements)
    worst = max((a["max_abs_distance_diff"] for a in agreements), default=0.0)
    tiny = report["tiny_filters"]
    lines += [
        "",
        (
            f"Against LanceDB's flat scan: the same top-{p['k']} rows in {same} of {asked} queries, distances "
            f"apart by at most {worst:.3g} (float32 rounding). Tiny filters (1 to 12 rows): {tiny['answers']} "
            f"answers, {tiny['all_distances_finite']} with every distance finite."
        ),
        (
            f"Setup: data {setup['generate']} s, table and BITMAP {setup['table_and_bitmap']} s, ANN index "
            f"{setup['ann_index']} s, exact matrix written and opened {setup['exact_matrix_write_and_open']} s "
            f"(reopened {setup['exact_matrix_open']} s). Environment: Python {env['python']}, lancedb "
            f"{env['lancedb']}, numpy {env['numpy']} ({blas}), pyarrow {env['pyarrow']}, {env['system']} "
            f"{env['machine']}."
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_exact_vectors", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rows", type=int, default=None, help="table rows (default 100000; 5000 with --quick)")
    parser.add_argument("--queries", type=int, default=None, help="queries per filter (default 200; 20 with --quick)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--quick", action="store_true", help="about 5000 rows, for a run in well under a minute")
    parser.add_argument("--exact-only", action="store_true", help="only the numpy floor and the exact matrix")
    args = parser.parse_args(argv)
    rows = args.rows or (5_000 if args.quick else 100_000)
    queries = args.queries or (20 if args.quick else 200)
    if rows < 1000 or queries < 1:
        parser.error("--rows must be >= 1000 (so the 1 % filter selects >= 10 rows); --queries >= 1")
    report = run(rows, queries, args.seed, args.exact_only)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "exact_vectors.json").write_text(canonical_pretty(report) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (args.out / "exact_vectors.md").write_text(markdown, encoding="utf-8")
    sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
