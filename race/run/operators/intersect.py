"""``intersect``: the fused evidence of documents that every input found."""

from __future__ import annotations

from collections.abc import Sequence

from planner import RRF, IntersectOp, OperatorNode
from race.run.context import RunContext
from race.run.fusion import fuse
from race.run.outcome import Outcome


def intersect(node: OperatorNode, op: IntersectOp, inputs: Sequence[Outcome], ctx: RunContext) -> Outcome:
    fused = fuse(op.id, inputs, node.fusion or RRF)
    common = frozenset.intersection(*(i.docs() for i in inputs)) if inputs else frozenset()
    return fused.replace(
        items=tuple(item for item in fused.items if item.doc_id in common),
        failed=any(i.failed for i in inputs),
    )
