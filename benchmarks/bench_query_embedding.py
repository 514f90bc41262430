"""Query embedding latency: one query of 10 word pieces (12 with [CLS] and [SEP]) through
``QueryVectors`` with a cold cache (every text distinct), p50 and p90, beside the forward
pass's FLOP count for that length (from the model's dimensions) and the rate achieved.

Two paths of the same model, timed query by query in alternating order: ``numpy`` (the
forward pass on numpy and OpenBLAS, what a process without set-up runs) and ``compiled``
(``compile_forward_passes``: the kernels of ``backends.models.kernels``, the extra ``fast``);
every compiled vector is compared with the numpy one bit for bit. Target: compiled p50 at
most 10 ms on a quiet machine (the load average is in the table).

With ``--baseline REV`` the encoder and embedder of git revision REV are loaded beside the
working tree's and timed in the same run, query by query in alternating order, so that a
shared machine's load weighs on both alike; every baseline vector is compared with the
current one bit for bit. Beside wall time, the process CPU time of each query: on a busy
machine the wall time is mostly waiting for a core, and the CPU time is nearer what a quiet
machine's wall time would be (the embedding runs BLAS on one thread).
Writes benchmarks/results/query_embedding.{json,md}.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from backends.models.embedding import _SINGLE_THREAD_BLAS, MiniLMEmbedder, compile_forward_passes, default_model_dir
from backends.models.encoder import CompiledPath, FloatArray, _Bert
from backends.models.queries import QueryVectors
from race.indexing.bundled import BUNDLED_CORPUS

HERE = Path(__file__).parent
ROOT = HERE.parent
PIECES = 10
"""Word pieces of each query, [CLS] and [SEP] not counted."""
TARGET_MS = 10.0


class _Path:
    """The model through one path: numpy's (``short=None``) or the compiled one."""

    def __init__(self, model: _Bert, short: CompiledPath | None) -> None:
        self._model, self._short = model, short
        self.identity = model.identity

    def embed(self, texts: list[str]) -> FloatArray:
        with _SINGLE_THREAD_BLAS:
            return self._model.encode_batch(texts, self._short)


def _queries(count: int) -> list[str]:
    """Distinct windows of the bundled corpus's prose that tokenize to exactly ``PIECES`` word pieces."""
    tokenizer = MiniLMEmbedder()._model().tokenizer
    words = [w for path in sorted(BUNDLED_CORPUS.rglob("*.md")) for w in path.read_text(encoding="utf-8").split()]
    words = [w for w in words if w.isascii() and w.strip("#*-|`>") == w]
    out: list[str] = []
    seen: set[str] = set()
    for start in range(0, len(words), 3):
        for width in range(4, 10):
            text = " ".join(words[start : start + width])
            if len(tokenizer.encode(text).ids) - 2 == PIECES and text not in seen:
                seen.add(text)
                out.append(text)
                break
        if len(out) == count:
            return out
    raise SystemExit(f"only {len(out)} queries of {PIECES} word pieces in the bundled corpus")


def forward_flops(tokens: int, config: dict[str, Any]) -> dict[str, int]:
    """Multiply-adds (x2) of the forward pass's matrix products for one text of ``tokens``
    tokens: Q, K and V projections, attention scores and context, the attention output, and
    the feed-forward pair, per layer. LayerNorm, GELU, softmax and pooling are linear in the
    tokens and left out (under 1 % at this length)."""
    d, f, layers = int(config["hidden_size"]), int(config["intermediate_size"]), int(config["num_hidden_layers"])
    per_layer = {
        "qkv": 2 * tokens * d * 3 * d,
        "attention": 2 * 2 * tokens * tokens * d,
        "attention_output": 2 * tokens * d * d,
        "feed_forward": 2 * 2 * tokens * d * f,
    }
    return {**{k: v * layers for k, v in per_layer.items()}, "total": sum(per_layer.values()) * layers}


def _baseline(rev: str) -> ModuleType:
    """``embedding`` of ``rev``, importing the ``encoder`` of ``rev``."""

    def load(name: str, source: str) -> ModuleType:
        spec = importlib.util.spec_from_loader(name, loader=None)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        exec(compile(source, f"{rev}:{name}", "exec"), module.__dict__)
        return module

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout

    # The model modules moved into backends/models; a revision from before keeps them in backends/.
    try:
        folder, package = "backends/models", "backends.models"
        encoder = show(f"{folder}/encoder.py")
    except subprocess.CalledProcessError:
        folder, package = "backends", "backends"
        encoder = show(f"{folder}/encoder.py")
    load("baseline_encoder", encoder)
    return load("baseline_embedding", show(f"{folder}/embedding.py").replace(f"{package}.encoder", "baseline_encoder"))


