"""Benchmark: does one ``--record-stats`` run bring the 1M-row hybrid to its measured optimum?

On the growth benchmark's 1M-row index (``benchmarks.growth_index``, synthetic vectors, real
text), the ``hybrid`` query of ``benchmarks.bench_growth`` (a ``broad_question``: a tantivy leg
and a LanceDB leg fused by RRF, the legs the planner chooses) can take its vector leg from
``lancedb.exact_matrix``, ``lancedb.ann_prefilter`` or ``lancedb.ann_postfilter``
(``lancedb.flat_prefilter`` is estimated at seconds and is not measured).

1. **Record.** After ``--warm`` warm-up queries through each alternative (not recorded: the
   first ANN searches of a process load the IVF partitions they probe), one run with
   ``record_stats`` (what ``race run --record-stats FILE`` does) of ``--record`` queries for
   each alternative (each its own texts), forced with ``allow_contracts``: every contract the
   planner weighs is observed.
2. **Plan.** The hybrid planned with the index's contracts alone (the priors) and planned with
   the recorded statistics (``Engine(..., statistics=load_learned(FILE))``): the alternative
   chosen and every alternative's estimate under both.
3. **Measure.** Fresh query texts (each row its own: LanceDB keeps the IVF partitions a query
   vector probed warm for the next leg with that vector), interleaved query by query: each forced alternative, the
   hybrid as planned on priors and as planned with the statistics; p50/p95 of ``Engine.run``
   (plan, scans, fusion, receipt), caches (and kept query vectors) emptied before every run.

The measured optimum is the fastest forced alternative; the table gives each estimate beside
what it measured. ``--priors hand`` plans on the hand-set priors the hybrid was planned on at
87.4 ms, ``--priors repo`` on the contracts' priors (``bench_cost_priors``). Results:
``benchmarks/out/growth_1m_learned_{hand,repo}.json`` and ``.md``.

    nice -n 10 .venv/bin/python -m benchmarks.bench_cost_learning [--queries N] [--record N]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from backends.lancedb.adapter import LanceAdapter
from benchmarks.bench_growth import CACHE, SEED, local_engine, plan_for
from benchmarks.growth_index import BLOCK, SyntheticEmbedder, TextPool, ensure_index, mixture, text_sources
from planner import Explain, scans
from race.engine import Engine
from race.state.cache import ResultCache
from race.state.learned import load_learned

OUT = Path(__file__).parent / "out"
ROWS = 1_000_000
VECTOR_LEGS = ("lancedb.exact_matrix", "lancedb.ann_prefilter", "lancedb.ann_postfilter")


HAND_PRIORS: dict[str, dict[str, float]] = {
    "tantivy.bm25": {"base_latency_ms": 0.6, "per_candidate_us": 0.4},
    "lancedb.exact_matrix": {"base_latency_ms": 1.0, "per_candidate_us": 0.35},
    "lancedb.ann_prefilter": {"base_latency_ms": 4.0, "per_candidate_us": 0.5},
    "lancedb.ann_postfilter": {"base_latency_ms": 4.0, "per_candidate_us": 0.5},
    "lancedb.flat_prefilter": {"base_latency_ms": 4.0, "per_candidate_us": 3.0},
}
"""The hand-set priors of the 1M index the hybrid was planned on at 87.4 ms (git 73c2ec1,
``results/growth_1m_old_prior.md``): tantivy.bm25 as that index was built (0.4 µs a row)."""


PRIOR_NAMES = {"hand": "hand-set (the 87.4 ms plan, git 73c2ec1)", "repo": "the contracts in the repository"}


def repo_priors() -> dict[str, dict[str, Any]]:
    """The cost blocks of ``backends/*/rsc/*.json`` (``bench_cost_priors --write`` measured them)."""
    root = Path(__file__).resolve().parent.parent / "backends"
    return {p.stem: json.loads(p.read_text())["cost"] for p in sorted(root.glob("*/rsc/*.json"))}


@contextmanager
def priors_in(folder: Path, costs: dict[str, dict[str, Any]]) -> Iterator[None]:
    """The index's contract files with these cost blocks while engines open (they read their
    contracts then), restored on exit."""
    saved = {}
    for path in sorted(folder.glob("*/contracts/*.json")):
        if path.stem in costs:
            saved[path] = path.read_bytes()
            doc = json.loads(saved[path])
            doc["cost"] = costs[path.stem]
            path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    try:
        yield
    finally:
        for path, data in saved.items():
            path.write_bytes(data)


def forced(leg: str, text: str) -> dict[str, Any]:
    plan = plan_for("hybrid", text)
    plan["obligations"][0]["allow_contracts"] = ["tantivy.bm25", leg]
    return plan


def hybrid_costs(explain: Explain) -> dict[str, float]:
    """Each HybridRrf alternative's estimate, by its vector leg."""
    out = {}
    for group in explain.groups:
        for alt in group.alternatives:
            if alt.rule == "HybridRrf" and alt.rsc:
                out[alt.rsc.split(" + ")[-1].split("@")[0]] = alt.cost
    return out


def vector_leg(explain: Explain) -> str:
    return next(s.rsc.split("@")[0] for s in scans(explain.physical) if s.rsc.startswith("lancedb."))


async def run_once(engine: Engine, plan: dict[str, Any]) -> float:
    """One run with every cache emptied, the query vectors too: each run makes its model call,
    as each alternative's estimate assumes."""
    engine.result_cache = ResultCache()
    engine.clear_receipt_cache()
    lance = engine.adapters["lancedb"]
    if isinstance(lance, LanceAdapter):
        lance.forget_query_vectors()
    started = time.perf_counter()
    receipt = await engine.run(plan)
    seconds = time.perf_counter() - started
    if receipt.operational.receipt_cache == "hit" or receipt.operational.result_cache.get("hits"):
        raise SystemExit("a cache answered a query meant to be measured")
    return seconds * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_cost_learning", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--queries", type=int, default=40, help="measured queries per row (after 3 warm-up)")
    parser.add_argument("--record", type=int, default=10, help="queries per alternative in the recording run")
    parser.add_argument("--warm", type=int, default=10, help="warm-up queries per alternative before recording")
    parser.add_argument("--priors", choices=("hand", "repo"), default="hand", help="the priors planned on before")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    pool = TextPool(text_sources())
    folder = CACHE / f"idx-{ROWS}"
    ensure_index(folder, range(ROWS // BLOCK), SEED, pool, print)
    embedder = SyntheticEmbedder(mixture(SEED), SEED)
    with priors_in(folder, HAND_PRIORS if args.priors == "hand" else repo_priors()):
        priors = local_engine(folder, embedder)
    # The recording engine shares the adapters (and LanceDB's caches) of the measured one.
    recorder = Engine(priors.adapters)
    stats_file = Path(tempfile.mkdtemp(prefix="race-learn-")) / "stats.jsonl"
    recorder.record_stats = stats_file
    # Every alternative its own query texts: LanceDB keeps the IVF partitions one query vector
    # probed, so a second ANN leg with the same vector reads them warm (measured: 20 ms against
    # 200 ms for the first), which the same text through every alternative would hide.
    record_texts = {leg: pool.queries(args.record, SEED + 101 + i) for i, leg in enumerate(VECTOR_LEGS)}

    warm_texts = {leg: pool.queries(args.warm, SEED + 151 + i) for i, leg in enumerate(VECTOR_LEGS)}

    async def record() -> None:
        # Warm-up, not recorded: LanceDB loads the IVF partitions it probes as queries come, and
        # the first ANN searches of a process take 200-1000 ms where later ones take 40-100 ms.
        for n in range(args.warm):
            for leg in VECTOR_LEGS:
                await run_once(priors, forced(leg, warm_texts[leg][n]))
        for n in range(args.record):
            for leg in VECTOR_LEGS[n % len(VECTOR_LEGS) :] + VECTOR_LEGS[: n % len(VECTOR_LEGS)]:
                await run_once(recorder, forced(leg, record_texts[leg][n]))

    anyio.run(record)
    learned_stats = load_learned(stats_file)
    learned = Engine(priors.adapters, statistics=learned_stats)
    probe = pool.queries(1, SEED + 202)[0]
    explain_priors = priors.plan_sync(plan_for("hybrid", probe))
    explain_learned = learned.plan_sync(plan_for("hybrid", probe))
    rows: dict[str, tuple[Engine, Any]] = {f"forced {leg}": (priors, leg) for leg in VECTOR_LEGS}
    rows["planned, priors"] = (priors, None)
    rows["planned, after one --record-stats run"] = (learned, None)
    times: dict[str, list[float]] = {name: [] for name in rows}
    texts = {name: pool.queries(args.queries + 3, SEED + 303 + i) for i, name in enumerate(rows)}

    async def measure() -> None:
        names = list(rows)
        for n in range(args.queries + 3):
            for name in names[n % len(names) :] + names[: n % len(names)]:
                engine, leg = rows[name]
                text = texts[name][n]
                ms = await run_once(engine, forced(leg, text) if leg else plan_for("hybrid", text))
                if n >= 3:
                    times[name].append(ms)

    anyio.run(measure)
    load_after = os.getloadavg()
    p50 = {name: round(float(np.percentile(v, 50)), 2) for name, v in times.items()}
    p95 = {name: round(float(np.percentile(v, 95)), 2) for name, v in times.items()}
    optimum = min(VECTOR_LEGS, key=lambda leg: p50[f"forced {leg}"])
    report = {
        "schema_version": "race.bench/1",
        "benchmark": "cost_learning",
        "priors": args.priors,
        "rows": ROWS,
        "queries": args.queries,
        "record_queries_per_alternative": args.record,
        "warm_queries_per_alternative": args.warm,
        "observations": len(learned_stats.observations),
        "statistics_digest": learned_stats.digest,
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in load_after],
        "estimates_priors": hybrid_costs(explain_priors),
        "estimates_learned": hybrid_costs(explain_learned),
        "chosen_priors": vector_leg(explain_priors),
        "chosen_learned": vector_leg(explain_learned),
        "p50_ms": p50,
        "p95_ms": p95,
        "measured_optimum": optimum,
        "learned": [s.model_dump(mode="json") for s in learned_stats.summary()],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"growth_1m_learned_{args.priors}"
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    text = render(report)
    (args.out / f"{name}.md").write_text(text)
    print(text)
    return 0


def render(r: dict[str, Any]) -> str:
    lines = [
        "# The 1M-row hybrid: planned on priors, then after one --record-stats run",
        "",
        f"Priors: {PRIOR_NAMES[r['priors']]}.",
        "",
        f"{r['rows']:,} rows (growth index: real text, synthetic vectors), k=10, `Engine.run` p50/p95 over "
        f"{r['queries']} fresh queries per row (each row its own texts), interleaved, caches emptied; after "
        f"{r['warm_queries_per_alternative']} warm-up queries per alternative, a recording run: "
        f"{r['record_queries_per_alternative']} queries x {len(VECTOR_LEGS)} forced alternatives "
        f"({r['observations']} observations). Load average before/after: "
        f"{' '.join(map(str, r['load_before']))} / {' '.join(map(str, r['load_after']))}.",
        "",
        "| vector leg of the hybrid | est. ms, priors | est. ms, learned | p50 ms | p95 ms | chosen |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for leg in VECTOR_LEGS:
        chosen = [label for label, key in (("priors", "chosen_priors"), ("learned", "chosen_learned")) if r[key] == leg]
        optimum = " (measured optimum)" if leg == r["measured_optimum"] else ""
        lines.append(
            f"| {leg}{optimum} | {r['estimates_priors'].get(leg, float('nan')):.1f} | "
            f"{r['estimates_learned'].get(leg, float('nan')):.1f} | {r['p50_ms'][f'forced {leg}']:.1f} | "
            f"{r['p95_ms'][f'forced {leg}']:.1f} | {', '.join(chosen) or '-'} |"
        )
    for name in ("planned, priors", "planned, after one --record-stats run"):
        lines.append(f"| {name} | | | {r['p50_ms'][name]:.1f} | {r['p95_ms'][name]:.1f} | |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
