"""A union of inputs of one score calibration, fused by the sum of their similarities (I11),
and where admissible stopped early by Fagin's threshold algorithm (I9).

Each input first answers its own obligation. Every candidate's score on every input is then
read exactly, by random access where the input's answer did not hold it. With a top-k,
sorted access goes deeper round by round until the threshold proves that no unread row can
enter the top k, or, where early stop is not admissible or is switched off, until every input
is read to the end (full evaluation). Depths depend only on the data, so the receipt does not
depend on timing (I5). Deeper reads re-use the obligation's query embedding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner import Obligation, OperatorNode, ScanNode, UnionOp
from race.receipt import Fusion
from race.run.context import RunContext
from race.run.freshness import marked, stale_reasons
from race.run.fusion import LegScores, certified, fuse, resolved, score_sum, threshold, to_resolve
from race.run.legs import Answer
from race.run.obligations import result_outcome, with_kind_status
from race.run.outcome import Item, Outcome, failure_closure, gap
from rsc import (
    Filter,
    FilterOp,
    Gap,
    GapKind,
    Hit,
    ScanResult,
    SearchCoverage,
    canonical_float,
    weakest,
    weakest_closure,
)

_MAX_DEPTH = 100_000_000
_DEPTH_GROWTH = 4
"""Each round of the threshold algorithm reads this many times deeper: a round's cost is
mostly the backend's fixed per-query work, so fewer, deeper rounds finish sooner."""


@dataclass
class _Input:
    """What the union knows of one input so far: its scores, hits and sorted-access ranks."""

    scan: ScanNode
    ob: Obligation
    scores: LegScores
    hits: dict[str, Hit]
    ranks: dict[str, int]

    @property
    def label(self) -> str:
        return self.scores.label


async def score_union(node: OperatorNode, op: UnionOp, ctx: RunContext) -> Outcome:
    fusion = node.fusion
    assert fusion is not None and fusion.score_kind is not None
    children = await ctx.inputs(node.children)
    failed = [c for c in children if c.failed]
    if failed:
        # A failed input's scores are unknown: the others fuse by rank, and the receipt says why.
        outcome = fuse(op.id, children, top_k=op.k)
        note = (
            f"not applied: {', '.join(c.node for c in failed)} failed, so their scores are unknown; "
            "the other inputs were fused by RRF"
        )
        return outcome.replace(coverage=weakest(outcome.coverage, SearchCoverage.PARTIAL_BACKEND), note=note)
    inputs = []
    for child in node.children:
        assert isinstance(child, ScanNode), f"score_sum input {child.node} is not a scan"
        ob = ctx.obligation(child.node)
        inputs.append(_Input(child, ob, LegScores(f"{ob.id}/{child.rsc}", fusion.score_kind), {}, {}))
    top_k = fusion.top_k
    early = top_k is not None and node.early_stop.admissible and ctx.early_stop
    gaps: list[Gap] = [g for c in children for g in c.gaps]
    # Early stop reads deeper by _DEPTH_GROWTH a round; full evaluation jumps to the largest
    # set an input said it matches.
    depth = 0 if top_k is None else max(top_k, *(i.ob.k for i in inputs))  # 0: each input's own answer
    totals_known: list[int] = []
    rounds = random_reads = lookup_rounds = 0
    stop = ""
    while True:
        rounds += 1
        reads = [(_deeper(i.scan, depth or i.ob.k), i.ob.id, f"{i.label}@{depth or i.ob.k}") for i in inputs]
        for i, found in zip(inputs, await ctx.fetch_all(reads), strict=True):
            gaps += _union_gaps(op.id, found.gaps, i.scan.planned_gaps)
            if found.result is None:
                stop = f"stopped: sorted access to {i.label} failed at depth {depth or i.ob.k}"
                break
            _read_sorted(i, found.result, depth or i.ob.k)
            if found.result.total_matches is not None:
                totals_known.append(found.result.total_matches)
        if stop:
            break
        state = [i.scores for i in inputs]
        seen = _candidates(state)
        # Random access only for what can still change the top k (all of them without a k);
        # full evaluation reads every input to the end, which leaves nothing to look up.
        while early or top_k is None:
            need = to_resolve(state, seen, top_k)
            if not need:
                break
            lookup_rounds += 1
            asked, stop = await _random_access(inputs, need, gaps, f"{rounds}.{lookup_rounds}", op.id, ctx)
            random_reads += asked
            if stop:
                break
        if stop or top_k is None:
            break
        order, totals = score_sum(state, [key for key in seen if resolved(state, key)])
        bound = threshold(state)
        if all(leg.exhausted for leg in state):
            stop = f"full evaluation: every input read to the end (depth {depth}, {_rounds(rounds)})"
            break
        if early and certified(state, seen, top_k):
            kth = _num(totals[order[top_k - 1]])
            stop = (
                f"threshold algorithm stopped at depth {depth} after {_rounds(rounds)}: score {kth} of rank "
                f"{top_k} > threshold {_num(bound)}; {random_reads} random accesses"
            )
            gaps.append(
                gap(
                    GapKind.EARLY_STOP,
                    op.id,
                    f"sorted access read {depth} rows per input (of up to {max(totals_known, default=depth)}); "
                    f"no unread row can reach the top {top_k}: its score is at most the threshold "
                    f"{_num(bound)} < {kth}",
                    inputs[0].scan.request.backend,
                    caveat=True,
                )
            )
            break
        depth = min(depth * _DEPTH_GROWTH if early else max([depth * 2, *totals_known]), _MAX_DEPTH)
    state = [i.scores for i in inputs]
    # Only candidates whose every score is known are ranked; the others cannot reach the top k.
    order, totals = score_sum(state, [key for key in _candidates(state) if resolved(state, key)])
    if top_k is not None:
        order = order[:top_k]
    items, checks = _items(op.id, inputs, order, totals, ctx)
    coverage = weakest(*(c.coverage for c in children))
    closure = weakest_closure(*(c.closure for c in children))
    if stop.startswith("stopped"):
        coverage = weakest(coverage, SearchCoverage.PARTIAL_BACKEND)
        closure = weakest_closure(closure, failure_closure(gaps))
    return Outcome(op.id, items, coverage, closure, (*gaps, *checks), note=_note(node, stop, early, top_k))


