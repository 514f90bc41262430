"""Benchmark: vector search on the real-text fixture index (``fixtures/realtext/``: 3 227
chunks of Debian packaging text, all-MiniLM-L6-v2 vectors), every path side by side in one
run, and the calibration's predicted recall against the recall of fresh queries.

The index is built as ``race index`` builds it, from the committed vectors; then, for each of
``--trainings`` trainings of its IVF index (LanceDB's k-means is not seedable, so recall moves
between trainings; each training is a new generation and is calibrated anew):

* paths: per filter (``area`` values near 1 %, 10 % and 50 % of the chunks, ``kind`` at
  31 %, and none), each query answered in turn by ``numpy_exact`` (the floor: one matmul over
  the same rows pre-sliced), ``exact_matrix`` (``ExactMatrix.search``), ``flat_prefilter``
  and ``ann_prefilter`` (the LanceDB queries the adapter issues). The queries are text the
  corpus does not hold (``queries.jsonl``: changelog entries of packages it skipped). Recall@10
  is against the float64 top-k with ties by key; a row within 1e-6 of the k-th distance counts.
  The ANN's predicted recall is the calibrated promise for that filter (its bucket's bound).
* calibration: the index's own calibration (seed 7), and the same measurement with fresh
  seeds whose query rows are disjoint from the calibration's, on the same trained index; per
  contract and bucket, the declared lower bound against the fresh mean.

Results go to ``benchmarks/out/realtext_vectors.json`` and ``.md``.

    python -m benchmarks.bench_realtext_vectors [--trainings T] [--fresh-seeds N] [--out DIR]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import numpy.typing as npt

from backends.calibration import read_calibration
from backends.lancedb import LanceAdapter
from backends.lancedb.build import ann_index_config, ann_nprobes, ann_partitions
from backends.lancedb.calibration import calibrate, write_calibration
from backends.lancedb.exact import EXACT_DIR, ExactMatrix
from backends.lancedb.matrix_store import MatrixStore
from backends.lancedb.query import MODE_ANN_PREFILTER, MODE_FLAT, TABLE, VECTOR, VECTOR_INDEX, vector_query
from benchmarks.bench_filtered_vectors import exact_topk
from benchmarks.realtext import ROOT, build_realtext_index, stored_chunks
from rsc import Calibration, Filter, RecallBucket, canonical_pretty, fingerprint

OUT = Path(__file__).parent / "out"
K = 10
WARMUP = 3
FILTERS: tuple[tuple[str, str | None, str | None], ...] = (
    ("area=perl", "area", "perl"),
    ("area=libdevel", "area", "libdevel"),
    ("kind=copyright", "kind", "copyright"),
    ("area=libs", "area", "libs"),
    ("unfiltered", None, None),
)
PATHS = ("numpy_exact", "exact_matrix", "flat_prefilter", "ann_prefilter")
F32 = npt.NDArray[np.float32]


def _queries() -> F32:
    vectors: F32 = np.load(ROOT / "queries.npy")
    return vectors


def _truth(unit: npt.NDArray[np.float64], rows: npt.NDArray[np.intp], query: F32) -> tuple[set[int], float]:
    """The float64 top-k rows (by position) and the k-th distance."""
    q = query.astype(np.float64)
    q /= np.linalg.norm(q)
    distances = 1.0 - unit[rows] @ q
    order = np.lexsort((rows, distances))[:K]
    return {int(rows[i]) for i in order}, float(distances[order[-1]])


def _recall(unit: npt.NDArray[np.float64], got: list[int], query: F32, kth: float, want: int) -> float:
    q = query.astype(np.float64)
    q /= np.linalg.norm(q)
    found = 1.0 - unit[got] @ q if got else np.zeros(0)
    return float(np.count_nonzero(found <= kth + 1e-6)) / want


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values) * 1e3, q)), 4)


def _measure_paths(index: Path, training: int, calibration: dict[str, Calibration]) -> list[dict[str, Any]]:
    db = lancedb.connect(str(index / "lancedb"))
    table = db.open_table(TABLE)
    store = MatrixStore(index / "lancedb" / EXACT_DIR, index / "lancedb" / f"{TABLE}.lance" / "_versions")
    built = store.build(table)
    if built is None:
        raise SystemExit(f"no exact matrix: {store.unavailable}")
    matrix = ExactMatrix(built.folder)
    data = table.to_arrow()
    ids = [str(c) for c in data.column("chunk_id").to_pylist()]
    vectors = np.asarray(data.column(VECTOR).to_pylist(), dtype=np.float32)
    unit = vectors.astype(np.float64) / np.linalg.norm(vectors.astype(np.float64), axis=1)[:, None]
    position = {c: i for i, c in enumerate(ids)}
    matrix_rows = np.asarray([position[str(c)] for c in matrix.table.column("chunk_id").to_pylist()])
    columns = {name: data.column(name).to_pylist() for name in ("area", "kind")}
    nprobes = ann_nprobes(ann_partitions(len(ids)))
    queries = _queries()
    pre = calibration["lancedb.ann_prefilter"]
    out = []
    for label, field, value in FILTERS:
        rows = np.arange(len(ids)) if field is None else np.flatnonzero(np.asarray(columns[field]) == value)
        subset = np.ascontiguousarray(vectors[rows])
        filters = () if field is None else (Filter(field=field, value=value),)
        where = None if field is None else f"{field} = '{value}'"
        seconds: dict[str, list[float]] = {p: [] for p in PATHS}
        recalls: dict[str, list[float]] = {p: [] for p in PATHS}
        for n, query in enumerate(queries):
            truth, kth = _truth(unit, rows, query)
            want = min(K, len(rows))
            for path in PATHS:
                started = time.perf_counter()
                if path == "numpy_exact":
                    got = [int(rows[i]) for i in exact_topk(subset, query, K)]
                elif path == "exact_matrix":
                    got = [int(matrix_rows[p]) for p in matrix.search(query, filters, K).positions]
                else:
                    mode = MODE_FLAT if path == "flat_prefilter" else MODE_ANN_PREFILTER
                    found = vector_query(table, mode, query, where, K, nprobes=nprobes, columns=["chunk_id"])
                    got = [position[str(c)] for c in found.to_arrow().column("chunk_id").to_pylist()]
                elapsed = time.perf_counter() - started
                if n >= WARMUP:
                    seconds[path].append(elapsed)
                    recalls[path].append(_recall(unit, got, query, kth, want))
            del truth
        share = len(rows) / len(ids)
        promise = pre.expected(share if field else None, [field] if field else [])
        row: dict[str, Any] = {
            "training": training,
            "filter": label,
            "matching_rows": len(rows),
            "selectivity": round(share, 4),
            "bucket": promise.bucket,
            "ann_predicted_recall": promise.recall,
            "ann_predicted_queries": promise.queries,
        }
        for path in PATHS:
            row[path] = {
                "p50_ms": _pct(seconds[path], 50),
                "p95_ms": _pct(seconds[path], 95),
                "recall_at_k": round(float(np.mean(recalls[path])), 4),
                "recall_min": round(float(np.min(recalls[path])), 4),
            }
        row["exact_to_floor_p50"] = round(row["exact_matrix"]["p50_ms"] / row["numpy_exact"]["p50_ms"], 3)
        out.append(row)
    return out


def _bucket_rows(declared: Calibration, fresh: Calibration) -> list[tuple[str, RecallBucket, RecallBucket]]:
    pairs = []
    if declared.unfiltered is not None and fresh.unfiltered is not None:
        pairs.append(("unfiltered", declared.unfiltered, fresh.unfiltered))
    found = {b.bucket: b for b in fresh.buckets}
    pairs += [(f"any {b.bucket}", b, found[b.bucket]) for b in declared.buckets if b.bucket in found]
    for name, buckets in sorted(declared.fields.items()):
        other = {b.bucket: b for b in fresh.fields.get(name, ())}
        pairs += [(f"{name} {b.bucket}", b, other[b.bucket]) for b in buckets if b.bucket in other]
    return pairs


def _measure_calibration(index: Path, training: int, seeds: list[int]) -> tuple[list[dict[str, Any]], str]:
    adapter = LanceAdapter.open(index)
    found = read_calibration(index / "lancedb")
    assert found is not None and found[0] == adapter.generation()
    declared = {c.rsc_id: c for c in found[1]}
    rows: list[dict[str, Any]] = []
    fresh_by_seed = [calibrate(adapter, seed=seed, disjoint_from=7) for seed in seeds]
    for rsc_id, before in sorted(declared.items()):
        for n, seed in enumerate(seeds):
            fresh = next(c for c in fresh_by_seed[n] if c.rsc_id == rsc_id)
            for label, old, new in _bucket_rows(before, fresh):
                rows.append(
                    {
                        "training": training,
                        "contract": rsc_id,
                        "bucket": label,
                        "fresh_seed": seed,
                        "declared_lower_bound": old.lower_bound,
                        "declared_mean": old.mean_recall,
                        "declared_queries": old.queries,
                        "fresh_mean": new.mean_recall,
                        "fresh_queries": new.queries,
                        "holds": new.mean_recall >= old.lower_bound,
                    }
                )
    return rows, declared["lancedb.ann_prefilter"].fingerprint


def _retrain(index: Path) -> float:
    table = lancedb.connect(str(index / "lancedb")).open_table(TABLE)
    started = time.perf_counter()
    table.create_index(VECTOR, config=ann_index_config(table.count_rows()), name=VECTOR_INDEX, replace=True)
    took = time.perf_counter() - started
    write_calibration(LanceAdapter.open(index), index / "lancedb")
    return took


def run(trainings: int, fresh_seeds: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="race-bench-realtext-"))
    setup: dict[str, Any] = {}
    paths: list[dict[str, Any]] = []
    buckets: list[dict[str, Any]] = []
    fingerprints = []
    try:
        started = time.perf_counter()
        index = build_realtext_index(folder / "index")
        setup["index_build_and_calibration_s"] = round(time.perf_counter() - started, 3)
        setup["retrain_s"] = []
        seeds = list(range(101, 101 + fresh_seeds))
        for training in range(1, trainings + 1):
            if training > 1:
                setup["retrain_s"].append(round(_retrain(index), 3))
            found = read_calibration(index / "lancedb")
            assert found is not None
            calibration = {c.rsc_id: c for c in found[1]}
            paths += _measure_paths(index, training, calibration)
            rows, fp = _measure_calibration(index, training, seeds)
            buckets += rows
            fingerprints.append(fp)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    chunks = len(stored_chunks().ids)
    params = {
        "chunks": chunks,
        "queries": len(_queries()),
        "k": K,
        "trainings": trainings,
        "fresh_seeds": fresh_seeds,
        "ann_index": f"IVF_FLAT cosine num_partitions={ann_partitions(chunks)}",
        "nprobes": ann_nprobes(ann_partitions(chunks)),
    }
    held = sum(1 for b in buckets if b["holds"])
    return {
        "schema_version": "race.bench/1",
        "benchmark": "realtext_vectors",
        "run_id": fingerprint(params)[len("xxh3_128:") :][:12],
        "params": params,
        "setup": setup,
        "paths": paths,
        "calibration": buckets,
        "calibration_fingerprints": fingerprints,
        "bounds_held": {"held": held, "total": len(buckets), "share": round(held / max(1, len(buckets)), 4)},
        "environment": {
            "python": platform.python_version(),
            "lancedb": lancedb.__version__,
            "numpy": np.__version__,
            "machine": platform.machine(),
            "system": platform.system(),
        },
    }


def render_markdown(report: dict[str, Any]) -> str:
    p = report["params"]
    lines = [
        "# Vector search on a real-text index: exact matrix, numpy floor, LanceDB flat and ANN",
        "",
        (
            f"Run `{report['run_id']}`: the real-text fixture (fixtures/realtext/, {p['chunks']} chunks of Debian "
            f"packaging text, all-MiniLM-L6-v2), {p['queries']} queries from text outside the corpus, k={p['k']}, "
            f"every path answering each query in turn. LanceDB: {p['ann_index']}, nprobes={p['nprobes']}; "
            f"{p['trainings']} trainings of the IVF index, each calibrated anew. `ratio` is exact_matrix p50 / "
            "numpy_exact p50 over the same rows. `predicted` is the calibrated ANN promise for the filter (the "
            "lower bound of its bucket)."
        ),
        "",
        "| training | filter | rows | bucket | numpy floor p50 / p95 ms | exact matrix p50 / p95 ms | ratio "
        "| exact recall | LanceDB flat p50 / p95 ms | ANN p50 / p95 ms | ANN recall | ANN predicted |",
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["paths"]:
        f, e, fl, a = r["numpy_exact"], r["exact_matrix"], r["flat_prefilter"], r["ann_prefilter"]
        predicted = "-" if r["ann_predicted_recall"] is None else f"{r['ann_predicted_recall']:.3f}"
        lines.append(
            f"| {r['training']} | {r['filter']} | {r['matching_rows']} | {r['bucket']} | "
            f"{f['p50_ms']:.3f} / {f['p95_ms']:.3f} | {e['p50_ms']:.3f} / {e['p95_ms']:.3f} | "
            f"{r['exact_to_floor_p50']:.2f} | {e['recall_at_k']:.4f} | {fl['p50_ms']:.2f} / {fl['p95_ms']:.2f} | "
            f"{a['p50_ms']:.2f} / {a['p95_ms']:.2f} | {a['recall_at_k']:.4f} | {predicted} |"
        )
    bh = report["bounds_held"]
    lines += [
        "",
        "## Declared lower bound vs fresh queries (same trained index, query rows disjoint from the calibration's)",
        "",
        f"Buckets where the fresh mean recall reached the declared bound: {bh['held']} of {bh['total']} "
        f"({bh['share']:.1%}).",
        "",
        "| training | contract | bucket | declared bound (mean, queries) | fresh mean (queries), per seed |",
        "|---:|---|---|---:|---|",
    ]
    grouped: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    for b in report["calibration"]:
        grouped.setdefault((b["training"], b["contract"], b["bucket"]), []).append(b)
    for (training, contract, bucket), rows in grouped.items():
        first = rows[0]
        fresh = ", ".join(f"{r['fresh_mean']:.3f} ({r['fresh_queries']}){'' if r['holds'] else ' below'}" for r in rows)
        lines.append(
            f"| {training} | {contract} | {bucket} | {first['declared_lower_bound']:.3f} "
            f"({first['declared_mean']:.3f}, {first['declared_queries']}) | {fresh} |"
        )
    setup = report["setup"]
    lines += [
        "",
        (
            "Setup: index built from the committed vectors and calibrated in "
            f"{setup['index_build_and_calibration_s']} s; "
            f"retrainings {', '.join(str(s) for s in setup['retrain_s']) or '-'} s. Calibration fingerprints "
            f"(ann_prefilter, per training): {', '.join(fp[:22] for fp in report['calibration_fingerprints'])}. "
            f"Environment: Python {report['environment']['python']}, lancedb {report['environment']['lancedb']}, "
            f"numpy {report['environment']['numpy']}, {report['environment']['system']} "
            f"{report['environment']['machine']}."
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_realtext_vectors", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--trainings", type=int, default=3)
    parser.add_argument("--fresh-seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.trainings < 1 or args.fresh_seeds < 1:
        parser.error("--trainings and --fresh-seeds must be >= 1")
    report = run(args.trainings, args.fresh_seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "realtext_vectors.json").write_text(canonical_pretty(report) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (args.out / "realtext_vectors.md").write_text(markdown, encoding="utf-8")
    sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
