"""``corroborate``: evidence counts as corroborated only with enough distinct origin
components of the source-dependence graph — retriever agreement is not independence (I13).

Only current evidence brings an origin (I16), and where the plan states a relevance floor for
an input, only its hits that clear the floor; the receipt says which origins were left out."""

from __future__ import annotations

from collections.abc import Sequence

from planner import RRF, CorroborateOp, OperatorNode, RelevanceFloor
from race.run.context import RunContext
from race.run.fusion import fuse
from race.run.legs import failure_detail
from race.run.outcome import Outcome, gap
from rsc import EvidenceStatus, Gap, GapKind, Hit, ScoreKind

# Score kinds where a smaller native score is more relevant.
_SMALLER_IS_BETTER = frozenset({ScoreKind.COSINE_DISTANCE, ScoreKind.L2_DISTANCE, ScoreKind.HOPS})


def corroborate(node: OperatorNode, op: CorroborateOp, inputs: Sequence[Outcome], ctx: RunContext) -> Outcome:
    fused = fuse(op.id, inputs, node.fusion or RRF)
    docs = sorted(fused.docs())
    gaps: list[Gap] = list(fused.gaps)
    origins: dict[str, str] = {d: d for d in docs}
    if ctx.lineage is None:
        why = "graph backend not open: source dependence unknown, each document counted as its own origin"
        gaps.append(gap(GapKind.WEAK_SOURCE, op.id, why))
    else:
        try:
            origins = {**origins, **ctx.lineage.origins(docs)}
        except Exception as exc:
            why = f"source dependence could not be read ({failure_detail(exc)}); each document counted as its own"
            gaps.append(gap(GapKind.WEAK_SOURCE, op.id, why, "graph"))
    items = tuple(i.replace(origin=origins.get(i.doc_id, i.doc_id)) for i in fused.items)
    counted = _counted(op, inputs)
    counting = [i for i in items if i.key in counted and not i.stale]
    distinct = tuple(sorted({i.origin or i.key for i in counting}))
    left_out = sorted({i.origin or i.key for i in items} - set(distinct))
    stale = sorted({i.origin or i.key for i in items if i.stale} - set(distinct))
    floors = "; ".join(_describe(f) for f in op.floors) or "none stated: every current origin returned counts"
    rule = f"origins of current evidence only; relevance floors: {floors}"
    if left_out:
        below = sorted(set(left_out) - set(stale))
        parts = [f"stale: {', '.join(stale)}"] if stale else []
        parts += [f"below the relevance floor: {', '.join(below)}"] if below else []
        why = f"corroborate {op.id} left out {len(left_out)} {'origin' if len(left_out) == 1 else 'origins'}"
        gaps.append(gap(GapKind.WEAK_SOURCE, op.id, f"{why} ({'; '.join(parts)})", caveat=True))
    if len(distinct) >= op.min_independent:
        keys = {i.key for i in counting}
        items = tuple(i.with_status(EvidenceStatus.CORROBORATED_FACT) if i.key in keys else i for i in items)
    else:
        gaps.append(
            gap(
                GapKind.WEAK_SOURCE,
                op.id,
                f"corroborate {op.id} needs {op.min_independent} independent origins; "
                f"{_documents(len({i.doc_id for i in counting}))} from {len(distinct)} "
                f"({', '.join(distinct) or 'none'})",
            )
        )
    return fused.replace(items=items, gaps=tuple(gaps), origins=distinct, note=rule)


def _counted(op: CorroborateOp, inputs: Sequence[Outcome]) -> set[str]:
    """The keys whose origins may count: every item of an input without a floor, and the
    items of an input with one that clear it."""
    floors = {f.input: f for f in op.floors}
    keys: set[str] = set()
    for outcome in inputs:
        floor = floors.get(outcome.node)
        for rank, item in enumerate(outcome.items, start=1):
            if floor is None or _clears(floor, rank, item.hits):
                keys.add(item.key)
    return keys


def _clears(floor: RelevanceFloor, rank: int, hits: Sequence[Hit]) -> bool:
    if floor.top_n is not None and rank > floor.top_n:
        return False
    if floor.native_score is None:
        return True
    return any(_as_relevant(h, floor.native_score) for h in hits)


def _as_relevant(hit: Hit, bound: float) -> bool:
    score = float(hit.custody.score)
    return score <= bound if hit.custody.score_kind in _SMALLER_IS_BETTER else score >= bound


def _describe(floor: RelevanceFloor) -> str:
    parts = [f"top {floor.top_n}"] if floor.top_n is not None else []
    if floor.native_score is not None:
        parts.append(f"native score as relevant as {floor.native_score:g}")
    return f"{floor.input}: {' and '.join(parts)}"


def _documents(n: int) -> str:
    return "1 document comes" if n == 1 else f"{n} documents come"
