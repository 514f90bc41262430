"""Fusion, recorded as selection provenance (I11).

RRF is used only where scores are not calibrated against each other (BM25 beside cosine
distance beside hop counts). Ranks are 1-based; ties are broken by the canonical evidence
key, so the fused order never depends on which leg finished first. Inputs whose contracts
share a score calibration fuse by the sum of their similarities; with a top-k that sum is
what Fagin's threshold algorithm stops early on (I9).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from fractions import Fraction

from planner import RRF, FusionSpec
from race.receipt import Fusion
from race.run.outcome import Item, Outcome
from race.tracing import span
from rsc import ScoreKind, SearchCoverage, SupportClosure, similarity, similarity_floor, weakest, weakest_closure

RRF_K = 60
_DIGITS = 12
"""Fused scores are ranked, compared and recorded at 12 decimals: sums that differ only in
their last floating-point bits are one score, and the evidence key decides between them."""


def _level(score: float) -> float:
    return round(score, _DIGITS)


def rrf(
    rankings: Sequence[tuple[str, Sequence[str]]], k: int = RRF_K
) -> tuple[list[str], dict[str, Fraction], dict[str, dict[str, int]]]:
    """Fuse ``(label, keys in rank order)`` lists; return the order, scores and per-label ranks.

    Scores are exact rationals, sum of ``1 / (k + rank)``: two keys with the same multiset of
    ranks have equal scores by construction, in any leg order, and the key breaks the tie.
    """
    scores: dict[str, Fraction] = {}
    ranks: dict[str, dict[str, int]] = {}
    for label, keys in rankings:
        for rank, key in enumerate(keys, start=1):
            scores[key] = scores.get(key, _ZERO) + Fraction(1, k + rank)
            ranks.setdefault(key, {})[label] = rank
    order = sorted(scores, key=lambda key: (-scores[key], key))
    return order, scores, ranks


_ZERO = Fraction(0)


def fuse(node: str, parts: Sequence[Outcome], spec: FusionSpec = RRF, *, top_k: int | None = None) -> Outcome:
    """The items of ``parts`` in one ranking, each keeping every fusion level it went through.

    One input with hits keeps its own order; several fuse by RRF over their rankings (I11).
    Coverage and closure are the weakest of the inputs'; gaps are all of theirs."""
    started = time.perf_counter()
    with span("race.fusion", node=node, inputs=[p.node for p in parts]) as traced:
        fused = _fuse(node, parts, spec, top_k=top_k)
        method = "rrf" if sum(1 for p in parts if p.items) > 1 else "single"
        traced.set(method=method, k=spec.k if method == "rrf" else None, items=len(fused.items))
    spent = FUSION_SECONDS.get()
    if spent is not None:
        spent[0] += time.perf_counter() - started
    return fused


FUSION_SECONDS: ContextVar[list[float] | None] = ContextVar("race_fusion_seconds", default=None)
"""The seconds a run spent fusing (operational only): the executor sets a one-item list, each
``fuse`` adds to it; the tasks of a run share it, since a task copies its parent's context."""


def _fuse(node: str, parts: Sequence[Outcome], spec: FusionSpec, *, top_k: int | None) -> Outcome:
    views: dict[str, list[Item]] = {}
    inner: dict[str, list[Fusion]] = {}
    for part in parts:
        for item in part.items:
            views.setdefault(item.key, []).append(item)
            # A single input's rank is already in this fusion's ranks; deeper fusions are kept.
            if item.fusion is not None and item.fusion.method != "single":
                inner.setdefault(item.key, []).append(item.fusion)
    # Every view of one unit merged at once, in input order: linear in the inputs' items.
    items = {key: Item.merged_all(found) for key, found in views.items()}
    live = [(part.node, part.ranking) for part in parts if part.items]
    if len(live) <= 1:
        ranking = list(live[0][1]) if live else []
        fused = [items[key] for key in ranking]
    else:
        ranking, scores, ranks = rrf(live, spec.k)
        fused = [
            items[key].replace(
                fusion=Fusion(
                    method="rrf",
                    node=node,
                    k=spec.k,
                    ranks=ranks[key],
                    score=round(float(scores[key]), _DIGITS),
                    inputs=tuple(inner.get(key, ())),
                )
            )
            for key in ranking
        ]
    if top_k is not None:
        fused = fused[:top_k]
    return Outcome(
        node,
        tuple(fused),
        weakest(*(p.coverage for p in parts)) if parts else SearchCoverage.UNKNOWN,
        weakest_closure(*(p.closure for p in parts)) if parts else SupportClosure.PARTIAL,
        tuple(g for p in parts for g in p.gaps),
        failed=all(p.failed for p in parts),
    )


