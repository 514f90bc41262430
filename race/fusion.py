"""Reciprocal rank fusion, recorded as selection provenance (I11).

RRF is used only where scores are not calibrated against each other (BM25 beside cosine
distance beside hop counts). Ranks are 1-based; ties are broken by the canonical evidence
key, so the fused order never depends on which leg finished first.
"""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 60


def rrf(
    rankings: Sequence[tuple[str, Sequence[str]]], k: int = RRF_K
) -> tuple[list[str], dict[str, float], dict[str, dict[str, int]]]:
    """Fuse ``(label, keys in rank order)`` lists; return the order, scores and per-label ranks."""
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for label, keys in rankings:
        for rank, key in enumerate(keys, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            ranks.setdefault(key, {})[label] = rank
    order = sorted(scores, key=lambda key: (-round(scores[key], 12), key))
    return order, scores, ranks
