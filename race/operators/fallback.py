"""``fallback``: stages in order, the next only when the previous one failed (error, timeout,
ineligibility); the answer is the first that did not fail, with the failures' gaps."""

from __future__ import annotations

from planner import FallbackOp, OperatorNode
from race.context import RunContext
from race.outcome import Outcome


async def fallback(node: OperatorNode, op: FallbackOp, ctx: RunContext) -> Outcome:
    ran: list[Outcome] = []
    for child in node.children:
        outcome = await ctx.evaluate(child)
        ran.append(outcome)
        if not outcome.failed:
            break
    for later in node.children[len(ran) :]:
        ctx.skip(later, f"fallback {op.id}: stage {ran[-1].node} answered without error")
    answered = ran[-1]
    failures = tuple(g for o in ran[:-1] for g in o.gaps)
    return answered.replace(node=op.id, gaps=(*failures, *answered.gaps), origins=None, opposition=None, note=None)
