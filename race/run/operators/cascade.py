"""``cascade``: stages in order, the next only while the previous one is insufficient —
failed, short of its required coverage, or with fewer than ``min_hits`` current hits."""

from __future__ import annotations

from collections.abc import Sequence

from planner import CascadeOp, OperatorNode, PhysicalNode
from race.run.context import RunContext
from race.run.outcome import Item, Outcome, gap, shortfall
from rsc import GapKind, SearchCoverage, SupportClosure, weakest, weakest_closure


async def cascade(node: OperatorNode, op: CascadeOp, ctx: RunContext) -> Outcome:
    ran: list[Outcome] = []
    sufficient_at: int | None = None
    for i, child in enumerate(node.children):
        outcome = await ctx.evaluate(child)
        ran.append(outcome)
        if sufficient(child, outcome, op.min_hits, ctx):
            sufficient_at = i
            break
    for later in node.children[len(ran) :]:
        ctx.skip(
            later,
            f"cascade {op.id}: stage {ran[-1].node} was sufficient"
            f" (>= {op.min_hits} current hits at required coverage)",
        )
    merged = concat(op.id, ran)
    if sufficient_at is not None:
        return merged.replace(coverage=ran[sufficient_at].coverage, closure=ran[sufficient_at].closure)
    why = f"cascade {op.id}: no stage was sufficient ({len(ran)} run)"
    return merged.replace(gaps=(*merged.gaps, gap(GapKind.MISSING_EVIDENCE, op.id, why)))


def sufficient(child: PhysicalNode, outcome: Outcome, min_hits: int, ctx: RunContext) -> bool:
    if outcome.failed or shortfall(outcome.gaps):
        return False
    required = weakest(*(o.required_coverage for o in ctx.obligations_under(child)))
    return outcome.coverage.rank >= required.rank and len(outcome.current) >= min_hits


def concat(node: str, outcomes: Sequence[Outcome]) -> Outcome:
    """Every stage's items in stage order; an item found again keeps its first position."""
    views: dict[str, list[Item]] = {}
    for outcome in outcomes:
        for item in outcome.items:
            views.setdefault(item.key, []).append(item)
    return Outcome(
        node,
        tuple(Item.merged_all(found) for found in views.values()),
        weakest(*(o.coverage for o in outcomes)) if outcomes else SearchCoverage.UNKNOWN,
        weakest_closure(*(o.closure for o in outcomes)) if outcomes else SupportClosure.PARTIAL,
        tuple(g for o in outcomes for g in o.gaps),
        failed=all(o.failed for o in outcomes),
    )
