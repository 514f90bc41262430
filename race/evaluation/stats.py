"""Scores of an evaluation: ir-measures per query and strategy, bootstrap confidence
intervals of the means, and a paired randomization test between every two strategies.

Measures are computed by ir-measures (its pytrec_eval provider), never by hand here; the
statistics resample the per-query values it returns. A query no strategy answered scores 0.
Bootstraps draw the same query indices for every strategy (the comparison is paired), from
a seeded generator, so the report is the same on every run.

A run that did not search (``not_scored``: a timeout, a cancellation, a bound met before the
answer) is no measure of its strategy: it is left out of that strategy's means, intervals and
paired tests rather than counted as 0, and counted with its reason. A strategy none of whose
runs was scored has no mean (``None``), never 0.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from rsc import CanonicalFloat, Record

EVAL_SCHEMA_VERSION = "race.eval/1"
MEASURES = ("nDCG@10", "R@10", "RR", "P@5")
"""nDCG@10, Recall@10, reciprocal rank (its mean is MRR) and precision at 5."""


class WorkOrder(Record):
    """A relevant document a strategy did not place in its top cutoff."""

    query: str
    strategy: str
    doc: str
    grade: int
    cause: Literal["gap", "filter", "truncation", "ranking"]
    ranks: dict[str, int | None]
    """Where the document ranked (1-based, among documents) in each leg and in the strategy."""
    detail: str


class Interval(Record):
    mean: CanonicalFloat
    low: CanonicalFloat
    high: CanonicalFloat


class PairedTest(Record):
    a: str
    b: str
    measure: str
    mean_difference: CanonicalFloat
    """mean(a) - mean(b) over the queries."""
    p_value: CanonicalFloat
    """Two-sided paired randomization (sign-flip) test."""
    wins: int
    losses: int
    ties: int


class Scored(Record):
    """How many of a strategy's queries were scored, and why the others were not."""

    scored: int
    not_scored: dict[str, int] = Field(default_factory=dict)
    """Gap kind (``timeout``, ``cancelled``, ``resource_limited``) -> queries."""


class EvalReport(Record):
    schema_version: str = EVAL_SCHEMA_VERSION
    settings: dict[str, Any]
    generations: dict[str, str] = Field(default_factory=dict)
    queries: int
    strategies: tuple[str, ...]
    overall: dict[str, dict[str, Interval | None]]
    """strategy -> measure -> mean over its scored queries with its 95 % bootstrap interval;
    None (not measured) where none was scored."""
    by_category: dict[str, dict[str, dict[str, CanonicalFloat | None]]]
    """category -> strategy -> measure -> mean over the scored queries, or None."""
    per_query: dict[str, dict[str, dict[str, CanonicalFloat]]]
    """query -> strategy -> measure -> value; a strategy whose run was not scored is absent."""
    scored: dict[str, Scored] = Field(default_factory=dict)
    """strategy -> how many queries were scored and why the others were not."""
    not_scored: dict[str, dict[str, str]] = Field(default_factory=dict)
    """strategy -> query -> why its run was not scored (``kind: detail`` of the gap)."""
    paired: tuple[PairedTest, ...]
    work_orders: tuple[WorkOrder, ...]


def ir_measures() -> Any:
    from race.extras import require

    return require("ir_measures", feature="race eval", where="race eval")


def per_query_scores(
    run: Mapping[str, Sequence[str]], relevant: Mapping[str, Mapping[str, int]], measures: Sequence[str]
) -> dict[str, dict[str, float]]:
    """query -> measure -> value, by ir-measures; every judged query is present."""
    irm = ir_measures()
    parsed = [irm.parse_measure(m) for m in measures]
    qrels = [irm.Qrel(q, d, int(g)) for q, docs in sorted(relevant.items()) for d, g in sorted(docs.items())]
    scored = [irm.ScoredDoc(q, d, float(len(docs) - i)) for q, docs in sorted(run.items()) for i, d in enumerate(docs)]
    out = {q: {m: 0.0 for m in measures} for q in relevant}
    names = {str(p): m for p, m in zip(parsed, measures, strict=True)}
    for metric in irm.iter_calc(parsed, qrels, scored):
        if metric.query_id in out:
            out[metric.query_id][names[str(metric.measure)]] = float(metric.value)
    return out


