"""``oppose``: support and refutation legs side by side, fused by RRF, with how thoroughly
refutation was searched (I12): no defeater found is never "no defeater exists"."""

from __future__ import annotations

from collections.abc import Sequence

from planner import RRF, OperatorNode, OpposeOp
from race.context import RunContext
from race.fusion import fuse
from race.outcome import Outcome, gap
from rsc import EvidenceStatus, GapKind


def oppose(node: OperatorNode, op: OpposeOp, inputs: Sequence[Outcome], ctx: RunContext) -> Outcome:
    support, refutation = inputs
    refuting = refutation.replace(
        items=tuple(i.with_status(EvidenceStatus.CONFLICTING_EVIDENCE) for i in refutation.items)
    )
    fused = fuse(op.id, (support, refuting), node.fusion or RRF)
    gaps = fused.gaps
    if not refutation.current:
        detail = (
            f"no refuting evidence found by {refutation.node} within a {refutation.coverage.value} search; "
            "this is not evidence that no defeater exists"
        )
        gaps = (*gaps, gap(GapKind.MISSING_EVIDENCE, op.id, detail, caveat=True))
    return fused.replace(gaps=gaps, opposition=refutation.coverage)
