"""``union``: everything its inputs found, fused; with ``k``, the best ``k`` of the fusion."""

from __future__ import annotations

from planner import RRF, OperatorNode, UnionOp
from race.context import RunContext
from race.fusion import fuse
from race.outcome import Outcome
from race.threshold import score_union


async def union(node: OperatorNode, op: UnionOp, ctx: RunContext) -> Outcome:
    if node.fusion is not None and node.fusion.method == "score_sum":
        return await score_union(node, op, ctx)
    inputs = await ctx.inputs(node.children)
    return fuse(op.id, inputs, node.fusion or RRF, top_k=op.k)
