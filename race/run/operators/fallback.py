"""``fallback``: stages in order, the next only when the previous one failed (error, timeout,
ineligibility); the answer is the first that did not fail, with the failures' gaps, and the
fallback's own receipt says which stage failed and which one answered."""

from __future__ import annotations

from planner import FallbackOp, OperatorNode
from race.run.context import RunContext
from race.run.outcome import Outcome, gap
from rsc import Gap, GapKind


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
    own = tuple(_failed_stage(op.id, stage, answered) for stage in ran[:-1])
    failures = tuple(g for o in ran[:-1] for g in o.gaps)
    return answered.replace(
        node=op.id, gaps=(*failures, *own, *answered.gaps), origins=None, opposition=None, note=None
    )


def _failed_stage(node: str, stage: Outcome, answered: Outcome) -> Gap:
    failure = next((g for g in stage.gaps if g.kind is not GapKind.NOT_NEEDED), None)
    kind = failure.kind if failure is not None else GapKind.BACKEND_ERROR
    why = f"{failure.kind.value}: {failure.detail}" if failure is not None else "no answer"
    then = f"answered by stage {answered.node}" if not answered.failed else "no stage answered"
    # The failure itself counts where it happened; here it only explains the fallback's path.
    return gap(kind, node, f"fallback {node}: stage {stage.node} failed ({why}); {then}", caveat=not answered.failed)
