"""``race eval --concurrency`` on a loaded machine, with dense legs: whether more queries at once
keep every run scored (no leg past its deadline) and the report the same.

The index is the real-text fixture's (Debian packaging text, ``benchmarks.realtext``: LanceDB
from the committed MiniLM vectors, tantivy, graph); the query model embeds each query as
``race eval`` does. The known-item set is made from the corpus: each document's first bullet
line of at least ``MIN_QUERY`` characters is a query whose one relevant document is that one.
Each ``--concurrency`` value runs ``race eval`` as a child process beside ``--burners`` CPU-bound
processes (``benchmarks.busy``), all strategies but ``exact``.

    .venv/bin/python -m benchmarks.bench_eval_concurrency [--burners 2] [--concurrency 1 4] [--limit 150]

writes ``benchmarks/results/NAME.json`` and ``.md`` (``--name``, default ``eval_concurrency``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import write_results
from benchmarks.busy import _start_burners, _stop
from benchmarks.realtext import CORPUS, build_realtext_index

MIN_QUERY = 30
STRATEGIES = ("lexical", "conceptual", "hybrid")


def known_items(limit: int) -> tuple[list[dict[str, str]], list[str]]:
    """(queries, TREC qrels lines): one bullet line of each document, in path order."""
    queries: list[dict[str, str]] = []
    qrels: list[str] = []
    for path in sorted(CORPUS.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        head, _, body = text.partition("\n---\n")
        ids = [ln.split(":", 1)[1].strip().strip('"') for ln in head.splitlines() if ln.startswith("id:")]
        bullets = [ln.strip()[2:] for ln in body.splitlines() if ln.strip().startswith("* ") and len(ln) >= MIN_QUERY]
        if not ids or not bullets:
            continue
        qid = f"r{len(queries):04d}"
        queries.append({"id": qid, "text": bullets[0], "category": path.parent.name})
        qrels.append(f"{qid} 0 {ids[0]} 1")
        if len(queries) >= limit:
            break
    return queries, qrels


def run_eval(work: Path, index: Path, concurrency: int, burners: int) -> dict[str, Any]:
    out = work / f"c{concurrency}"
    command = [
        sys.executable, "-m", "race", "eval", str(work / "queries.jsonl"), str(work / "qrels.trec"),
        "--index", str(index), "--strategies", ",".join(STRATEGIES), "--samples", "200",
        "--concurrency", str(concurrency), "--out", str(out), "--json",
    ]  # fmt: skip
    procs = _start_burners(burners)
    try:
        time.sleep(1.0 if burners else 0.0)  # let the burners take their CPUs
        load_before = round(os.getloadavg()[0], 2)
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        load_after = round(os.getloadavg()[0], 2)
    finally:
        _stop(procs)
    if done.returncode != 0:
        raise SystemExit(f"race eval failed ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    return {
        "concurrency": concurrency,
        "burners": burners,
        "wall_s": round(wall, 2),
        "load_before": load_before,
        "load_after": load_after,
        "scored": {s: report["scored"][s]["scored"] for s in STRATEGIES},
        "not_scored": {s: report["scored"][s].get("not_scored", {}) for s in STRATEGIES},
        "overall": report["overall"],
        "per_query": report["per_query"],
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# `race eval --concurrency` beside CPU burners, dense legs included",
        "",
        f"{results['machine']}; {results['queries']} known-item queries over the real-text fixture "
        f"({', '.join(STRATEGIES)}); each run beside {results['burners']} CPU-bound processes.",
        "",
        "| concurrency | wall s | load (1 min) before / after | scored (lexical, conceptual, hybrid) | not scored |"
        " same per-query scores as the first row |",
        "|---:|---:|---|---|---|---|",
    ]
    for r in results["runs"]:
        not_scored = "; ".join(f"{s}: {n}" for s, n in r["not_scored"].items() if n) or "none"
        lines.append(
            f"| {r['concurrency']} | {r['wall_s']} | {r['load_before']} / {r['load_after']} | "
            f"{', '.join(str(r['scored'][s]) for s in STRATEGIES)} | {not_scored} | {'yes' if r['same'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--limit", type=int, default=150)
    parser.add_argument("--name", default="eval_concurrency", help="file name stem under benchmarks/results")
    parser.add_argument("--index", type=Path, help="the fixture's index (built into a temporary folder when not given)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="race-eval-concurrency-"))
    index = args.index or build_realtext_index(work / "index")
    queries, qrels = known_items(args.limit)
    (work / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (work / "qrels.trec").write_text("\n".join(qrels) + "\n")
    runs = [run_eval(work, index, c, args.burners) for c in args.concurrency]
    first = runs[0]["per_query"]
    for r in runs:
        r["same"] = r.pop("per_query") == first
    results = {
        "machine": f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}",
        "queries": len(queries),
        "burners": args.burners,
        "runs": runs,
    }
    write_results(args.name, results, markdown(results))


if __name__ == "__main__":
    main()
