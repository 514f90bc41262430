"""I9 over many score tables: the threshold algorithm returns exactly the top k of full
evaluation, ties included: the stop rule checked at every depth, and the executor end to end.

A small in-memory backend serves an exact contract with sorted and random access over a
table of cosine distances drawn per seed. Distances take only a few levels, so equal
scores, equal sums and equal thresholds are common: the cases where a stop rule that is off
by one comparison would return a different top k.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends import Adapter
from backends.base import custody_hits
from backends.lancedb import LanceAdapter
from race.engine import Engine
from race.run.fusion import LegScores, certified, resolved, score_sum, to_resolve
from rsc import BackendStatistics, Contract, FilterOp, ScanRequest, ScanResult, ScoreKind


def _contract() -> Contract:
    flat = next(c for c in LanceAdapter.contracts() if c.rsc_id == "lancedb.flat_prefilter")
    return flat.model_copy(update={"rsc_id": "table.flat", "backend": "table"})


class TableAdapter(Adapter):
    """Exact cosine top-k over a fixed table: ``distances[query][row]``."""

    backend = "table"

    def __init__(self, distances: dict[str, list[float]], kinds: list[str]) -> None:
        self.distances = distances
        self.kinds = kinds

    def contracts(self) -> tuple[Contract, ...]:  # type: ignore[override]
        return (_contract(),)

    @classmethod
    def build(cls, corpus: Any, index_dir: Path, progress: Any = None) -> str:
        raise NotImplementedError

    @classmethod
    def open(cls, index_dir: Path) -> TableAdapter:
        raise NotImplementedError

    @property
    def identity(self) -> str:
        return "table"

    def generation(self) -> str:
        return "table:1"

    def statistics(self) -> BackendStatistics:
        return BackendStatistics(backend="table", rows=len(self.kinds))

    async def scan(self, request: ScanRequest) -> ScanResult:
        scores = self.distances[request.query.text or ""]
        rows = []
        for i, distance in enumerate(scores):
            chunk = {
                "chunk_id": f"r{i:03d}",
                "doc_id": f"d{i:03d}",
                "source_path": f"t/{i}.md",
                "line_start": 1,
                "line_end": 1,
                "source_hash": "sha256:" + "0" * 64,
                "metadata": {"doc_type": self.kinds[i]},
            }
            if all(_admits(f, chunk) for f in request.pushed):
                rows.append((chunk, distance))
        rows.sort(key=lambda r: (r[1], r[0]["chunk_id"]))
        hits = custody_hits(
            request=request,
            contract_ref=f"{request.rsc_id}@{request.rsc_version}",
            rows=rows[: request.k],
            score_kind=ScoreKind.COSINE_DISTANCE,
            index_identity="table",
            generation="table:1",
            corpus_revision="r",
        )
        return ScanResult(hits=tuple(hits), model_calls=1, generation="table:1", total_matches=len(rows))


def _admits(flt: Any, chunk: dict[str, Any]) -> bool:
    value = chunk["chunk_id"] if flt.field == "chunk_id" else chunk["metadata"].get(flt.field)
    return value == flt.value if flt.op is FilterOp.EQ else value in flt.values


def _case(seed: int) -> tuple[TableAdapter, dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(50, 800))
    inputs = int(rng.integers(2, 5))
    steps = int(rng.integers(4, 40))  # distinct distance levels: few levels, many exact ties
    base = rng.random(rows)
    distances = {}
    for i in range(inputs):
        # Inputs agree more or less with each other, from unrelated to near copies.
        mixed = rng.uniform(0.0, 1.0) * base + rng.uniform(0.2, 1.0) * rng.random(rows)
        levels = np.floor(mixed / mixed.max() * (steps - 1))
        distances[f"q{i}"] = [float(v) * 2.0 / (steps - 1) for v in levels]
    kinds = [str(k) for k in rng.choice(["a", "b", "c"], size=rows)]
    obligations = []
    for i in range(inputs):
        ob: dict[str, Any] = {
            "id": f"q{i}",
            "kind": "seek_support",
            "query": {"text": f"q{i}"},
            "query_class": "conceptual",
            "k": int(rng.integers(1, 4)),
            "allow_contracts": ["table.flat"],
        }
        if rng.random() < 0.4:
            ob["hard_filters"] = [{"field": "doc_type", "value": str(rng.choice(["a", "b"]))}]
        obligations.append(ob)
    plan = {
        "schema_version": "race.plan/1",
        "root": "u",
        "obligations": obligations,
        "operators": [
            {"id": "u", "op": "union", "inputs": [o["id"] for o in obligations], "k": int(rng.integers(1, 12))}
        ],
    }
    return TableAdapter(distances, kinds), plan


@pytest.mark.parametrize("seed", range(40))
def test_threshold_algorithm_equals_full_evaluation(seed: int) -> None:
    adapter, plan = _case(seed)
    early = Engine({"table": adapter}).run_sync(plan)
    full = Engine({"table": adapter}, early_stop=False).run_sync(plan)
    assert early.operators[0].early_stop.startswith(("threshold algorithm", "full evaluation: every input"))
    assert "switched off" in full.operators[0].early_stop

    def top(receipt: Any) -> list[tuple[str, Any, dict[str, Any]]]:
        return [(i.key, i.fusion.score, dict(i.fusion.similarities)) for i in receipt.evidence]

    assert top(early) == top(full)
    assert [o.model_dump() for o in early.obligations] == [o.model_dump() for o in full.obligations]


def _brute_force(table: list[dict[str, float | None]], top_k: int) -> list[tuple[str, float]]:
    """Full evaluation: every row any input holds, summed over every input (floor where it lacks it)."""
    legs = [LegScores(label=str(i), score_kind=ScoreKind.COSINE_DISTANCE, scores=dict(t)) for i, t in enumerate(table)]
    held = [key for key in table[0] if any(t[key] is not None for t in table)]
    order, totals = score_sum(legs, held)
    return [(key, totals[key]) for key in order[:top_k]]


@pytest.mark.parametrize("seed", range(60))
def test_a_certified_top_k_is_final_at_every_depth(seed: int) -> None:
    """The stop rule itself, at every depth rather than at the executor's batched depths: once
    ``certified`` holds after the random accesses ``to_resolve`` asks for, the top k among the
    exactly scored candidates is the top k of full evaluation. Few distance levels make ties."""
    rng = np.random.default_rng(1000 + seed)
    rows, inputs, steps = int(rng.integers(5, 60)), int(rng.integers(2, 5)), int(rng.integers(2, 9))
    top_k = int(rng.integers(1, 8))
    keys = [f"r{i:02d}" for i in range(rows)]
    table: list[dict[str, float | None]] = []
    for _ in range(inputs):
        eligible = rng.random(rows) < rng.uniform(0.3, 1.0)
        levels = rng.integers(0, steps, size=rows) * (2.0 / max(steps - 1, 1))
        table.append({k: (float(d) if ok else None) for k, d, ok in zip(keys, levels, eligible, strict=True)})
    expected = _brute_force(table, top_k)
    stopped = 0
    for depth in range(1, rows + 1):
        legs = []
        for i, column in enumerate(table):
            ranked = sorted((d, k) for k, d in column.items() if d is not None)[:depth]
            leg = LegScores(label=str(i), score_kind=ScoreKind.COSINE_DISTANCE)
            leg.scores = {k: d for d, k in ranked}
            leg.last = ranked[-1][0] if ranked else None
            leg.exhausted = len(ranked) < depth
            legs.append(leg)
        seen = sorted({k for leg in legs for k, d in leg.scores.items() if d is not None})
        if certified(legs, seen, top_k):
            # Even before any random access, a certified top k must already be the right one.
            order, totals = score_sum(legs, [k for k in seen if resolved(legs, k)])
            assert [(k, totals[k]) for k in order[:top_k]] == expected, f"depth {depth}, before random access"
        while need := to_resolve(legs, seen, top_k):
            for leg, column in zip(legs, table, strict=True):
                for key in need:
                    if key not in leg.scores and not leg.exhausted:
                        leg.scores[key] = column[key]
        finished = all(leg.exhausted for leg in legs)
        if certified(legs, seen, top_k) or finished:
            # Certified, or every input read to the end (the executor stops either way).
            stopped += 1
            order, totals = score_sum(legs, [k for k in seen if resolved(legs, k)])
            assert [(k, totals[k]) for k in order[:top_k]] == expected, f"depth {depth}"
        if finished:
            break
    assert stopped, "neither certified nor read to the end"
