"""Scatter-gather for a sharded instance: every shard at once, then an exact top-k merge.

Each shard is sent the instance's request as its own contract's (same query, filters, k) and
gets ``share`` of the time left before the scan's deadline, so a shard that hangs is given up
while there is still time to merge the others. Each shard answers its exact top-k; the first k
of their union, in the contract's order with ties broken by evidence key, is the top-k of the
union of the shards' rows. The merged hits are renumbered and carry the instance's request and
generation (which names every shard's) in their custody; ``index_identity`` names the shard a
hit came from.

When no shard answers, the scan fails as one backend's would (``BackendTimeout`` when every
shard timed out, else ``BackendUnavailable``), naming every shard's failure.

Nothing here depends on which shard finished first: answers are kept by shard position, the
merge is a sort, and gaps are listed in shard order.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import anyio

from backends.base import UNKNOWN_GENERATION, Adapter, request_fingerprint
from rsc import (
    BackendTimeout,
    BackendUnavailable,
    Gap,
    GapKind,
    Hit,
    ScanRequest,
    ScanResult,
    SnapshotMoved,
)

SHARD_SHARE: Final = 0.8
"""The part of a scan's remaining deadline each shard gets; the rest is for the merge."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shard:
    label: str
    adapter: Adapter
    rows: int
    """The shard's chunks, as read when the instance was opened or pinned."""


@dataclass(frozen=True)
class _Failure:
    kind: GapKind
    why: str


@dataclass(frozen=True)
class Scattered:
    result: ScanResult
    shard_generations: tuple[str, ...]
    """Each shard's generation as its answer reported it (``unknown`` for a shard that failed)."""


async def scatter(
    request: ScanRequest,
    shards: Sequence[Shard],
    *,
    inner: ScanRequest,
    ordering: str,
    share: float,
    generation: Callable[[Sequence[str]], str],
    exhaustive_set: bool = False,
) -> Scattered:
    """``inner`` sent to every shard concurrently, the answers merged into ``request``'s.
    ``generation`` names the instance's snapshot from the shards' answers (``unknown`` for a
    shard that failed): what the answer and every merged hit carry."""
    deadline = anyio.current_effective_deadline()
    budget = (deadline - anyio.current_time()) * share if math.isfinite(deadline) else None
    answers: list[ScanResult | _Failure] = [_Failure(GapKind.BACKEND_ERROR, "not asked")] * len(shards)

    async def one(i: int) -> None:
        answers[i] = await _ask(shards[i].adapter, inner, budget)

    async with anyio.create_task_group() as tg:
        for i in range(len(shards)):
            tg.start_soon(one, i)
    failures = [(shard, a) for shard, a in zip(shards, answers, strict=True) if isinstance(a, _Failure)]
    if len(failures) == len(shards):
        # No shard answered: the instance failed, as one backend that does not answer fails its leg.
        why = "; ".join(f"shard {shard.label}: {f.why}" for shard, f in failures)
        where = f"{request.rsc_id}@{request.rsc_version}"
        if all(f.kind is GapKind.TIMEOUT for _, f in failures):
            raise BackendTimeout(f"no shard of {request.backend!r} answered ({why})", where=where)
        raise BackendUnavailable(f"no shard of {request.backend!r} answered ({why})", where=where)
    return _merge(request, inner, shards, answers, ordering, exhaustive_set, generation)


async def _ask(adapter: Adapter, inner: ScanRequest, budget: float | None) -> ScanResult | _Failure:
    """One shard's answer, or how it failed; every failure of a shard is contained here."""
    try:
        with anyio.move_on_after(budget) as scope:
            result = await adapter.scan(inner)
    except (TimeoutError, BackendTimeout) as exc:
        return _Failure(GapKind.TIMEOUT, _text(exc))
    except SnapshotMoved as exc:
        return _Failure(GapKind.SNAPSHOT_MOVED, _text(exc))
    except Exception as exc:
        return _Failure(GapKind.BACKEND_ERROR, _text(exc))
    if scope.cancelled_caught:
        return _Failure(GapKind.TIMEOUT, "no answer within its share of the scan's deadline")
    if not isinstance(result, ScanResult):
        return _Failure(GapKind.BACKEND_ERROR, f"answered {type(result).__name__}, not a ScanResult")
    return result


def _text(exc: BaseException) -> str:
    kind = getattr(exc, "original_type", None) or type(exc).__name__
    return f"{kind}: {str(exc).strip() or 'no message'}"


def order_key(ordering: str, hit: Hit) -> tuple[float | str, ...]:
    """A hit's place in a contract's order; ties are broken by evidence key."""
    score = float(hit.custody.score)
    if ordering == "score_desc":
        return (-score, hit.key)
    if ordering == "key_asc":
        return (hit.key,)
    return (score, hit.key)