def bootstrap(
    values: np.ndarray[Any, Any], indices: np.ndarray[Any, Any], scored: np.ndarray[Any, Any]
) -> Interval | None:
    """The mean of ``values`` over the ``scored`` queries, with the percentile interval of the
    resampled means (each resample's mean over the scored queries it drew; a resample that drew
    none has no mean and is left out). None when no query is scored."""
    if not scored.any():
        return None
    kept = np.where(scored, values, 0.0)
    drawn = scored[indices].sum(axis=1)
    means = kept[indices].sum(axis=1)[drawn > 0] / drawn[drawn > 0]
    low, high = np.percentile(means, [2.5, 97.5])
    return Interval(mean=float(values[scored].mean()), low=float(low), high=float(high))


def paired_test(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], signs: np.ndarray[Any, Any]) -> float:
    diff = a - b
    observed = abs(diff.mean())
    flipped = np.abs((signs * diff).mean(axis=1))
    return float((np.count_nonzero(flipped >= observed - 1e-12) + 1) / (len(signs) + 1))


def score_runs(
    runs: Mapping[str, Mapping[str, Sequence[str]]],
    relevant: Mapping[str, Mapping[str, int]],
    categories: Mapping[str, str],
    orders: Sequence[WorkOrder],
    *,
    settings: Mapping[str, Any],
    generations: Mapping[str, str] | None = None,
    not_scored: Mapping[str, Mapping[str, str]] | None = None,
) -> EvalReport:
    """Score every strategy's runs; ``not_scored`` (strategy -> query -> reason) names the runs
    that did not search, which are left out of that strategy's figures."""
    measures = tuple(settings.get("measures", MEASURES))
    queries = sorted(relevant)
    strategies = tuple(runs)
    scores = {s: per_query_scores(runs[s], relevant, measures) for s in strategies}
    skipped = {s: {q: r for q, r in sorted((not_scored or {}).get(s, {}).items()) if q in relevant} for s in strategies}
    mask = {s: np.array([q not in skipped[s] for q in queries], dtype=bool) for s in strategies}
    rng = np.random.default_rng(int(settings.get("seed", 7)))
    samples = int(settings.get("samples", 2000))
    indices = rng.integers(0, len(queries), size=(samples, len(queries)))
    signs = rng.choice(np.array([-1.0, 1.0]), size=(samples * 5, len(queries)))
    matrix = {s: {m: np.array([scores[s][q][m] for q in queries]) for m in measures} for s in strategies}
    overall = {s: {m: bootstrap(matrix[s][m], indices, mask[s]) for m in measures} for s in strategies}
    by_category: dict[str, dict[str, dict[str, float | None]]] = {}
    for cat in sorted({categories.get(q, "") for q in queries}):
        member = np.array([categories.get(q, "") == cat for q in queries], dtype=bool)
        by_category[cat or "all"] = {
            s: {m: float(matrix[s][m][member & mask[s]].mean()) if (member & mask[s]).any() else None for m in measures}
            for s in strategies
        }
    paired = []
    for a, b in itertools.combinations(strategies, 2):
        both = mask[a] & mask[b]
        if not both.any():
            continue  # no query measures both: nothing to compare
        for m in measures:
            x, y = matrix[a][m][both], matrix[b][m][both]
            paired.append(
                PairedTest(
                    a=a,
                    b=b,
                    measure=m,
                    mean_difference=float((x - y).mean()),
                    p_value=paired_test(x, y, signs[:, both]),
                    wins=int(np.count_nonzero(x > y + 1e-12)),
                    losses=int(np.count_nonzero(y > x + 1e-12)),
                    ties=int(np.count_nonzero(np.abs(x - y) <= 1e-12)),
                )
            )
    per_query = {q: {s: dict(scores[s][q]) for s in strategies if q not in skipped[s]} for q in queries}
    counted = {
        s: Scored(
            scored=int(mask[s].sum()),
            not_scored=dict(sorted(Counter(r.split(":", 1)[0] for r in skipped[s].values()).items())),
        )
        for s in strategies
    }
    return EvalReport(
        settings=dict(settings),
        generations=dict(generations or {}),
        queries=len(queries),
        strategies=strategies,
        overall=overall,
        by_category=by_category,
        per_query=per_query,
        paired=tuple(paired),
        work_orders=tuple(orders),
        scored=counted,
        not_scored={s: skipped[s] for s in strategies if skipped[s]},
    )
