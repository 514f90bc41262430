"""``oppose``: support and refutation legs side by side, fused by RRF, with how thoroughly
refutation was searched (I12): no defeater found is never "no defeater exists".

What the refutation leg found stays a ``candidate_refutation``; the conflict is established
only for an item both legs found — it is offered as support and as its own defeater."""

from __future__ import annotations

from collections.abc import Sequence

from planner import RRF, OperatorNode, OpposeOp
from race.run.context import RunContext
from race.run.fusion import fuse
from race.run.outcome import Outcome, gap
from rsc import EvidenceStatus, GapKind


def oppose(node: OperatorNode, op: OpposeOp, inputs: Sequence[Outcome], ctx: RunContext) -> Outcome:
    support, refutation = inputs
    fused = fuse(op.id, (support, refutation), node.fusion or RRF)
    refuting = refutation.by_key.keys()
    both = support.by_key.keys() & refuting
    items = tuple(
        i.with_status(EvidenceStatus.CONFLICTING_EVIDENCE if i.key in both else EvidenceStatus.CANDIDATE_REFUTATION)
        if i.key in refuting
        else i
        for i in fused.items
    )
    gaps = fused.gaps
    if not refutation.current:
        detail = (
            f"no refuting evidence found by {refutation.node} within a {refutation.coverage.value} search; "
            "this is not evidence that no defeater exists"
        )
        gaps = (*gaps, gap(GapKind.MISSING_EVIDENCE, op.id, detail, caveat=True))
    return fused.replace(items=items, gaps=gaps, opposition=refutation.coverage)