def _products_alone(rounds: int) -> dict[str, list[float]]:
    """CPU ms of the forward pass's exact products alone (the 24 layer products at
    ``PIECES + 2`` tokens, on one thread), by OpenBLAS (float64 GEMMs) and by the compiled
    kernel, alternating round by round: a floor for each path's forward pass."""
    from threadpoolctl import threadpool_limits

    from backends.models import kernels

    model = MiniLMEmbedder()._model()
    short = model.compiled_path
    assert isinstance(short, kernels.CompiledKernels)
    rng = np.random.default_rng(0)
    linears = [short.layer(n) for n in range(len(model.layers))]
    flat = [lin for layer in linears for lin in layer]
    inputs = [rng.integers(-(2**20), 2**20, size=(PIECES + 2, lin.packed.shape[1])).astype(np.float64) for lin in flat]
    sums = [np.empty((len(x), lin.packed.shape[0] * lin.tiles.columns)) for x, lin in zip(inputs, flat, strict=True)]
    out: dict[str, list[float]] = {"openblas": [], "compiled": []}
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(rounds):
            started = time.process_time()
            for x, lin in zip(inputs, flat, strict=True):
                x @ lin.linear.weight.ints
            out["openblas"].append((time.process_time() - started) * 1000.0)
            started = time.process_time()
            for x, lin, total in zip(inputs, flat, sums, strict=True):
                lin.tiles(x, lin.packed, total)
            out["compiled"].append((time.process_time() - started) * 1000.0)
    return out


