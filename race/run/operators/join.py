"""``join``: left evidence whose document has a ``via`` edge to a document the right input found."""

from __future__ import annotations

from collections.abc import Sequence

from planner import JoinOp, OperatorNode
from race.run.context import RunContext
from race.run.legs import failure_detail
from race.run.outcome import Item, Outcome, gap
from rsc import EvidenceStatus, GapKind, SearchCoverage, SupportClosure, weakest, weakest_closure


def join(node: OperatorNode, op: JoinOp, inputs: Sequence[Outcome], ctx: RunContext) -> Outcome:
    left, right = inputs
    below = (*left.gaps, *right.gaps)
    if ctx.lineage is None:
        why = f"join {op.id} needs the graph backend for relation {op.via!r}; it is not open"
        return _failed(op.id, (*below, gap(GapKind.BACKEND_ERROR, op.id, why)))
    try:
        related = ctx.lineage.related(sorted(left.docs()), op.via, op.direction)
    except Exception as exc:
        why = f"join {op.id}: relation {op.via!r} could not be read ({failure_detail(exc)})"
        return _failed(op.id, (*below, gap(GapKind.BACKEND_ERROR, op.id, why, "graph")))
    right_docs = right.docs()
    arrow = "->" if op.direction == "out" else "<-"
    joined: list[Item] = []
    for item in left.items:
        targets = sorted(t for t in related.get(item.doc_id, ()) if t in right_docs)
        if not targets:
            continue
        found_by = [o for t in targets for r in right.items if r.doc_id == t for o in r.obligations]
        joined.append(
            item.replace(
                obligations=found_by,
                statuses=(EvidenceStatus.DERIVED_RELATION,),
                relations=[f"{op.via} {arrow} {t}" for t in targets],
            )
        )
    return Outcome(
        op.id,
        tuple(joined),
        weakest(left.coverage, right.coverage),
        weakest_closure(left.closure, right.closure),
        below,
        failed=left.failed or right.failed,
    )


def _failed(node: str, gaps: Sequence[object]) -> Outcome:
    return Outcome(node, (), SearchCoverage.UNKNOWN, SupportClosure.PARTIAL, tuple(gaps), failed=True)  # type: ignore[arg-type]
