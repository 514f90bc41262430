"""A whole `race index` build of at least 10 MB of real text against the model's FLOP bound.

The corpus: distinct entries of the Debian changelogs on this machine
(``/usr/share/doc/*/changelog.Debian.gz``, text nobody on the project wrote), one ``.txt`` file
each, drawn with a fixed seed until the files hold ``--megabytes`` MB. ``race index`` builds
the whole index (tantivy, LanceDB with the model's vectors, the graph, calibration) in a fresh
process, timed by wall clock and its CPU time. The bound: every distinct chunk text the build
embeds (cut as ``race index`` cuts it, read back through ``load_corpus``), at the model's FLOPs
for its word pieces (``bench_indexing.text_flops``), over both cores at the float64 GEMM rate
one core reaches in this run (``bench_indexing.gemm_peak``). The share is that bound over the
build's wall time: 100 % would be a build that only multiplies, on every core, at GEMM speed.

    nice -n 10 .venv/bin/python -m benchmarks.bench_index_build [--megabytes 10]

Writes benchmarks/results/index_build.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from backends.ingest.corpus import Chunking, load_corpus
from backends.lancedb.build import chunk_text
from backends.models.embed_batch import cores
from backends.models.embedding import MiniLMEmbedder, token_counter
from benchmarks.bench_indexing import SEED, changelog_entries, gemm_peak, text_flops

HERE = Path(__file__).parent


def write_corpus(folder: Path, megabytes: float) -> dict[str, int]:
    """Distinct changelog entries, a file each, until they hold ``megabytes`` MB."""
    files = sorted(Path("/usr/share/doc").glob("*/changelog.Debian.gz"))
    random.Random(SEED).shuffle(files)
    seen: set[str] = set()
    written = 0
    for file in files:
        for _, version, entry in changelog_entries(file):
            if entry in seen:
                continue
            seen.add(entry)
            name = f"{file.parent.name}-{version}".replace("/", "_").replace(":", "_")
            data = entry.encode("utf-8")
            (folder / f"{name}-{len(seen)}.txt").write_bytes(data)
            written += len(data)
            if written >= megabytes * 1e6:
                return {"files": len(seen), "bytes": written}
    return {"files": len(seen), "bytes": written}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=10.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="race-index-build-") as tmp:
        corpus, out = Path(tmp) / "corpus", Path(tmp) / "index"
        corpus.mkdir()
        written = write_corpus(corpus, args.megabytes)
        counter = token_counter()
        assert counter is not None, "the embedding model is installed"
        loaded = load_corpus(corpus, chunking=Chunking(tokens=counter))
        texts = sorted({chunk_text(c) for c in loaded.chunks})
        model = MiniLMEmbedder()._model()
        tokens = [len(e.ids) for e in model.tokenizer.encode_batch(texts)]
        flops = sum(text_flops(n) for n in tokens)
        peak = gemm_peak()
        load_before = os.getloadavg()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "race", "index", str(corpus), "--out", str(out)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    bound = flops / (cores() * peak)
    result = {
        **written,
        "chunks": len(loaded.chunks),
        "distinct_chunk_texts": len(texts),
        "word_pieces": sum(tokens),
        "gflop": round(flops / 1e9, 1),
        "cores": cores(),
        "core_peak_gflops": round(peak / 1e9, 1),
        "bound_s": round(bound, 1),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "share_of_bound": round(bound / wall, 3),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    (HERE / "results" / "index_build.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# A whole `race index` build against the model's FLOP bound",
        "",
        f"{result['files']:,} distinct Debian changelog entries, {result['bytes']:,} bytes of text; "
        f"{result['chunks']:,} chunks, {result['distinct_chunk_texts']:,} distinct chunk texts, "
        f"{result['word_pieces']:,} word pieces embedded, {result['gflop']:,} GFLOP.",
        "",
        "| build wall s | build CPU s | bound s | share of the bound | one core's GEMM GFLOP/s | cores |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {result['wall_s']} | {result['cpu_s']} | {result['bound_s']} | "
        f"{round(100 * result['share_of_bound'])} % | {result['core_peak_gflops']} | {result['cores']} |",
        "",
        f"Target (issue 30): at least 80 % of the bound. Load average "
        f"{' / '.join(map(str, result['load_before']))} before and "
        f"{' / '.join(map(str, result['load_after']))} after (1 / 5 / 15 min).",
    ]
    (HERE / "results" / "index_build.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
