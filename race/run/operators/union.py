"""``union``: everything its inputs found, fused; with ``k``, the best ``k`` of the fusion.

A score-sum union ranks its inputs' scans again from their hits, so where an input obligation
collapses copies (``race.run.collapse``) the union's fused ranking is collapsed the same way."""

from __future__ import annotations

from planner import RRF, OperatorNode, ScanNode, UnionOp
from race.run.collapse import collapse, groups_of
from race.run.context import RunContext
from race.run.fusion import fuse
from race.run.outcome import Outcome
from race.run.threshold import score_union


async def union(node: OperatorNode, op: UnionOp, ctx: RunContext) -> Outcome:
    if node.fusion is not None and node.fusion.method == "score_sum":
        outcome = await score_union(node, op, ctx)
        modes = {ctx.obligation(c.node).collapse for c in node.children if isinstance(c, ScanNode)}
        for mode in sorted(m for m in modes if m is not None):
            groups, why = groups_of(outcome, mode, ctx, op.id)
            outcome = collapse(outcome, mode, groups) if groups is not None else outcome
            outcome = outcome.replace(gaps=(*outcome.gaps, why)) if why is not None else outcome
        return outcome
    inputs = await ctx.inputs(node.children)
    return fuse(op.id, inputs, node.fusion or RRF, top_k=op.k)
