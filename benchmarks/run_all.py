"""Every benchmark at full scale, one after another (``make bench``). Each writes its JSON
and markdown table to ``benchmarks/out/`` and a commit-ready copy to ``benchmarks/results/``.
Takes several minutes: the filtered-vector benchmark alone trains five ANN indexes over
100k vectors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
# module, and the out/ files it leaves for results/ (those that write results/ themselves: none)
BENCHMARKS = (
    ("benchmarks.bench_planner", ()),
    ("benchmarks.bench_executor", ()),
    ("benchmarks.bench_graph_expansion", ("graph_expansion",)),
    ("benchmarks.bench_filtered_vectors", ("filtered_vectors",)),
    ("benchmarks.bench_filter_operators", ("filter_operators",)),
    ("benchmarks.bench_exact_vectors", ("exact_vectors",)),
    ("benchmarks.bench_matrix_write", ("matrix_write",)),
    ("benchmarks.bench_early_stop", ("early_stop",)),
    ("benchmarks.bench_startup", ()),
    ("benchmarks.bench_batch", ("batch",)),
    ("benchmarks.bench_python_api", ()),
)


def main() -> int:
    failed = []
    for module, stems in BENCHMARKS:
        print(f"== python -m {module}", flush=True)
        if subprocess.call([sys.executable, "-m", module]) != 0:
            failed.append(module)
            continue
        for stem in stems:
            for suffix in (".json", ".md"):
                shutil.copyfile(HERE / "out" / f"{stem}{suffix}", HERE / "results" / f"{stem}{suffix}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