@dataclass
class LegScores:
    """What one input of a score-sum fusion has told so far (I9, I11).

    ``scores`` maps an evidence key to its native score, or to ``None`` where the input was
    asked and cannot hold the row (filtered out). ``last`` is the native score of the deepest
    row sorted access returned; ``exhausted`` says sorted access returned every row there is.
    """

    label: str
    score_kind: ScoreKind
    scores: dict[str, float | None] = field(default_factory=dict)
    last: float | None = None
    exhausted: bool = False

    def similarity(self, key: str) -> float:
        score = self.scores.get(key)
        return similarity_floor(self.score_kind) if score is None else similarity(self.score_kind, score)

    def bound(self) -> float:
        """The best similarity a row sorted access has not reached can have here."""
        if self.exhausted or self.last is None:
            return similarity_floor(self.score_kind)
        return similarity(self.score_kind, self.last)


def score_sum(legs: Sequence[LegScores], keys: Iterable[str]) -> tuple[list[str], dict[str, float]]:
    """Order ``keys`` by the sum of their calibrated similarities, ties by key."""
    totals = {key: sum(leg.similarity(key) for leg in legs) for key in keys}
    order = sorted(totals, key=lambda key: (-_level(totals[key]), key))
    return order, totals


def threshold(legs: Sequence[LegScores]) -> float:
    """Fagin's threshold: no row unseen by every input's sorted access can score above it."""
    return sum(leg.bound() for leg in legs)


def resolved(legs: Sequence[LegScores], key: str) -> bool:
    """Whether every input's score of ``key`` is known (a finished input knows it lacks a row)."""
    return all(key in leg.scores or leg.exhausted for leg in legs)


def upper_bound(legs: Sequence[LegScores], key: str) -> float:
    """The best fused score ``key`` can still have: known similarities, and for an input whose
    sorted access has not reached it, that input's bound."""
    return sum(leg.similarity(key) if key in leg.scores else leg.bound() for leg in legs)


def to_resolve(legs: Sequence[LegScores], candidates: Iterable[str], top_k: int | None) -> list[str]:
    """The candidates whose exact fused score is still needed, by random access, to know the
    top ``top_k`` (all of them without a top-k): those whose upper bound reaches the k-th exact
    score, or while fewer than k are exact, the best by upper bound."""
    pending = [key for key in candidates if not resolved(legs, key)]
    if top_k is None or not pending:
        return sorted(pending)
    done = [key for key in candidates if resolved(legs, key)]
    order, totals = score_sum(legs, done)
    bounds = {key: upper_bound(legs, key) for key in pending}
    if len(order) < top_k:
        best = sorted(pending, key=lambda key: (-_level(bounds[key]), key))
        return sorted(best[: top_k - len(order)])
    kth = _level(totals[order[top_k - 1]])
    # A candidate whose bound ties the k-th score may still win the tie by its key.
    return sorted(key for key in pending if _level(bounds[key]) >= kth)


def certified(legs: Sequence[LegScores], candidates: Iterable[str], top_k: int) -> bool:
    """Whether the top ``top_k`` of the exactly scored candidates is final: its k-th fused score
    is above the threshold (no unread row can reach it) and above the upper bound of every
    candidate whose score is not exact yet."""
    keys = list(candidates)
    order, totals = score_sum(legs, [key for key in keys if resolved(legs, key)])
    if len(order) < top_k:
        return False
    kth = _level(totals[order[top_k - 1]])
    # Strictly above, at the precision scores are ranked at: a tie could go to a smaller key.
    return kth > _level(threshold(legs)) and all(
        _level(upper_bound(legs, key)) < kth for key in keys if not resolved(legs, key)
    )