def _note(node: OperatorNode, stop: str, early: bool, top_k: int | None) -> str:
    verdict = node.early_stop
    if top_k is None:
        return verdict.reason
    if stop.startswith("stopped"):
        return stop
    if not early and verdict.admissible:
        return f"admissible ({verdict.reason}) but switched off; {stop}"
    if not verdict.admissible:
        return f"{verdict.reason}; {stop}"
    return stop


async def _random_access(
    inputs: Sequence[_Input], need: Sequence[str], gaps: list[Gap], tag: str, union: str, ctx: RunContext
) -> tuple[int, str]:
    """Read every input's score of the ``need`` keys it has not answered for, all inputs at
    once; return how many keys were asked and, if an input failed, why the union stops."""
    wanted = [[key for key in need if key not in i.scores.scores and not i.scores.exhausted] for i in inputs]
    chunk_ids = {key: hit.chunk_id for i in inputs for key, hit in i.hits.items()}
    asked = [(i, keys) for i, keys in zip(inputs, wanted, strict=True) if keys]
    reads = [(_lookup(i.scan, [chunk_ids[k] for k in keys]), i.ob.id, f"{i.label}#random{tag}") for i, keys in asked]
    answers: Sequence[Answer] = await ctx.fetch_all(reads) if reads else ()
    count = 0
    for (i, keys), found in zip(asked, answers, strict=True):
        gaps += _union_gaps(union, found.gaps, ())
        count += len(keys)
        if found.result is None:
            return count, f"stopped: random access to {i.label} failed"
        residual = i.scan.request.residual
        by_key = {h.key: h for h in found.result.hits if all(f.matches(h.metadata) for f in residual)}
        for key in keys:
            hit = by_key.get(key)
            i.scores.scores[key] = None if hit is None else _native(hit)
            if hit is not None:
                i.hits.setdefault(key, hit)
    return count, ""


