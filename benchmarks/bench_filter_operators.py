"""The filter operators on real text, against a direct evaluation.

fixtures/realtext (3 227 chunks of Debian packaging text, see its README; ``year`` is absent from
every copyright file) is indexed as ``race index`` does, from its committed vectors. Each
operator runs through tantivy BM25, LanceDB's exact flat scan, the exact matrix, the ANN
prefilter and the ANN postfilter, for each of the fixture's queries, and is compared with the
unfiltered ranking restricted to the rows ``Filter.matches`` passes on the corpus's own
metadata: BM25's ranking of every row, and numpy's cosine distances over every row's vector
(float64) for the vector contracts. Exact contracts must agree on every query; the ANN
prefilter reports its recall@k, the postfilter how many of k rows survived. Scan times are
medians of the same scans after a warm-up pass, each operator's beside the ``eq`` baseline's
(ratios measured side by side on the same machine, which other work shares: noisy).

    python -m benchmarks.bench_filter_operators [--queries 20] [--index DIR] [--out benchmarks/out]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from backends import Adapter, load_corpus
from benchmarks.realtext import CORPUS, ROOT, build_realtext_index, stored_chunks
from race.engine import Engine
from rsc import Contract, Filter, Query, ScanRequest, canonical_pretty

K = 10
FILTERS: dict[str, dict[str, Any]] = {
    "eq (baseline)": {"field": "area", "op": "eq", "value": "libs"},
    "ne": {"field": "kind", "op": "ne", "value": "changelog"},
    "not_in": {"field": "area", "op": "not_in", "values": ["libs", "utils", "python"]},
    "prefix (package)": {"field": "package", "op": "prefix", "value": "lib"},
    "prefix (folder of doc_id)": {"field": "doc_id", "op": "prefix", "value": "copyright/python3-"},
    "exists (year: absent from copyright files)": {"field": "year", "op": "exists"},
    "ne (year: absent rows fail)": {"field": "year", "op": "ne", "value": 2022},
    "any_of": {
        "op": "any_of",
        "any_of": [{"field": "area", "op": "eq", "value": "python"}, {"field": "year", "op": "range", "gte": 2023}],
    },
}
CONTRACTS = (
    ("tantivy", "tantivy.bm25"),
    ("lancedb", "lancedb.flat_prefilter"),
    ("lancedb", "lancedb.exact_matrix"),
    ("lancedb", "lancedb.ann_prefilter"),
    ("lancedb", "lancedb.ann_postfilter"),
)


def _request(contract: Contract, text: str, k: int, flt: Filter | None) -> ScanRequest:
    postfilter = contract.rsc_id == "lancedb.ann_postfilter"
    return ScanRequest(
        obligation="bench",
        rsc_id=contract.rsc_id,
        rsc_version=contract.version,
        backend=contract.backend,
        mode=contract.mode,
        query=Query(text=text),
        k=k,
        pushed=(flt,) if flt is not None and not postfilter else (),
        residual=(flt,) if flt is not None and postfilter else (),
    )


def _timed(adapter: Adapter, request: ScanRequest) -> tuple[list[str], float]:
    start = time.perf_counter()
    result = anyio.run(adapter.scan, request)
    return [h.chunk_id for h in result.hits], (time.perf_counter() - start) * 1000.0


def run(index: Path, queries: int) -> dict[str, Any]:
    engine = Engine.open(index)
    by_doc = {str(c.metadata["doc_id"]): dict(c.metadata) for c in load_corpus(CORPUS).chunks}
    stored = stored_chunks()
    # Every chunk carries its document's metadata (chunk ids are ``<doc_id>#<n>``).
    metadata = {c: by_doc[c.rsplit("#", 1)[0]] for c in stored.ids}
    matrix = stored.vectors.astype(np.float64)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    asked = [json.loads(line)["text"] for line in (ROOT / "queries.jsonl").read_text().splitlines() if line][:queries]
    query_vectors = np.load(ROOT / "queries.npy")[: len(asked)].astype(np.float64)
    rows = len(metadata)
    for backend, rsc_id in CONTRACTS:
        # Warm-up: tables opened, query vectors embedded and cached, before anything is timed.
        adapter = engine.adapters[backend]
        contract = next(c for c in adapter.index_contracts() if c.rsc_id == rsc_id)
        for text in asked:
            _timed(adapter, _request(contract, text, K, Filter.model_validate(FILTERS["eq (baseline)"])))
    report: dict[str, Any] = {"rows": rows, "queries": len(asked), "k": K, "filters": {}}
    for name, spec in FILTERS.items():
        flt = Filter.model_validate(spec)
        passing = np.array([flt.matches(metadata[c]) for c in stored.ids])
        entry: dict[str, Any] = {"filter": flt.describe(), "rows_passing": int(passing.sum()), "contracts": {}}
        for backend, rsc_id in CONTRACTS:
            adapter = engine.adapters[backend]
            contract = next(c for c in adapter.index_contracts() if c.rsc_id == rsc_id)
            agree, recalls, kept, times = 0, [], [], []
            for q, text in enumerate(asked):
                got, ms = _timed(adapter, _request(contract, text, K, flt))
                times.append(ms)
                if rsc_id == "tantivy.bm25":
                    everything, _ = _timed(adapter, _request(contract, text, rows, None))
                    expected = [c for c in everything if flt.matches(metadata[c])][:K]
                    agree += got == expected
                    continue
                query = query_vectors[q] / np.linalg.norm(query_vectors[q])
                distance = 1.0 - matrix @ query
                order = [i for i in np.argsort(distance, kind="stable") if passing[i]][:K]
                truth = {stored.ids[i] for i in order}
                agree += set(got) == truth
                recalls.append(len(set(got) & truth) / max(len(truth), 1))
                kept.append(len(got))
            entry["contracts"][rsc_id] = {
                "agree": f"{agree}/{len(asked)}",
                "recall_at_k": round(statistics.fmean(recalls), 4) if recalls else None,
                "mean_hits": round(statistics.fmean(kept), 2) if kept else None,
                "median_ms": round(statistics.median(times), 3),
            }
        report["filters"][name] = entry
    baseline = report["filters"]["eq (baseline)"]["contracts"]
    for entry in report["filters"].values():
        for rsc_id, figures in entry["contracts"].items():
            figures["time_vs_eq"] = round(figures["median_ms"] / baseline[rsc_id]["median_ms"], 2)
    return report


def render_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Filter operators on real text (fixtures/realtext)",
        "",
        f"{report['rows']} chunks, {report['queries']} queries, k={report['k']}. `agree`: queries whose "
        "filtered answer equals the direct evaluation (BM25: the same keys in the same order; vectors: "
        "the same top-k set as numpy over every row). Median scan time and its ratio to `eq`.",
        "",
        "| filter | rows passing | contract | agree | recall@k | mean hits | median ms | vs eq |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, entry in report["filters"].items():
        for rsc_id, f in entry["contracts"].items():
            recall = "" if f["recall_at_k"] is None else f"{f['recall_at_k']:.3f}"
            hits = "" if f["mean_hits"] is None else f"{f['mean_hits']:.1f}"
            lines.append(
                f"| {name}: `{entry['filter']}` | {entry['rows_passing']} | {rsc_id} | {f['agree']} | {recall} | "
                f"{hits} | {f['median_ms']:.2f} | {f['time_vs_eq']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--index", type=Path, help="an index of fixtures/realtext already built")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        index = args.index or build_realtext_index(Path(tmp) / "index")
        report = run(index, args.queries)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "filter_operators.json").write_text(canonical_pretty(report) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (args.out / "filter_operators.md").write_text(markdown, encoding="utf-8")
    sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
