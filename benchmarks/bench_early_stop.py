"""Benchmark: a top-k score-sum union with Fagin's threshold algorithm vs full evaluation (I9).

A LanceDB index in the adapter's own schema (``LanceAdapter.build``) over synthetic chunks:
384-d vectors drawn from the clustered mixture of ``bench_filtered_vectors``, with a
``doc_type`` column that selects 10 % of the rows. The embedder is a stand-in that maps each
chunk's text to its stored vector and each query text to a draw from the same mixture
(seeded by the text), so no model runs and both sides pay the same. Each plan is a ``union``
with ``k`` over two or three ``lancedb.flat_prefilter`` obligations (the last one filtered);
its explain marks early stop admissible. Two kinds of input:

* *related phrasings* — several phrasings of one need, the case a top-k union serves: each
  input's vector is one intent plus independent noise of norm 0.5 (cosine ~0.8 between
  phrasings, as paraphrases have under MiniLM);
* *unrelated facets* — independent draws, a hard case for the threshold: the best rows of
  the sum are mediocre on every input, so sorted access must read deep.

Both engines answer the same plans, interleaved, each run on a fresh engine (no plan,
receipt or result cache): ``early`` stops when the threshold proves the top k, ``full``
(``Engine(early_stop=False)``) reads every input to the end. The benchmark checks that both
return the same top k (keys, scores, per-input similarities) for every plan, and reports
p50 wall, the ratio, and the depth the threshold algorithm read. Results go to
``benchmarks/out/early_stop.json`` and ``.md``.

    python -m benchmarks.bench_early_stop [--rows N] [--plans P] [--runs R] [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from backends.ingest.corpus import Chunk, Corpus
from backends.lancedb.adapter import LanceAdapter
from backends.models.embedding import EmbedderIdentity
from benchmarks.bench_filtered_vectors import Mixture
from race.engine import Engine
from race.receipt import Receipt

OUT = Path(__file__).parent / "out"
DIMS = 384
K = 10
SHAPES = (
    ("related phrasings, 2 inputs", 2, True),
    ("related phrasings, 3 inputs", 3, True),
    ("unrelated facets, 2 inputs", 2, False),
)
F32 = npt.NDArray[np.float32]


PHRASING_NOISE = 0.5


def _seed(text: str) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


class MixtureEmbedder:
    """Chunk text ``row-<i>`` embeds to stored vector i; ``intent N phrasing J`` to intent N plus
    phrasing noise; any other text to a seeded mixture draw."""

    def __init__(self, vectors: F32, mixture: Mixture) -> None:
        self._vectors = vectors
        self._mixture = mixture
        self.identity = EmbedderIdentity(
            name="bench-mixture", dims=DIMS, weights_sha256="sha256:" + hashlib.sha256(vectors.tobytes()).hexdigest()
        )

    def embed(self, texts: Sequence[str]) -> F32:
        out = np.empty((len(texts), DIMS), dtype=np.float32)
        for i, text in enumerate(texts):
            body = text.rsplit("\n", 1)[-1]
            if body.startswith("row-"):
                out[i] = self._vectors[int(body[4:])]
            elif body.startswith("intent "):
                intent = self._mixture.sample(1, _seed(body.split(" phrasing ")[0]))[0].astype(np.float64)
                noise = _seed(body).standard_normal(DIMS)
                vector = intent + PHRASING_NOISE * noise / np.linalg.norm(noise)
                out[i] = (vector / np.linalg.norm(vector)).astype(np.float32)
            else:
                out[i] = self._mixture.sample(1, _seed(body))[0]
        return out


def build(folder: Path, rows: int, seed: int) -> LanceAdapter:
    rng = np.random.default_rng(seed)
    mixture = Mixture.make(rows, rng)
    vectors = mixture.sample(rows, rng)
    kinds = np.where(rng.random(rows) < 0.10, "report", "note")
    chunks = tuple(
        Chunk(
            chunk_id=f"c{i}",
            doc_id=f"d{i}",
            title="",
            section="",
            text=f"row-{i}",
            source_path=f"synthetic/{i}.md",
            line_start=1,
            line_end=1,
            char_start=0,
            char_end=8,
            source_hash="sha256:" + "0" * 64,
            metadata={"doc_type": str(kinds[i])},
        )
        for i in range(rows)
    )
    embedder = MixtureEmbedder(vectors, mixture)
    LanceAdapter.build(Corpus(root="synthetic", revision="bench", chunks=chunks, edges=()), folder, embedder=embedder)
    return LanceAdapter.open(folder, embedder=embedder)


def plan(n: int, inputs: int, *, related: bool = True) -> dict[str, Any]:
    obligations = []
    for leg in range(inputs):
        ob: dict[str, Any] = {
            "id": f"q{leg}",
            "kind": "seek_support",
            "query": {"text": f"intent {n} phrasing {leg}" if related else f"query {n} facet {leg}"},
            "query_class": "conceptual",
            "k": K,
            "allow_contracts": ["lancedb.flat_prefilter"],
        }
        if leg == inputs - 1:
            ob["hard_filters"] = [{"field": "doc_type", "value": "report"}]
        obligations.append(ob)
    return {
        "schema_version": "race.plan/1",
        "root": "u",
        "obligations": obligations,
        "operators": [{"id": "u", "op": "union", "inputs": [o["id"] for o in obligations], "k": K}],
        "budget": {"deadline_ms": 600_000, "leg_timeout_ms": 600_000},
    }


def _top(receipt: Receipt) -> list[tuple[str, Any, dict[str, Any]]]:
    return [(i.key, i.fusion.score, dict(i.fusion.similarities)) for i in receipt.evidence]


def run(rows: int, plans: int, runs: int, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        adapter = build(Path(tmp), rows, seed)
        build_s = time.perf_counter() - started
        adapters = {"lancedb": adapter}
        results: dict[str, Any] = {}
        for name, inputs, related in SHAPES:
            walls: dict[str, list[float]] = {"early": [], "full": []}
            depths: list[int] = []
            random_reads: list[int] = []
            for n in range(plans):
                logical = plan(n, inputs, related=related)
                answers: dict[str, Receipt] = {}
                for _ in range(runs):
                    for mode in ("early", "full"):
                        engine = Engine(adapters, early_stop=mode == "early")
                        t0 = time.perf_counter()
                        answers[mode] = engine.run_sync(logical)
                        walls[mode].append((time.perf_counter() - t0) * 1000.0)
                if _top(answers["early"]) != _top(answers["full"]):
                    raise SystemExit(f"plan {n} ({inputs} inputs): early stop changed the top {K}")
                note = answers["early"].operators[0].early_stop
                if note.startswith("threshold algorithm stopped at depth"):
                    depths.append(int(note.split("depth ")[1].split(" ")[0]))
                    random_reads.append(int(note.rsplit("; ", 1)[1].split(" ")[0]))
                else:
                    depths.append(rows)
                    random_reads.append(0)
            early, full = statistics.median(walls["early"]), statistics.median(walls["full"])
            results[name] = {
                "inputs": inputs,
                "early_p50_ms": round(early, 3),
                "full_p50_ms": round(full, 3),
                "speedup": round(full / early, 2),
                "depth_median": statistics.median(depths),
                "depth_max": max(depths),
                "random_accesses_median": statistics.median(random_reads),
                "identical_top_k": True,
            }
    return {
        "benchmark": "early_stop",
        "machine": f"{platform.machine()} CPython {platform.python_version()}",
        "rows": rows,
        "plans": plans,
        "runs_per_plan": runs,
        "k": K,
        "build_s": round(build_s, 1),
        "results": results,
        "target": "early stop p50 <= full evaluation p50, identical top k",
        "pass": all(r["early_p50_ms"] <= r["full_p50_ms"] for r in results.values()),
    }


def render_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Early stop (threshold algorithm) vs full evaluation",
        "",
        f"{report['machine']}; {report['rows']} rows x {DIMS}-d, {report['plans']} plans x "
        f"{report['runs_per_plan']} interleaved runs, union k={report['k']}, one input filtered to ~10 %.",
        "",
        "| plans | early p50 ms | full p50 ms | full / early | TA depth median (max) | random accesses | same top k |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in report["results"].items():
        lines.append(
            f"| {name} | {r['early_p50_ms']} | {r['full_p50_ms']} | {r['speedup']}x | "
            f"{r['depth_median']} ({r['depth_max']}) | {r['random_accesses_median']} | "
            f"{'yes' if r['identical_top_k'] else 'NO'} |"
        )
    lines += ["", f"Target: {report['target']}: {'met' if report['pass'] else 'NOT met'}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--plans", type=int, default=6)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--quick", action="store_true", help="20k rows, 3 plans, 1 run")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.plans, args.runs = 20_000, 3, 1
    report = run(args.rows, args.plans, args.runs, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "early_stop.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    (args.out / "early_stop.md").write_text(render_markdown(report))
    print(render_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
