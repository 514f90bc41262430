"""Indexing throughput on a corpus of real changelog entries, 78 % of them byte-identical copies.

The corpus: Debian changelog entries (``/usr/share/doc/*/changelog.Debian.gz`` of this
machine), each source's changelog shipped by several sibling "packages", as Debian ships one
changelog in ``libfoo1``, ``libfoo-dev`` and ``foo-utils``: the copies have the same title and
text, so the same embedded text, and their own ids and ``component``. Sources, entries and
sibling counts are drawn with a fixed seed.

Measured side by side in one run, on the same chunks (cut by the model's tokenizer, as
``race index`` cuts them):

- ``old``: every copy embedded, in corpus order, 64 chunks a call (the build before
  de-duplication), one process on one BLAS thread;
- ``distinct/serial``: each distinct text once, in batches sorted by token length, one process;
- ``distinct/blas``: the same, BLAS free to use every core;
- ``distinct/pool``: the same, one worker process per core (the worker start-up included).

Every path's vectors are checked bit for bit against the old path's. Throughput is chunks of
the corpus (copies included) per second. The FLOP bound: all-MiniLM-L6-v2 has 6 layers of
hidden size d = 384 and feed-forward 1536, so a text of T word pieces costs
``6 * (2 * T * P + 4 * T^2 * d)`` FLOPs, P = 4 d^2 + 2 * d * 1536 = 1,769,472 weights a layer
(the ~2 x params x tokens of the dense products; the 11.7 M embedding-table weights are looked
up, not multiplied) plus QK^T and AV (2 T^2 d each). The encoder's products are float64 GEMMs
(exact integer-grid sums), so the peak is this machine's float64 GEMM rate, measured here on
one core and multiplied by the cores; the bound in chunks/s is that peak over the mean FLOPs
of a chunk (every copy computed). De-duplication computes fewer chunks than the corpus has,
so it can pass the bound for copies; its achieved GFLOP/s says how close each path runs to
the machine.

Then ``race index --update`` on the same corpus after editing two documents, deleting one and
adding one (a copy of an entry under a new package), against a whole build of the edited corpus.

    nice -n 10 .venv/bin/python -m benchmarks.bench_indexing [--quick] [--no-update]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from backends.ingest.corpus import Chunking, load_corpus
from backends.lancedb.build import chunk_text
from backends.models.embed_batch import Parallel, cores, embed_distinct
from backends.models.embedding import MiniLMEmbedder, token_counter

HERE = Path(__file__).parent
RESULTS = HERE / "results"
SEED = 13
_HEADER = re.compile(r"^(\S+) \(([^)]+)\)")
_LAYERS, _HIDDEN, _FFN = 6, 384, 1536
_PARAMS_PER_LAYER = 4 * _HIDDEN * _HIDDEN + 2 * _HIDDEN * _FFN


def changelog_entries(path: Path) -> list[tuple[str, str, str]]:
    """(source, version, entry text) of every entry of one changelog.Debian.gz."""
    try:
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    entries: list[tuple[str, str, str]] = []
    current: list[str] = []
    head: tuple[str, str] | None = None
    for line in text.splitlines():
        match = _HEADER.match(line)
        if match and not current:
            head = (match[1], match[2])
        if head is not None:
            current.append(line)
        if line.startswith(" -- ") and head is not None:
            entries.append((head[0], head[1], "\n".join(current)))
            current, head = [], None
    return entries


def duplicate_corpus(path: Path, distinct_entries: int, seed: int = SEED) -> dict[str, Any]:
    """A JSONL corpus: ``distinct_entries`` entries, each source's shipped by 3 to 6 packages
    (about 78 % of the documents copies of another); the copy counts of what was written."""
    rng = random.Random(seed)
    files = sorted(Path("/usr/share/doc").glob("*/changelog.Debian.gz"))
    rng.shuffle(files)
    seen: set[str] = set()
    docs: list[dict[str, str]] = []
    distinct = 0
    for file in files:
        if distinct >= distinct_entries:
            break
        entries = [e for e in changelog_entries(file) if e[2] not in seen and len(e[2]) < 6000][:4]
        if not entries:
            continue
        siblings = rng.choice([3, 4, 5, 6, 6])
        package = file.parent.name
        for source, version, text in entries:
            seen.add(text)
            distinct += 1
            for n in range(siblings):
                name = package if n == 0 else f"{package}-sib{n}"
                docs.append(
                    {"id": f"{name}/{version}", "title": f"{source} ({version})", "text": text, "component": name}
                )
    rng.shuffle(docs)
    path.write_text("".join(json.dumps(d, sort_keys=True) + "\n" for d in docs), encoding="utf-8")
    return {"documents": len(docs), "distinct_entries": distinct, "duplicate_share": 1 - distinct / len(docs)}


def text_flops(tokens: int) -> float:
    return _LAYERS * (2.0 * tokens * _PARAMS_PER_LAYER + 4.0 * tokens * tokens * _HIDDEN)


def gemm_peak() -> float:
    """float64 GEMM FLOP/s of one core (best of three 768x768 products)."""
    a = np.random.default_rng(0).standard_normal((768, 768))
    best = float("inf")
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(3):
            started = time.perf_counter()
            a @ a
            best = min(best, time.perf_counter() - started)
    return 2.0 * 768**3 / best


def old_path(texts: list[str], embedder: MiniLMEmbedder) -> np.ndarray:
    out = np.empty((len(texts), 384), dtype=np.float32)
    for start in range(0, len(texts), 64):
        out[start : start + 64] = embedder.embed(texts[start : start + 64])
    return out


def update_figures(corpus_file: Path, work: Path) -> dict[str, Any]:
    """``race index --update`` after editing two documents, deleting one and adding one (a
    copy of an existing entry under a new package) against a whole build of the edited corpus."""
    from race.indexing.indexing import build_index
    from race.indexing.update import update_index

    index = work / "index"
    build_index(corpus_file, index)
    docs = [json.loads(line) for line in corpus_file.read_text(encoding="utf-8").splitlines()]
    for doc in docs[:2]:
        doc["text"] += "\n  * Rebuilt against the new toolchain."
    docs = [*docs[:-1], {**docs[3], "id": docs[3]["id"] + "-new", "component": "new-sibling"}]
    corpus_file.write_text("".join(json.dumps(d, sort_keys=True) + "\n" for d in docs), encoding="utf-8")
    started = time.perf_counter()
    summary = update_index(corpus_file, index)
    update_seconds = time.perf_counter() - started
    started = time.perf_counter()
    build_index(corpus_file, work / "rebuilt")
    build_seconds = time.perf_counter() - started
    return {
        "documents": len(docs),
        "added": len(summary.added),
        "changed": len(summary.changed),
        "removed": len(summary.removed),
        "chunks_embedded": summary.chunks_embedded,
        "texts_embedded": summary.texts_embedded,
        "update_seconds": round(update_seconds, 2),
        "rebuild_seconds": round(build_seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a small corpus (about a quarter)")
    parser.add_argument("--no-update", action="store_true", help="leave out the --update vs rebuild figures")
    args = parser.parse_args()
    embedder = MiniLMEmbedder()
    counter = token_counter()
    assert counter is not None, "the embedding model is not installed"
    embedder.embed(["warm up"])
    with tempfile.TemporaryDirectory() as tmp:
        corpus_file = Path(tmp) / "changelogs.jsonl"
        shape = duplicate_corpus(corpus_file, 20 if args.quick else 80)
        corpus = load_corpus(corpus_file, chunking=Chunking(tokens=counter))
        update = None if args.no_update else update_figures(corpus_file, Path(tmp))
    texts = [chunk_text(c) for c in corpus.chunks]
    tokens = [min(counter.count(t) + counter.specials, counter.max_tokens) for t in texts]
    distinct_texts = len(set(texts))
    flops_all = sum(text_flops(t) for t in tokens)
    seen: set[str] = set()
    flops_distinct = 0.0
    for text, n in zip(texts, tokens, strict=True):
        if text not in seen:
            seen.add(text)
            flops_distinct += text_flops(n)
    peak = gemm_peak() * cores()
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    reference = old_path(texts, embedder)
    old_seconds = time.perf_counter() - started
    runs.append(_run("old (every copy, corpus order)", old_seconds, len(texts), len(texts), flops_all, peak, True))
    modes: list[Parallel] = ["serial", "blas", "pool"]
    for mode in modes:
        started = time.perf_counter()
        vectors, embedded = embed_distinct(texts, embedder, parallel=mode)
        seconds = time.perf_counter() - started
        same = vectors.tobytes() == reference.tobytes()
        runs.append(_run(f"distinct/{mode}", seconds, len(texts), embedded, flops_distinct, peak, same))
    best = max(runs[1:], key=lambda r: r["chunks_per_s"])
    result = {
        "corpus": {**shape, "chunks": len(texts), "distinct_chunk_texts": distinct_texts, "tokens": sum(tokens)},
        "cores": cores(),
        "flops_formula": "6 * (2*T*1769472 + 4*T^2*384) per text of T word pieces",
        "flops_per_chunk_mean": flops_all / len(texts),
        "peak_float64_gflops": peak / 1e9,
        "flop_bound_chunks_per_s": peak / (flops_all / len(texts)),
        "runs": runs,
        "best": best["path"],
        "speedup_best_vs_old": best["chunks_per_s"] / runs[0]["chunks_per_s"],
        "quick": args.quick,
        "update": update,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "indexing.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (RESULTS / "indexing.md").write_text(_markdown(result))
    print(_markdown(result))


def _run(
    path: str, seconds: float, chunks: int, embedded: int, flops: float, peak: float, same: bool
) -> dict[str, Any]:
    return {
        "path": path,
        "seconds": round(seconds, 3),
        "chunks": chunks,
        "texts_embedded": embedded,
        "chunks_per_s": chunks / seconds,
        "achieved_gflops": flops / seconds / 1e9,
        "share_of_peak": flops / seconds / peak,
        "bits_equal_old": same,
        "load_average_after": round(os.getloadavg()[0], 2),
    }


def _markdown(result: dict[str, Any]) -> str:
    c = result["corpus"]
    lines = [
        "# Indexing throughput: de-duplicated, length-sorted embedding",
        "",
        f"Corpus: {c['documents']} changelog entries from /usr/share/doc ({c['distinct_entries']} distinct, "
        f"{c['duplicate_share']:.0%} copies), {c['chunks']} chunks, {c['distinct_chunk_texts']} distinct chunk "
        f"texts, {c['tokens']} tokens embedded by the old path; {result['cores']} cores.",
        "",
        f"FLOP bound: {result['flops_formula']}; mean {result['flops_per_chunk_mean'] / 1e9:.2f} GFLOP a chunk; "
        f"float64 GEMM peak {result['peak_float64_gflops']:.1f} GFLOP/s on {result['cores']} cores: "
        f"{result['flop_bound_chunks_per_s']:.1f} chunks/s if every copy is computed.",
        "",
        "| path | s | texts embedded | chunks/s | vs old | GFLOP/s done | share of peak | bits = old |",
        "|---|---|---|---|---|---|---|---|",
    ]
    old = result["runs"][0]["chunks_per_s"]
    for r in result["runs"]:
        lines.append(
            f"| {r['path']} | {r['seconds']:.1f} | {r['texts_embedded']} | {r['chunks_per_s']:.1f} | "
            f"{r['chunks_per_s'] / old:.2f}x | {r['achieved_gflops']:.2f} | {r['share_of_peak']:.0%} | "
            f"{r['bits_equal_old']} |"
        )
    lines += ["", f"Best: {result['best']}, {result['speedup_best_vs_old']:.2f}x the old path.", ""]
    u = result.get("update")
    if u:
        lines += [
            f"`race index --update` after {u['changed']} edited, {u['added']} added and {u['removed']} removed "
            f"of {u['documents']} documents: {u['update_seconds']:.1f} s, {u['chunks_embedded']} chunks written, "
            f"{u['texts_embedded']} texts embedded; a whole build of the edited corpus: {u['rebuild_seconds']:.1f} s "
            "(both include tantivy, the graph and calibration).",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
