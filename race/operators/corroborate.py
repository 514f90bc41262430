"""``corroborate``: evidence counts as corroborated only with enough distinct origin
components of the source-dependence graph — retriever agreement is not independence (I13)."""

from __future__ import annotations

from collections.abc import Sequence

from planner import RRF, CorroborateOp, OperatorNode
from race.context import RunContext
from race.fusion import fuse
from race.legs import failure_detail
from race.outcome import Outcome, gap
from rsc import EvidenceStatus, Gap, GapKind


def corroborate(node: OperatorNode, op: CorroborateOp, inputs: Sequence[Outcome], ctx: RunContext) -> Outcome:
    fused = fuse(op.id, inputs, node.fusion or RRF)
    docs = sorted(fused.docs())
    gaps: list[Gap] = list(fused.gaps)
    origins: dict[str, str] = {d: d for d in docs}
    if ctx.lineage is None:
        why = "graph backend not open: source dependence unknown, each document counted as its own origin"
        gaps.append(gap(GapKind.WEAK_SOURCE, op.id, why))
    else:
        try:
            origins = ctx.lineage.origins(docs)
        except Exception as exc:
            why = f"source dependence could not be read ({failure_detail(exc)}); each document counted as its own"
            gaps.append(gap(GapKind.WEAK_SOURCE, op.id, why, "graph"))
    items = tuple(i.replace(origin=origins.get(i.doc_id, i.doc_id)) for i in fused.items)
    distinct = tuple(sorted({i.origin or i.key for i in items}))
    if len(distinct) >= op.min_independent:
        items = tuple(i if i.stale else i.with_status(EvidenceStatus.CORROBORATED_FACT) for i in items)
    else:
        gaps.append(
            gap(
                GapKind.WEAK_SOURCE,
                op.id,
                f"corroborate {op.id} needs {op.min_independent} independent origins; "
                f"{len(docs)} documents come from {len(distinct)} ({', '.join(distinct) or 'none'})",
            )
        )
    return fused.replace(items=items, gaps=tuple(gaps), origins=distinct)
