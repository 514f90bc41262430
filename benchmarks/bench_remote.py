"""Remote legs (``remote.bm25`` and ``remote.exact`` over HTTP to ``race serve``) against the
same legs run locally (``tantivy.bm25``, ``tantivy.exact``), through ``Engine.run``, on
indexes of several sizes.

For each index a ``race serve --index DIR`` process is started on 127.0.0.1; one engine holds
the local tantivy adapter, the other the remote adapter connected to that server. The same
fresh query texts (BM25: three words of a paragraph on this machine,
``benchmarks.growth_index``; exact: a chunk id of the index, drawn at random) run on both,
interleaved query by query, with every cache of the client engines emptied
before each run (the server answers scans; it keeps no result cache). The figures this gives
the contracts' cost priors: a remote leg's fixed cost over the local one (its p50 less the
local leg's, at each size) and its growth per row (the slope of its p50 over the sizes).

Indexes: ``--index DIR`` (repeatable), by default those ``bench_growth`` keeps in
``/tmp/race-bench-growth`` (10k, 100k and 1M chunks), which must be built first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backends.remote import RemoteAdapter
from backends.tantivy import TantivyAdapter
from benchmarks.growth_index import TextPool, text_sources
from race.engine import Engine
from race.state.cache import ResultCache
from rsc import canonical_pretty

OUT = Path(__file__).parent / "out"
GROWTH = Path("/tmp/race-bench-growth")
DEFAULT_INDEXES = ("idx-10000", "idx-100000", "idx-1000000")
K = 10
WARMUP = 5
SEED = 29


KINDS = {"bm25": "lexical", "exact": "identifier"}


def _plan(kind: str, text: str, remote: bool) -> dict[str, Any]:
    query = {"ids": [text]} if kind == "exact" else {"text": text}
    ob: dict[str, Any] = {"id": "o", "kind": "seek_support", "query": query, "query_class": KINDS[kind]}
    ob["k"] = K
    if remote:
        ob.update(egress="remote_ok", allow_contracts=[f"remote.{kind}"])
    else:
        ob["allow_contracts"] = [f"tantivy.{kind}"]
    return {"schema_version": "race.plan/1", "root": "o", "obligations": [ob]}


def _chunk_ids(index: Path, n: int) -> list[str]:
    import lancedb

    table = lancedb.connect(str(index / "lancedb")).open_table("chunks")
    ids = table.search().select(["chunk_id"]).limit(None).to_arrow().column("chunk_id").to_pylist()
    rng = np.random.default_rng(SEED)
    return [str(ids[int(i)]) for i in rng.integers(len(ids), size=n)]


_RACE = (sys.executable, "-c", "from race.cli.main import main; raise SystemExit(main())")


def _serve(index: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [*_RACE, "serve", "--index", str(index), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("http://127.0.0.1:"):
        process.kill()
        raise SystemExit(f"race serve did not start on {index}: {line!r}")
    return process, line


def _rows(index: Path) -> int:
    return int(json.loads((index / "tantivy" / "race.json").read_text(encoding="utf-8"))["rows"])


async def _measure(index: Path, texts: dict[str, list[str]]) -> list[dict[str, Any]]:
    process, url = _serve(index)
    try:
        local = Engine({"tantivy": TantivyAdapter.open(index)})
        remote = Engine({"remote": RemoteAdapter.connect(url, timeout=30.0)})
        pairs = [(kind, name) for kind in KINDS for name in ("local", "remote")]
        seconds: dict[tuple[str, str], list[float]] = {p: [] for p in pairs}
        same = dict.fromkeys(KINDS, 0)
        for n in range(len(texts["bm25"])):
            keys: dict[tuple[str, str], list[str]] = {}
            for j in range(len(pairs)):
                kind, name = pairs[(n + j) % len(pairs)]
                engine = remote if name == "remote" else local
                plan = engine.parse(_plan(kind, texts[kind][n], name == "remote"))
                engine.result_cache = ResultCache()
                engine.clear_receipt_cache()
                started = time.perf_counter()
                receipt = await engine.run(plan)
                elapsed = time.perf_counter() - started
                if receipt.gaps or not receipt.evidence:
                    found = [g.kind.value for g in receipt.gaps]
                    raise SystemExit(f"{index} {kind} {name}: gaps {found}, {len(receipt.evidence)} hits")
                keys[(kind, name)] = [e.key for e in receipt.evidence]
                if n >= WARMUP:
                    seconds[(kind, name)].append(elapsed)
            for kind in KINDS:
                same[kind] += int(keys[(kind, "local")] == keys[(kind, "remote")])
        await remote.aclose()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)

    def pct(kind: str, name: str, q: float) -> float:
        return round(float(np.percentile(np.asarray(seconds[(kind, name)]) * 1e3, q)), 3)

    return [
        {
            "index": str(index),
            "kind": kind,
            "rows": _rows(index),
            "queries": len(seconds[(kind, "local")]),
            "local_p50_ms": pct(kind, "local", 50),
            "local_p95_ms": pct(kind, "local", 95),
            "remote_p50_ms": pct(kind, "remote", 50),
            "remote_p95_ms": pct(kind, "remote", 95),
            "remote_extra_p50_ms": round(pct(kind, "remote", 50) - pct(kind, "local", 50), 3),
            "same_top_k": same[kind],
        }
        for kind in KINDS
    ]


def run(indexes: Sequence[Path], queries: int) -> dict[str, Any]:
    pool = TextPool(text_sources())
    words = pool.queries(queries + WARMUP, SEED)
    sizes = [
        row
        for index in indexes
        for row in asyncio.run(_measure(index, {"bm25": words, "exact": _chunk_ids(index, queries + WARMUP)}))
    ]
    fit: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        mine = [s for s in sizes if s["kind"] == kind]
        if len(mine) >= 2:
            rows = np.asarray([s["rows"] for s in mine], dtype=np.float64)
            slope, intercept = np.polyfit(rows, np.asarray([s["remote_p50_ms"] for s in mine]), 1)
            extra = [s["remote_extra_p50_ms"] for s in mine]
            fit[kind] = {
                "remote_base_ms": round(float(intercept), 3),
                "remote_per_row_us": round(float(slope) * 1e3, 6),
                "remote_extra_min_ms": min(extra),
                "remote_extra_max_ms": max(extra),
            }
    return {
        "benchmark": "remote",
        "params": {"k": K, "queries": queries, "warmup": WARMUP, "text_digest": pool.digest},
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "sizes": sizes,
        "fit": fit,
    }


def render_markdown(report: dict[str, Any]) -> str:
    p = report["params"]
    lines = [
        "# Remote legs (HTTP to `race serve`) against the same legs run locally",
        "",
        f"Through `Engine.run`, k={p['k']}, {p['queries']} fresh queries per index and leg (after {p['warmup']} "
        "warm-up), every leg interleaved query by query, client caches emptied before each run.",
        "",
        "| leg | rows | local p50 / p95 ms | remote p50 / p95 ms | remote - local p50 ms | same answer |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in report["sizes"]:
        lines.append(
            f"| {s['kind']} | {s['rows']} | {s['local_p50_ms']:.3f} / {s['local_p95_ms']:.3f} | "
            f"{s['remote_p50_ms']:.3f} / {s['remote_p95_ms']:.3f} | {s['remote_extra_p50_ms']:.3f} | "
            f"{s['same_top_k']} of {s['queries'] + p['warmup']} |"
        )
    for kind, f in report["fit"].items():
        fitted = f"{f['remote_base_ms']} ms + {f['remote_per_row_us']} µs a row"
        lines += ["", f"{kind}: least-squares fit of the remote p50 over the sizes, {fitted}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_remote", description=__doc__.split("\n")[0])
    parser.add_argument("--index", type=Path, action="append", help="a `race index` folder (repeatable)")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    indexes = args.index or [GROWTH / name for name in DEFAULT_INDEXES]
    missing = [str(i) for i in indexes if not (i / "tantivy" / "race.json").is_file()]
    if missing:
        parser.error(f"no tantivy index in {', '.join(missing)} (build them with `python -m benchmarks.bench_growth`)")
    if args.queries < 1:
        parser.error("--queries must be >= 1")
    report = run(indexes, args.queries)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "remote.json").write_text(canonical_pretty(report) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (args.out / "remote.md").write_text(markdown, encoding="utf-8")
    sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