def _items(
    union: str, inputs: Sequence[_Input], order: Sequence[str], totals: Mapping[str, float], ctx: RunContext
) -> tuple[tuple[Item, ...], tuple[Gap, ...]]:
    """The union's items in ``order``, each with the statuses its inputs' obligations give (I16)."""
    items: list[Item] = []
    checks: list[Gap] = []
    for key in order:
        views: list[Item] = []
        for i in inputs:
            hit = i.hits.get(key)
            if hit is None or i.scores.scores.get(key) is None:
                continue
            views.append(_input_item(i, hit, ctx, checks))
        assert views, f"{key} has a score but no hit"
        item = Item.merged_all(views)
        fusion = Fusion(
            method="score_sum",
            node=union,
            ranks={i.label: i.ranks[key] for i in inputs if key in i.ranks},
            similarities={i.label: round(i.scores.similarity(key), 12) for i in inputs},
            score=round(totals[key], 12),
        )
        items.append(item.replace(fusion=fusion))
    return tuple(items), tuple(dict.fromkeys(checks))


def _input_item(i: _Input, hit: Hit, ctx: RunContext, checks: list[Gap]) -> Item:
    (item,) = result_outcome(i.scan, i.ob, ScanResult(hits=(hit,), generation=""), ()).items
    if i.ob.freshness is not None:
        fresh = i.ob.freshness
        reasons, gaps = stale_reasons(
            (item,),
            as_of=fresh.as_of,
            max_age_days=fresh.max_age_days,
            lineage=ctx.lineage,
            node=i.ob.id,
            roles=ctx.roles,
        )
        checks += gaps
        (item,) = marked((item,), reasons)
    return with_kind_status(i.ob, item)


def _read_sorted(i: _Input, result: ScanResult, depth: int) -> None:
    leg = i.scores
    for hit in result.hits:
        eligible = all(f.matches(hit.metadata) for f in i.scan.request.residual)
        leg.scores[hit.key] = _native(hit) if eligible else None
        if eligible:
            i.hits[hit.key] = hit
            i.ranks[hit.key] = hit.custody.rank
    leg.last = _native(result.hits[-1]) if result.hits else None
    # Fewer rows than asked, or every row the filters match: nothing is left unread.
    leg.exhausted = len(result.hits) < depth or (
        result.total_matches is not None and len(result.hits) >= result.total_matches
    )


def _deeper(scan: ScanNode, depth: int) -> ScanNode:
    if depth == scan.request.k:
        return scan
    return scan.model_copy(update={"request": scan.request.model_copy(update={"k": depth})})


def _lookup(scan: ScanNode, chunk_ids: Sequence[str]) -> ScanNode:
    """Random access: the input's request restricted to the named rows (their identity filter
    pushed), scored exactly; a row the request's filters exclude does not come back."""
    ids = tuple(sorted(set(chunk_ids)))
    request = scan.request.model_copy(
        update={
            "k": len(ids),
            "pushed": (*scan.request.pushed, Filter(field="chunk_id", op=FilterOp.IN, values=ids)),
            "params": {**scan.request.params, "access": "random"},
        }
    )
    return scan.model_copy(update={"request": request, "planned_gaps": ()})


def _union_gaps(union: str, fetched: Sequence[Gap], planned: Sequence[Gap]) -> list[Gap]:
    """Gaps of the union's own deeper reads belong to the union: each input's obligation was
    already answered (and recorded) in full, so they are charged where they shortened an answer."""
    return [
        g.model_copy(update={"obligation": union, "detail": f"{g.obligation}: {g.detail}"})
        for g in fetched
        if g not in planned
    ]


def _candidates(legs: Sequence[LegScores]) -> list[str]:
    """Every key some input holds (a known score that is not ``None``), sorted."""
    return sorted({key for leg in legs for key, score in leg.scores.items() if score is not None})


def _native(hit: Hit) -> float:
    """A hit's native score as its receipt and its retained response write it (canonical), so
    a replayed fusion adds up the very same numbers as the live one (I8)."""
    return float(canonical_float(hit.custody.score))


def _num(value: float) -> str:
    return f"{value:.6f}"


def _rounds(n: int) -> str:
    return f"{n} {'round' if n == 1 else 'rounds'}"
