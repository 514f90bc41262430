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
from collections.abc import Iterator, Mapping, Sequence
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


BLOCK_CELLS = 1 << 18
"""Resample x query cells drawn at once (2 MB of float64): the bootstrap and the sign-flip test
draw their matrices a block of resamples at a time, as many resamples as fit, so their memory
stays the same whatever the number of queries. The generator's stream is the one a single draw
of the whole matrix takes, and every resample's mean is computed alike, so the figures are the
same bit for bit."""


def _blocks(total: int, queries: int) -> Iterator[int]:
    """Sizes of the blocks of ``total`` resamples of ``queries`` queries each."""
    rows = max(1, BLOCK_CELLS // max(1, queries))
    for start in range(0, total, rows):
        yield min(rows, total - start)


def bootstraps(
    rng: np.random.Generator,
    samples: int,
    queries: int,
    matrix: Mapping[str, Mapping[str, np.ndarray[Any, Any]]],
    scored: Mapping[str, np.ndarray[Any, Any]],
) -> dict[str, dict[str, Interval | None]]:
    """strategy -> measure -> the mean of its values over its ``scored`` queries, with the
    percentile interval of the resampled means (each resample's mean over the scored queries it
    drew; a resample that drew none has no mean and is left out). None when no query is scored.
    Every strategy and measure resamples the same query indices (the comparison is paired)."""
    kept = {s: {m: np.where(scored[s], v, 0.0) for m, v in by_m.items()} for s, by_m in matrix.items()}
    drawn: dict[str, list[np.ndarray[Any, Any]]] = {s: [] for s in matrix}
    sums: dict[str, dict[str, list[np.ndarray[Any, Any]]]] = {s: {m: [] for m in by_m} for s, by_m in matrix.items()}
    for size in _blocks(samples, queries):
        indices = rng.integers(0, queries, size=(size, queries))
        for s, zeroed in kept.items():
            drawn[s].append(scored[s][indices].sum(axis=1))
            for m, values in zeroed.items():
                sums[s][m].append(values[indices].sum(axis=1))
    out: dict[str, dict[str, Interval | None]] = {}
    for s, by_m in matrix.items():
        out[s] = {}
        counts = np.concatenate(drawn[s]) if drawn[s] else np.zeros(0, dtype=np.int64)
        for m, values in by_m.items():
            if not scored[s].any():
                out[s][m] = None
                continue
            means = np.concatenate(sums[s][m])[counts > 0] / counts[counts > 0]
            low, high = np.percentile(means, [2.5, 97.5])
            out[s][m] = Interval(mean=float(values[scored[s]].mean()), low=float(low), high=float(high))
    return out


def sign_flip_tests(
    rng: np.random.Generator,
    flips: int,
    pairs: Sequence[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    queries: int,
) -> list[float]:
    """The two-sided paired randomization (sign-flip) test's p-value of each pair ``(a, b, both)``
    (the values of two strategies over the queries ``both`` measures), over ``flips`` sign vectors
    of all the queries shared by every pair."""
    if not pairs:
        return []
    diffs = [a - b for a, b, _ in pairs]
    observed = [abs(d.mean()) for d in diffs]
    beyond = [0] * len(pairs)
    for size in _blocks(flips, queries):
        signs = rng.choice(np.array([-1.0, 1.0]), size=(size, queries))
        for i, ((_, _, both), diff) in enumerate(zip(pairs, diffs, strict=True)):
            flipped = np.abs((signs[:, both] * diff).mean(axis=1))
            beyond[i] += int(np.count_nonzero(flipped >= observed[i] - 1e-12))
    return [(b + 1) / (flips + 1) for b in beyond]


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
    matrix = {s: {m: np.array([scores[s][q][m] for q in queries]) for m in measures} for s in strategies}
    overall = bootstraps(rng, samples, len(queries), matrix, mask)
    by_category: dict[str, dict[str, dict[str, float | None]]] = {}
    for cat in sorted({categories.get(q, "") for q in queries}):
        member = np.array([categories.get(q, "") == cat for q in queries], dtype=bool)
        by_category[cat or "all"] = {
            s: {m: float(matrix[s][m][member & mask[s]].mean()) if (member & mask[s]).any() else None for m in measures}
            for s in strategies
        }
    compared = [
        (a, b, m, both)
        for a, b in itertools.combinations(strategies, 2)
        if (both := mask[a] & mask[b]).any()  # no query measures both: nothing to compare
        for m in measures
    ]
    tests = [(matrix[a][m][both], matrix[b][m][both], both) for a, b, m, both in compared]
    p_values = sign_flip_tests(rng, samples * 5, tests, len(queries))
    paired = [
        PairedTest(
            a=a,
            b=b,
            measure=m,
            mean_difference=float((x - y).mean()),
            p_value=p,
            wins=int(np.count_nonzero(x > y + 1e-12)),
            losses=int(np.count_nonzero(y > x + 1e-12)),
            ties=int(np.count_nonzero(np.abs(x - y) <= 1e-12)),
        )
        for (a, b, m, _), (x, y, _), p in zip(compared, tests, p_values, strict=True)
    ]
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
