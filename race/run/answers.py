"""Screening a backend's answer before anything reads it (docs/invariants.md#malformed-answers).

A hit is malformed when its native score is not finite or outside what its score kind
admits, when its score kind is not the contract's, when it falls outside a filter the
request pushed to the backend, when its key repeats one already in the answer, or when its
custody does not name the request it answers. Malformed hits are dropped and one
``backend_error`` gap counts them by reason; the rest of the answer stands.
"""

from __future__ import annotations

import math

from backends.base import request_fingerprint
from race.run.outcome import gap
from rsc import Gap, GapKind, Hit, ScanRequest, ScanResult, ScoreKind
from rsc.records import MetadataValue

# Native scores each kind admits; a tolerance absorbs float32 rounding around exact bounds.
_TOLERANCE = 1e-5
_RANGES: dict[ScoreKind, tuple[float, float]] = {
    ScoreKind.BM25: (0.0, math.inf),
    ScoreKind.COSINE_DISTANCE: (0.0, 2.0),
    ScoreKind.L2_DISTANCE: (0.0, math.inf),
    ScoreKind.HOPS: (0.0, math.inf),
    ScoreKind.RRF: (0.0, math.inf),
}


def screen(request: ScanRequest, result: ScanResult, score_kind: ScoreKind | None) -> tuple[ScanResult, Gap | None]:
    """``result`` without its malformed hits, and the gap that says what was dropped."""
    expected_request = request_fingerprint(request)
    ref = f"{request.rsc_id}@{request.rsc_version}"
    kept: list[Hit] = []
    seen: set[str] = set()
    dropped: dict[str, int] = {}
    backend, pushed, isfinite = request.backend, request.pushed, math.isfinite
    low, high = _RANGES.get(score_kind, (-math.inf, math.inf)) if score_kind is not None else (0.0, -1.0)
    low, high = low - _TOLERANCE, high + _TOLERANCE
    for hit in result.hits:
        custody = hit.custody
        score = custody.score
        # What ``_malformed`` checks, inline for the hit that passes it (every one, mostly).
        if (
            type(score) is float
            and low <= score <= high
            and isfinite(score)
            and custody.score_kind is score_kind
            and custody.request == expected_request
            and custody.backend == backend
            and custody.rsc == ref
            and hit.key not in seen
            and (not pushed or all(f.matches(_fields(hit)) for f in pushed))
        ):
            kept.append(hit)
            seen.add(hit.key)
            continue
        why = _malformed(hit, request, expected_request, ref, score_kind, seen)
        if why is None:
            kept.append(hit)
            seen.add(hit.key)
        else:
            dropped[why] = dropped.get(why, 0) + 1
    if not dropped:
        return result, None
    total = sum(dropped.values())
    reasons = "; ".join(f"{n} {why}" for why, n in sorted(dropped.items()))
    detail = (
        f"{ref}: dropped {total} malformed {'hit' if total == 1 else 'hits'} of {len(result.hits)} "
        f"({reasons}); the answer is short by what they would have said"
    )
    return (
        result.model_copy(update={"hits": tuple(kept)}),
        gap(GapKind.BACKEND_ERROR, request.obligation, detail, request.backend),
    )


def _malformed(
    hit: Hit,
    request: ScanRequest,
    expected_request: str,
    ref: str,
    score_kind: ScoreKind | None,
    seen: set[str],
) -> str | None:
    custody = hit.custody
    score = float(custody.score)
    if not math.isfinite(score):
        return "with a non-finite score"
    if score_kind is not None and custody.score_kind is not score_kind:
        return f"with score kind {custody.score_kind.value!r}, not {score_kind.value!r}"
    low, high = _RANGES.get(custody.score_kind, (-math.inf, math.inf))
    if score < low - _TOLERANCE:
        return f"with a negative {custody.score_kind.value} score"
    if score > high + _TOLERANCE:
        return f"with a {custody.score_kind.value} score above {high:g}"
    if custody.request != expected_request or custody.backend != request.backend or custody.rsc != ref:
        return "whose custody does not name the request"
    if hit.key in seen:
        return "with a duplicate key"
    if request.pushed and not all(f.matches(_fields(hit)) for f in request.pushed):
        return "outside the pushed filters"
    return None


def _fields(hit: Hit) -> dict[str, MetadataValue]:
    """What a pushed filter may name: the metadata and the hit's own identity."""
    return {**hit.metadata, "doc_id": hit.doc_id, "chunk_id": hit.chunk_id}
