"""The forward pass of an index build's batches on one core: numpy's path against the compiled
one (``compile_forward_passes``, the extra ``fast``), beside the FLOP bound of that core.

Texts: the entries of Debian changelogs on this machine (``/usr/share/doc/*/changelog.Debian.gz``,
text nobody on the project wrote), cut by the model's tokenizer into windows of at most 250 word
pieces (the model reads 256 with [CLS] and [SEP]), embedded in batches of 32 sorted by length, as
an index build embeds its chunks. The two paths alternate batch by batch on one BLAS thread and are timed in
process CPU time; every vector is compared bit for bit. The bound: the batches' FLOPs
(``bench_indexing.text_flops``) over one core's float64 GEMM rate measured in the same run
(``bench_indexing.gemm_peak``): the share of it each path reaches.

    .venv/bin/python -m benchmarks.bench_forward_pass [--chunks N]

Writes benchmarks/results/forward_pass.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from backends.models.embedding import MiniLMEmbedder, compile_forward_passes, token_counter
from benchmarks.bench_indexing import SEED, changelog_entries, gemm_peak, text_flops

HERE = Path(__file__).parent
BATCH = 32
_WINDOW = 250


def _chunks(count: int) -> list[str]:
    """``count`` distinct chunks of changelog entries, drawn with a fixed seed."""
    counter = token_counter()
    assert counter is not None, "the embedding model is installed"
    files = sorted(Path("/usr/share/doc").glob("*/changelog.Debian.gz"))
    random.Random(SEED).shuffle(files)
    seen: set[str] = set()
    chunks: list[str] = []
    for file in files:
        for _, _, entry in changelog_entries(file)[:3]:
            spans = counter.offsets(entry)
            for first in range(0, len(spans), _WINDOW):
                last = spans[min(first + _WINDOW, len(spans)) - 1]
                chunk = entry[spans[first][0] : last[1]]
                if chunk not in seen:
                    seen.add(chunk)
                    chunks.append(chunk)
        if len(chunks) >= count:
            break
    return chunks[:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=640)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    model = MiniLMEmbedder()._model()
    started = time.perf_counter()
    assert compile_forward_passes() == 1, "numba (the extra fast) is installed"
    setup_s = time.perf_counter() - started
    compiled = model.compiled_path
    texts = _chunks(args.chunks)
    tokens = [len(e.ids) for e in model.tokenizer.encode_batch(texts)]
    order = sorted(range(len(texts)), key=lambda i: (tokens[i], i))
    batches = [order[start : start + BATCH] for start in range(0, len(order), BATCH)]
    seconds = {"numpy": 0.0, "compiled": 0.0}
    same = True
    with threadpool_limits(limits=1, user_api="blas"):
        peak = gemm_peak()
        for batch in batches:
            share = [texts[i] for i in batch]
            vectors = {}
            for name, path in (("numpy", None), ("compiled", compiled)):
                begun = time.process_time()
                vectors[name] = model.encode_batch(share, path)
                seconds[name] += time.process_time() - begun
            same = same and vectors["numpy"].tobytes() == vectors["compiled"].tobytes()
    flops = sum(text_flops(n) for n in tokens)
    rows: dict[str, Any] = {
        name: {
            "cpu_s": round(s, 2),
            "gflops": round(flops / s / 1e9, 1),
            "share_of_core_peak": round(flops / s / peak, 3),
        }
        for name, s in seconds.items()
    }
    out = {
        "chunks": len(texts),
        "tokens": sum(tokens),
        "mean_tokens": round(sum(tokens) / len(tokens), 1),
        "text_bytes": sum(len(t.encode("utf-8")) for t in texts),
        "gflop": round(flops / 1e9, 1),
        "core_peak_gflops": round(peak / 1e9, 1),
        "setup_s": round(setup_s, 2),
        "same_bits": same,
        "paths": rows,
        "compiled_over_numpy": round(seconds["compiled"] / seconds["numpy"], 3),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    (HERE / "results" / "forward_pass.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        "# The forward pass of an index build's batches, one core",
        "",
        f"{out['chunks']} distinct chunks of Debian changelog entries ({out['text_bytes']:,} bytes, "
        f"{out['tokens']:,} word pieces, {out['mean_tokens']} a chunk), batches of {BATCH} by length, "
        f"one BLAS thread, the two paths alternating batch by batch; {out['gflop']} GFLOP of products "
        f"and attention. One core's float64 GEMM in this run: {out['core_peak_gflops']} GFLOP/s.",
        "",
        "| path | CPU s | GFLOP/s | share of one core's GEMM rate |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | {r['cpu_s']} | {r['gflops']} | {round(100 * r['share_of_core_peak'])} % |"
            for name, r in rows.items()
        ),
        "",
        f"compiled / numpy CPU: {out['compiled_over_numpy']}; same vector bits for every chunk: "
        f"{'yes' if same else 'NO'}; the compiled path's set-up took {out['setup_s']} s.",
        "",
        f"2 CPUs, load average {' / '.join(map(str, out['load_before']))} before and "
        f"{' / '.join(map(str, out['load_after']))} after (1 / 5 / 15 min)",
    ]
    (HERE / "results" / "forward_pass.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