def _gemm_rate(rounds: int = 10) -> float:
    """GFLOP/s of one core's float64 GEMM in this run: OpenBLAS on 1024 x 1024 by 1024 x 1024
    (its packing amortized), the median of ``rounds`` by CPU time: what a core reaches here."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(1)
    a, b = rng.random((1024, 1024)), rng.random((1024, 1024))
    times = []
    with threadpool_limits(limits=1, user_api="blas"):
        a @ b
        for _ in range(rounds):
            started = time.process_time()
            a @ b
            times.append(time.process_time() - started)
    return 2 * 1024**3 / float(np.median(times)) / 1e9


def _percentiles(ms: list[float]) -> dict[str, float]:
    p50, p90 = np.percentile(np.array(ms), [50, 90])
    return {"p50_ms": round(float(p50), 2), "p90_ms": round(float(p90), 2), "min_ms": round(min(ms), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--baseline", metavar="REV", help="also time the embedder of this git revision")
    parser.add_argument("--name", default="query_embedding", help="file stem under benchmarks/results")
    args = parser.parse_args(argv)
    model_dir = default_model_dir()
    assert model_dir is not None, "the embedding model is not installed"
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    texts = _queries(args.queries)
    model = MiniLMEmbedder()._model()
    started = time.perf_counter()
    assert compile_forward_passes() >= 1, "numba is not installed (the extra `fast`)"
    setup_s = time.perf_counter() - started
    embedders: dict[str, Any] = {"numpy": _Path(model, None), "compiled": _Path(model, model.compiled_path)}
    if args.baseline:
        embedders[f"baseline {args.baseline}"] = _baseline(args.baseline).MiniLMEmbedder()
    for embedder in embedders.values():
        embedder.embed(["load the weights and warm the caches"])
    caches = {name: QueryVectors(embedder, size=len(texts)) for name, embedder in embedders.items()}
    times: dict[str, list[float]] = {name: [] for name in embedders}
    cpu: dict[str, list[float]] = {name: [] for name in embedders}
    vectors: dict[str, list[bytes]] = {name: [] for name in embedders}
    load_before = os.getloadavg()
    for i, text in enumerate(texts):
        order = list(caches) if i % 2 == 0 else list(reversed(caches))
        for name in order:
            started, started_cpu = time.perf_counter(), time.process_time()
            vector, embedded = caches[name].vector(text)
            times[name].append((time.perf_counter() - started) * 1000.0)
            cpu[name].append((time.process_time() - started_cpu) * 1000.0)
            assert embedded, "every query is a cache miss"
            vectors[name].append(vector.tobytes())
    products = {name: _percentiles(ms) for name, ms in _products_alone(100).items()}
    gemm = _gemm_rate()
    load_after = os.getloadavg()
    tokens = PIECES + 2
    flops = forward_flops(tokens, config)
    rows = {}
    for name, ms in times.items():
        row: dict[str, Any] = _percentiles(ms)
        row["gflop_per_s_at_p50"] = round(flops["total"] / (row["p50_ms"] / 1000.0) / 1e9, 2)
        row["cpu"] = _percentiles(cpu[name])
        row["gflop_per_cpu_s_at_p50"] = round(flops["total"] / (row["cpu"]["p50_ms"] / 1000.0) / 1e9, 2)
        rows[name] = row
    same = {name: vectors[name] == vectors["numpy"] for name in embedders if name != "numpy"}
    out = {
        "queries": len(texts),
        "word_pieces": PIECES,
        "tokens": tokens,
        "cpus": os.cpu_count(),
        "load_average_1_5_15_before": [round(x, 1) for x in load_before],
        "load_average_1_5_15_after": [round(x, 1) for x in load_after],
        "forward_flops": flops,
        "model": {
            k: config[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
        },
        "embedders": rows,
        "same_bits_as_numpy": same,
        "layer_products_alone_cpu": products,
        "one_core_float64_gemm_gflop_per_s": round(gemm, 1),
        "compiled_setup_s": round(setup_s, 3),
        "target_ms": TARGET_MS,
        "compiled_p50_within_target": rows["compiled"]["p50_ms"] <= TARGET_MS,
    }
    (HERE / "results" / f"{args.name}.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        f"# Query embedding: {len(texts)} distinct queries of {PIECES} word pieces ({tokens} tokens), cold cache",
        "",
        f"Forward pass: {flops['total'] / 1e6:.1f} MFLOP of matrix products at {tokens} tokens "
        f"(QKV {flops['qkv'] / 1e6:.1f}, attention {flops['attention'] / 1e6:.2f}, attention output "
        f"{flops['attention_output'] / 1e6:.1f}, feed-forward {flops['feed_forward'] / 1e6:.1f}), "
        "computed as exact float64 sums.",
        "",
        "| embedder | wall p50 ms | wall p90 ms | wall min ms | GFLOP/s at wall p50 "
        "| CPU p50 ms | CPU p90 ms | GFLOP per CPU s at p50 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {n} | {r['p50_ms']} | {r['p90_ms']} | {r['min_ms']} | {r['gflop_per_s_at_p50']} "
            f"| {r['cpu']['p50_ms']} | {r['cpu']['p90_ms']} | {r['gflop_per_cpu_s_at_p50']} |"
            for n, r in rows.items()
        ),
    ]
    lines += [
        "",
        f"The 24 layer products alone at {tokens} tokens, one thread, 100 rounds alternating: OpenBLAS's "
        f"float64 GEMMs CPU p50 {products['openblas']['p50_ms']} ms (p90 {products['openblas']['p90_ms']}), the "
        f"compiled kernel CPU p50 {products['compiled']['p50_ms']} ms (p90 {products['compiled']['p90_ms']}): "
        f"{flops['total'] / products['compiled']['p50_ms'] / 1e6:.1f} GFLOP/s, against one core's float64 GEMM "
        f"in this run (1024 x 1024 x 1024 by OpenBLAS, CPU median) {gemm:.1f} GFLOP/s.",
        "",
        f"compiled / numpy wall p50: {rows['compiled']['p50_ms'] / rows['numpy']['p50_ms']:.2f}; same vector bits "
        f"for all {len(texts)} queries: {'yes' if same['compiled'] else 'NO'}; target compiled p50 <= {TARGET_MS} ms: "
        f"{'met' if rows['compiled']['p50_ms'] <= TARGET_MS else 'NOT met'}; the compiled path's set-up "
        f"(`compile_forward_passes`) took {setup_s:.2f} s.",
    ]
    base = next((n for n in rows if n.startswith("baseline")), None)
    if base is not None:
        lines += [
            "",
            f"numpy / {base} wall p50: {rows['numpy']['p50_ms'] / rows[base]['p50_ms']:.2f}; same vector bits for "
            f"all {len(texts)} queries: {'yes' if same[base] else 'NO'}",
        ]
    lines.append(
        f"\n{os.cpu_count()} CPUs, load average {' / '.join(f'{x:.1f}' for x in load_before)} before and "
        f"{' / '.join(f'{x:.1f}' for x in load_after)} after (1 / 5 / 15 min)"
    )
    (HERE / "results" / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