def _merge(
    request: ScanRequest,
    inner: ScanRequest,
    shards: Sequence[Shard],
    answers: Sequence[ScanResult | _Failure],
    ordering: str,
    exhaustive_set: bool,
    generation: Callable[[Sequence[str]], str],
) -> Scattered:
    ref, inner_ref = f"{request.rsc_id}@{request.rsc_version}", f"{inner.rsc_id}@{inner.rsc_version}"
    expected = request_fingerprint(inner)
    name = request.backend
    gaps: list[Gap] = []
    pool: list[tuple[tuple[float | str, ...], int, str, Hit]] = []
    failed: list[tuple[Shard, _Failure]] = []
    for shard, answer in zip(shards, answers, strict=True):
        if isinstance(answer, _Failure):
            failed.append((shard, answer))
            continue
        foreign = 0
        for hit in answer.hits:
            c = hit.custody
            if c.request != expected or c.rsc != inner_ref or c.backend != inner.backend:
                foreign += 1
                continue
            pool.append((order_key(ordering, hit), len(pool), shard.label, hit))
        if foreign:
            hits_word = "hit" if foreign == 1 else "hits"
            why = f"{ref}: shard {shard.label}: dropped {foreign} {hits_word} whose custody does not name its request"
            gaps.append(_gap(request, GapKind.BACKEND_ERROR, why))
        gaps += [
            g.model_copy(update={"backend": name, "detail": f"shard {shard.label}: {g.detail}"}) for g in answer.gaps
        ]
    pool.sort(key=lambda p: (p[0], p[1]))
    merged: list[tuple[str, Hit]] = []
    seen: set[str] = set()
    for _, _, label, hit in pool:
        if hit.key not in seen:
            seen.add(hit.key)
            merged.append((label, hit))
    cut = merged[: request.k]
    shard_generations = tuple(a.generation if isinstance(a, ScanResult) else UNKNOWN_GENERATION for a in answers)
    instance = generation(shard_generations)
    shared = {"backend": name, "rsc": ref, "request": request_fingerprint(request), "index_generation": instance}
    hits = tuple(_relabel(hit, label, rank, shared) for rank, (label, hit) in enumerate(cut, start=1))
    gaps += _unavailable(request, ref, shards, failed)
    answered = [a for a in answers if isinstance(a, ScanResult)]
    totals = [a.total_matches for a in answered]
    complete = not failed and all(t is not None for t in totals)
    if exhaustive_set and len(merged) > len(cut):
        # A whole match set cut at k is a shortfall, never a silent cut.
        matched = sum(t for t in totals if t is not None) if complete else len(merged)
        why = f"{ref}: the shards' exact lookups matched {matched} chunks; k={request.k} returned {len(hits)}"
        gaps.append(_gap(request, GapKind.RESOURCE_LIMITED, why))
    return Scattered(
        result=ScanResult(
            hits=hits,
            gaps=tuple(gaps),
            model_calls=sum(a.model_calls for a in answered),
            generation=instance,
            total_matches=sum(t for t in totals if t is not None) if complete else None,
            exhausted=not failed and all(a.exhausted for a in answered) and len(cut) == len(merged),
        ),
        shard_generations=shard_generations,
    )


def _relabel(hit: Hit, label: str, rank: int, shared: dict[str, str]) -> Hit:
    """``hit`` as the instance's: its request, contract and backend, its merged rank, its shard."""
    c = hit.custody
    identity = f"{shared['backend']}/{label}:{c.index_identity}"
    custody = c.model_copy(update={**shared, "rank": rank, "index_identity": identity})
    return hit.model_copy(update={"custody": custody})


def _gap(request: ScanRequest, kind: GapKind, detail: str, fraction: float | None = None) -> Gap:
    _log.warning(
        "%s %s %s: degraded read, %s: %s", request.backend, request.rsc_id, request.obligation, kind.value, detail
    )
    return Gap(
        kind=kind, obligation=request.obligation, backend=request.backend, detail=detail, covered_fraction=fraction
    )


def _unavailable(
    request: ScanRequest, ref: str, shards: Sequence[Shard], failed: Sequence[tuple[Shard, _Failure]]
) -> list[Gap]:
    """For each shard that did not answer: a gap of the failure's kind, and ``shard_unavailable``
    with the fraction of the instance's chunks the answer covered."""
    if not failed:
        return []
    total = sum(s.rows for s in shards)
    missing = {s.label for s, _ in failed}
    searched = sum(s.rows for s in shards if s.label not in missing)
    fraction = searched / total if total else 0.0
    answered = len(shards) - len(failed)
    gaps: list[Gap] = []
    for shard, failure in failed:
        gaps.append(_gap(request, failure.kind, f"{ref}: shard {shard.label}: {failure.why}"))
        detail = (
            f"{ref}: shard {shard.label} ({shard.rows} of {total} chunks) did not answer ({failure.kind.value}); "
            f"the answer searched {searched} of {total} chunks in {answered} of {len(shards)} shards "
            f"(covered fraction {fraction:.4f}); absence of hits in the missing shards is not absence of evidence"
        )
        gaps.append(_gap(request, GapKind.SHARD_UNAVAILABLE, detail, fraction))
    return gaps
