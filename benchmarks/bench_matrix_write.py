"""Memory and time of writing an exact matrix (``backends.lancedb.matrix.write_matrix``).

Each write runs in a fresh Python process that opens the table, then writes the matrix of its
checked-out version while a thread samples the process's anonymous resident memory
(``RssAnon`` in ``/proc/self/status``) every 3 ms. The figure is that peak less the process's
anonymous memory just before the write, beside the size of the table's vectors (rows x dims x
4 bytes) as a yardstick: the matrix itself is one such array.

The table is either one given (``--table DIR`` holding a LanceDB ``chunks`` table, such as a
``race index`` folder's ``lancedb/``) or a synthetic one of ``--rows`` rows built first: 384-d
normal vectors, 420-character texts and two metadata fields (50 and 7 values).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa

from rsc import canonical_pretty

OUT = Path(__file__).parent / "out"
TABLE = "chunks"
DIMS = 384
BUILD_ROWS = 50_000
WORDS = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])


def _anon_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def build_table(rows: int, folder: Path) -> None:
    rng = np.random.default_rng(0)
    db = lancedb.connect(str(folder))
    table: Any = None
    for start in range(0, rows, BUILD_ROWS):
        n = min(BUILD_ROWS, rows - start)
        ids = [f"c{i:08d}" for i in range(start, start + n)]
        meta = [
            json.dumps({"area": f"a{int(a)}", "kind": f"k{int(b)}"})
            for a, b in zip(rng.integers(0, 50, n), rng.integers(0, 7, n), strict=True)
        ]
        vectors = rng.standard_normal((n, DIMS)).astype(np.float32)
        data = pa.table(
            {
                "chunk_id": ids,
                "doc_id": [f"d{i // 4:08d}" for i in range(start, start + n)],
                "title": ["title"] * n,
                "section": ["section"] * n,
                "text": [" ".join(rng.choice(WORDS, 70)) for _ in range(n)],
                "metadata_json": meta,
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), DIMS),
            }
        )
        if table is None:
            table = db.create_table(TABLE, data)
        else:
            table.add(data)


def measure_one(table_dir: Path, out: Path) -> dict[str, Any]:
    """In this process: open the table, write its matrix into ``out``, the peak and the time."""
    from backends.lancedb.matrix import write_matrix

    table = lancedb.connect(str(table_dir)).open_table(TABLE)
    before = _anon_mib()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _anon_mib())
            done.wait(0.003)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    write_matrix(table, out, "bench")
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    peak[0] = max(peak[0], _anon_mib())
    rows = int(table.count_rows())
    return {
        "rows": rows,
        "vectors_mib": round(rows * DIMS * 4 / 2**20, 1),
        "write_peak_anon_mib": round(peak[0] - before, 1),
        "seconds": round(seconds, 2),
        "files_mib": round(sum(f.stat().st_size for f in out.iterdir()) / 2**20, 1),
    }


def run(table_dir: Path | None, rows: int, repeats: int) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="race-bench-matrix-"))
    try:
        source = table_dir
        if source is None:
            source = scratch / "db"
            build_table(rows, source)
        runs = []
        for n in range(repeats):
            out = scratch / f"exact-{n}"
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_matrix_write", "--one", str(source), str(out)],
                check=True,
                capture_output=True,
                text=True,
            )
            runs.append(json.loads(done.stdout))
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "benchmark": "matrix_write",
        "table": "synthetic" if table_dir is None else str(table_dir),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "runs": runs,
    }


def render_markdown(report: dict[str, Any]) -> str:
    first = report["runs"][0]
    lines = [
        "# Writing an exact matrix: anonymous memory peak and time",
        "",
        f"Table: {report['table']} ({first['rows']} rows, vectors {first['vectors_mib']} MiB). Each write in a "
        "fresh process; the peak is RssAnon sampled every 3 ms, less the process's before the write.",
        "",
        "| run | peak anon MiB | peak / vectors | seconds | files MiB |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n, r in enumerate(report["runs"], start=1):
        ratio = r["write_peak_anon_mib"] / r["vectors_mib"] if r["vectors_mib"] else 0.0
        peak, files = r["write_peak_anon_mib"], r["files_mib"]
        lines.append(f"| {n} | {peak:.0f} | {ratio:.2f} | {r['seconds']:.1f} | {files:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_matrix_write", description=__doc__.split("\n")[0])
    parser.add_argument("--table", type=Path, help="a folder holding a LanceDB `chunks` table (default: build one)")
    parser.add_argument("--rows", type=int, default=300_000, help="rows of the synthetic table")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--name", default="matrix_write", help="file name of the results, without suffix")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--one", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        sys.stdout.write(json.dumps(measure_one(*args.one)) + "\n")
        return 0
    if args.rows < 1 or args.repeats < 1:
        parser.error("--rows and --repeats must be >= 1")
    if args.table is not None and not (args.table / f"{TABLE}.lance").is_dir():
        parser.error(f"{args.table}: no LanceDB `{TABLE}` table here")
    report = run(args.table, args.rows, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(canonical_pretty(report) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (args.out / f"{args.name}.md").write_text(markdown, encoding="utf-8")
    sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
