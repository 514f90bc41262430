"""``freshen``: stale evidence of one input marked (and moved last) or dropped (I16)."""

from __future__ import annotations

from collections.abc import Sequence

from planner import FreshenOp, OperatorNode
from race.run.context import RunContext
from race.run.freshness import current_first, marked, stale_reasons
from race.run.outcome import Outcome, gap
from rsc import GapKind, SupportClosure, weakest_closure


def freshen(node: OperatorNode, op: FreshenOp, inputs: Sequence[Outcome], ctx: RunContext) -> Outcome:
    (child,) = inputs
    reasons, checks = stale_reasons(
        child.items, as_of=op.as_of, max_age_days=op.max_age_days, lineage=ctx.lineage, node=op.id, roles=ctx.roles
    )
    gaps = (*child.gaps, *checks)
    if not reasons:
        return child.replace(node=op.id, gaps=gaps)
    detail = "; ".join(sorted(set(reasons.values())))
    items = marked(child.items, reasons)
    if op.mode == "drop":
        items = tuple(i for i in items if not i.stale)
        why = f"freshen {op.id} dropped stale evidence: {detail}"
        stale = gap(GapKind.STALE_EVIDENCE, op.id, why, caveat=bool(items))
    else:
        items = current_first(items)
        stale = gap(GapKind.STALE_EVIDENCE, op.id, f"freshen {op.id} marked stale evidence: {detail}", caveat=True)
    closure = weakest_closure(child.closure, SupportClosure.STALE)
    return child.replace(node=op.id, items=items, gaps=(*gaps, stale), closure=closure)
