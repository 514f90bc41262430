"""``race eval`` at the size of a real query set, beside a BM25 library and LanceDB's native
hybrid search on the same documents, every figure cross-checked by ir-measures.

The set is built by ``benchmarks.build_stdlib_eval`` (known-item queries over docstrings nobody
on the project wrote) and indexed by ``race index``. This script:

1. runs ``race eval`` as a child process (wall time; peak RSS from ``getrusage`` of the
   children), exporting one TREC run per strategy;
2. ranks the same documents (title and text) with bm25s, and with LanceDB's native hybrid
   query (its full-text index and its vector search over a copy of the index's own chunk
   table, the same vectors, fused by its default RRF reranker; chunks to documents by MaxP),
   each written as a TREC run;
3. scores every run with ir-measures over the queries RACE scored, and checks that RACE's
   report gives the same means as ir-measures on its exported runs.

    .venv/bin/python -m benchmarks.build_stdlib_eval --out /tmp/stdlib-eval
    .venv/bin/race index /tmp/stdlib-eval/docs.jsonl --out /tmp/stdlib-eval/index
    .venv/bin/python -m benchmarks.bench_eval_scale --set /tmp/stdlib-eval --index /tmp/stdlib-eval/index

writes ``benchmarks/results/eval_scale.json`` and ``eval_scale.md``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
MEASURES = ("nDCG@10", "R@10", "RR@10", "P@5")
STRATEGIES = ("lexical", "conceptual", "hybrid")
K = 10


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_run(path: Path, ranked: dict[str, list[str]], tag: str) -> None:
    with path.open("w", encoding="utf-8") as out:
        for qid, docs in ranked.items():
            for rank, doc in enumerate(docs, start=1):
                out.write(f"{qid} Q0 {doc} {rank} {len(docs) - rank + 1} {tag}\n")


def run_race(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    command = [
        str(Path(sys.executable).parent / "python"),
        "-m",
        "race",
        "eval",
        str(args.set / "queries.jsonl"),
        str(args.set / "qrels.trec"),
        "--index",
        str(args.index),
        "--strategies",
        ",".join(args.strategies),
        "--metrics",
        " ".join(MEASURES),
        "--k",
        str(K),
        "--samples",
        "1000",
        "--concurrency",
        str(args.concurrency),
        "--export-runs",
        str(work / "runs"),
        "--out",
        str(work),
        "--name",
        "race",
        "--json",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"race eval failed ({done.returncode}): {done.stderr[-2000:]}")
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"wall_s": round(wall, 1), "peak_rss_mb": round(peak_kb / 1024, 1), "report": json.loads(done.stdout)}


def run_bm25s(docs: list[dict[str, Any]], queries: list[dict[str, Any]]) -> tuple[dict[str, list[str]], float]:
    import bm25s

    started = time.perf_counter()
    retriever = bm25s.BM25()
    corpus = bm25s.tokenize([f"{d['title']}\n{d['text']}" for d in docs], stopwords="en", show_progress=False)
    retriever.index(corpus, show_progress=False)
    found, _ = retriever.retrieve(
        bm25s.tokenize([q["text"] for q in queries], stopwords="en", show_progress=False), k=K, show_progress=False
    )
    ranked = {q["id"]: [docs[int(i)]["id"] for i in row] for q, row in zip(queries, found, strict=True)}
    return ranked, time.perf_counter() - started


def run_lancedb_hybrid(index: Path, queries: list[dict[str, Any]]) -> tuple[dict[str, list[str]], float]:
    import lancedb
    from lancedb.index import FTS

    from backends.lancedb.query import TABLE, VECTOR
    from backends.models.embedding import MiniLMEmbedder

    copy = Path(tempfile.mkdtemp(prefix="race-eval-native-")) / "lancedb"
    shutil.copytree(index / "lancedb", copy)
    try:
        table = lancedb.connect(str(copy)).open_table(TABLE)
        table.create_index("text", config=FTS())
        embedder = MiniLMEmbedder()  # the model the index was built with
        started = time.perf_counter()
        vectors = embedder.embed([q["text"] for q in queries])
        ranked: dict[str, list[str]] = {}
        for q, vector in zip(queries, vectors, strict=True):
            chunks = (
                table.search(query_type="hybrid", vector_column_name=VECTOR)
                .vector(vector)
                .text(q["text"])
                .limit(K * 5)
                .to_arrow()
            )
            docs: list[str] = []
            for doc in chunks.column("doc_id").to_pylist():  # MaxP: a document's first (best) chunk
                if doc not in docs:
                    docs.append(str(doc))
            ranked[q["id"]] = docs[:K]
        return ranked, time.perf_counter() - started
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)


def score(run: Path, qrels: Path, queries: set[str]) -> dict[str, float]:
    from race.evaluation.stats import ir_measures as library

    ir_measures = library()

    parsed = [ir_measures.parse_measure(m) for m in MEASURES]
    judged = [q for q in ir_measures.read_trec_qrels(str(qrels)) if q.query_id in queries]
    ranked = [r for r in ir_measures.read_trec_run(str(run)) if r.query_id in queries]
    totals = dict.fromkeys(MEASURES, 0.0)
    for metric in ir_measures.iter_calc(parsed, judged, ranked):
        totals[str(metric.measure)] += metric.value
    # A query with no run line scores 0 (ir-measures leaves it out; RACE counts it).
    return {m: totals[m] / len(queries) for m in MEASURES}


def markdown(result: dict[str, Any]) -> str:
    rows = result["systems"]
    out = [
        "# Evaluation at scale: known-item queries over stdlib and numpy docstrings",
        "",
        f"{result['queries']} queries over {result['documents']} documents ({result['corpus_mb']} MB of "
        f"docstrings; the summary line of each is its query, the rest its document). RACE: `race eval` "
        f"of {len(result['strategies'])} strategies, k={K} documents (MaxP), "
        f"concurrency {result['race']['concurrency']}: "
        f"{result['race']['wall_s']} s wall, peak RSS {result['race']['peak_rss_mb']} MB. Measures by "
        "ir-measures on the exported TREC runs, over the queries RACE scored; RACE's own report agrees "
        f"to within {result['cross_check_max_abs_diff']:.1e}.",
        "",
        "| system | scored | " + " | ".join(MEASURES) + " | time |",
        "|---|---:|" + "---:|" * (len(MEASURES) + 1),
    ]
    for name, row in rows.items():
        cells = " | ".join(f"{row['measures'][m]:.4f}" for m in MEASURES)
        out.append(f"| {name} | {row['scored']} | {cells} | {row['time']} |")
    out += ["", *result.get("notes", [])]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=Path, required=True, help="folder written by benchmarks.build_stdlib_eval")
    parser.add_argument("--index", type=Path, required=True, help="race index of SET/docs.jsonl")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument(
        "--strategies", default=",".join(STRATEGIES), help="RACE strategies (lexical alone on a lexical-only index)"
    )
    parser.add_argument("--work", type=Path, help="where the runs and the report go (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="eval_scale", help="file name stem under --out")
    parser.add_argument(
        "--reuse-race", action="store_true", help="score WORK/race.json and WORK/runs of an earlier run (no wall, RSS)"
    )
    args = parser.parse_args(argv)
    args.strategies = tuple(args.strategies.split(","))
    vectors = (args.index / "lancedb").is_dir()
    work = args.work or Path(tempfile.mkdtemp(prefix="race-eval-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    docs, queries = _lines(args.set / "docs.jsonl"), _lines(args.set / "queries.jsonl")
    qrels = args.set / "qrels.trec"
    if args.reuse_race:
        race = {"wall_s": None, "peak_rss_mb": None, "report": json.loads((work / "race.json").read_text())}
    else:
        race = run_race(args, work)
    report = race.pop("report")
    ranked, bm25_s = run_bm25s(docs, queries)
    write_run(work / "runs" / "bm25s.run", ranked, "bm25s")
    peers = [("bm25s", bm25_s)]
    if vectors:
        ranked, lance_s = run_lancedb_hybrid(args.index, queries)
        write_run(work / "runs" / "lancedb-hybrid.run", ranked, "lancedb-hybrid")
        peers.append(("lancedb-hybrid", lance_s))
    systems: dict[str, Any] = {}
    worst = 0.0
    for strategy in args.strategies:
        not_scored = set(report["not_scored"].get(strategy, {}))
        scored = set(report["per_query"]) - not_scored
        measured = score(work / "runs" / f"{strategy}.run", qrels, scored)
        for m in MEASURES:
            worst = max(worst, abs(measured[m] - report["overall"][strategy][m]["mean"]))
        systems[f"race {strategy}"] = {"scored": len(scored), "measures": measured, "time": "(all: wall above)"}
    every = set(report["per_query"])
    for name, seconds in peers:
        row = {"scored": len(every), "measures": score(work / "runs" / f"{name}.run", qrels, every)}
        systems[name] = {**row, "time": f"{seconds:.1f} s"}
    result = {
        "queries": len(queries),
        "documents": len(docs),
        "corpus_mb": round((args.set / "docs.jsonl").stat().st_size / 1e6, 2),
        "race": {**race, "concurrency": args.concurrency, "not_scored": report["scored"]},
        "systems": systems,
        "strategies": list(args.strategies),
        "cross_check_max_abs_diff": worst,
        "settings": report["settings"] | {"unjudged_queries": len(report["settings"]["unjudged_queries"])},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))
    return 0 if worst < 1e-9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
