"""A vector obligation run with the caller's query vector beside the same obligation embedding
its text, on the bundled index: distinct texts (every text embedding is a cold query-cache
miss), the two forms timed plan by plan in alternating order so that a shared machine's load
weighs on both alike. Each pair's evidence (keys and distances) is checked to be the same, and
the receipts' ``model_calls`` 1 and 0. Vectors are computed before the clock, as a caller would
have them; the query keeps its text beside the vector (the bundled index may predate contracts
that read a vector alone). Writes benchmarks/results/caller_vectors.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from backends.models.embedding import MiniLMEmbedder
from race.engine import Engine
from race.indexing.bundled import BUNDLED_CORPUS

HERE = Path(__file__).parent


def _texts(count: int) -> list[str]:
    """Distinct six-word windows of the bundled corpus's prose."""
    words = [w for path in sorted(BUNDLED_CORPUS.rglob("*.md")) for w in path.read_text(encoding="utf-8").split()]
    words = [w for w in words if w.isascii() and w.isalpha()]
    out = list(dict.fromkeys(" ".join(words[i : i + 6]) for i in range(0, len(words) - 6, 5)))
    if len(out) < count:
        raise SystemExit(f"only {len(out)} distinct windows")
    return out[:count]


def _plan(query: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": "race.plan/1",
        "root": "v",
        "obligations": [
            {"id": "v", "kind": "seek_support", "query": query, "query_class": "conceptual", "k": 10,
             "mandatory": False, "allow_contracts": ["lancedb.exact_matrix"]},
        ],
    }  # fmt: skip


def _answer(receipt: Any) -> list[tuple[str, float | None]]:
    return [(e.key, e.hits[0].custody.score) for e in sorted(receipt.evidence, key=lambda e: e.rank)]


def _percentiles(ms: list[float]) -> dict[str, float]:
    p50, p90 = np.percentile(np.array(ms), [50, 90])
    return {"p50_ms": round(float(p50), 2), "p90_ms": round(float(p90), 2), "min_ms": round(min(ms), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=100)
    args = parser.parse_args(argv)
    engine = Engine.bundled()
    model = MiniLMEmbedder()
    identity = model.identity.model_dump(mode="json")
    texts = _texts(args.plans)
    vectors = model.embed(texts)
    # Set-up (weights, exact matrix) before any clock; then one plan of each form outside the timings.
    engine.run_sync(_plan({"text": "warm the engine"}))
    engine.run_sync(_plan({"text": "warm", "vector": [float(v) for v in vectors[0]], "embedder": identity}))
    times: dict[str, list[float]] = {"text (embedded)": [], "caller vector": []}
    load_before = os.getloadavg()
    for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        plans = {
            "text (embedded)": _plan({"text": text}),
            "caller vector": _plan({"text": text, "vector": [float(v) for v in vector], "embedder": identity}),
        }
        answers = {}
        for name in list(plans) if i % 2 == 0 else list(reversed(plans)):
            started = time.perf_counter()
            receipt = engine.run_sync(plans[name])
            times[name].append((time.perf_counter() - started) * 1000.0)
            answers[name] = (receipt.obligations[0].model_calls, _answer(receipt))
        assert answers["text (embedded)"][0] == 1 and answers["caller vector"][0] == 0
        assert answers["text (embedded)"][1] == answers["caller vector"][1], text
    load_after = os.getloadavg()
    rows = {name: _percentiles(ms) for name, ms in times.items()}
    ratio = rows["caller vector"]["p50_ms"] / rows["text (embedded)"]["p50_ms"]
    out = {
        "plans": len(texts),
        "cpus": os.cpu_count(),
        "load_average_1_5_15_before": [round(x, 1) for x in load_before],
        "load_average_1_5_15_after": [round(x, 1) for x in load_after],
        "engine_run": rows,
        "caller_over_text_p50": round(ratio, 3),
        "same_evidence_every_pair": True,
    }
    (HERE / "results" / "caller_vectors.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        f"# A vector obligation with the caller's vector beside the same one embedding its text ({len(texts)} "
        "distinct texts, bundled index, `lancedb.exact_matrix`, k = 10)",
        "",
        "| query | engine.run p50 ms | p90 ms | min ms |",
        "|---|---:|---:|---:|",
        *(f"| {n} | {r['p50_ms']} | {r['p90_ms']} | {r['min_ms']} |" for n, r in rows.items()),
        "",
        f"caller vector / text p50: {ratio:.2f} (timed plan by plan in alternating order); the same evidence "
        "keys and distances in every pair; model_calls 1 and 0.",
        f"\n{os.cpu_count()} CPUs, load average {' / '.join(f'{x:.1f}' for x in load_before)} before and "
        f"{' / '.join(f'{x:.1f}' for x in load_after)} after (1 / 5 / 15 min)",
    ]
    (HERE / "results" / "caller_vectors.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
