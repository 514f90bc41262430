"""``refine``: a residual filter or a reorder over one input.

A filter the planner could not push into the input's scans is applied after the input's
top-k: a postfilter, never an exhaustive filtered search (I4)."""

from __future__ import annotations

from collections.abc import Sequence

from planner import OperatorNode, RefineOp
from race.run.context import RunContext
from race.run.outcome import Item, Outcome, gap
from rsc import GapKind, SearchCoverage, weakest


def refine(node: OperatorNode, op: RefineOp, inputs: Sequence[Outcome], ctx: RunContext) -> Outcome:
    (child,) = inputs
    items = child.items
    gaps = child.gaps
    coverage = child.coverage
    if op.filters and not node.pushed_into_children:
        kept = tuple(i for i in items if i.hits and all(f.matches(i.hits[0].metadata) for f in op.filters))
        coverage = weakest(coverage, SearchCoverage.HEURISTIC)
        described = ", ".join(f.describe() for f in op.filters)
        detail = (
            f"refine {op.id} filters ({described}) applied after the input's top-k: "
            f"{len(kept)} of {len(items)} kept; not an exhaustive filtered search"
        )
        gaps = (*gaps, gap(GapKind.POSTFILTER_ONLY_FILTER, op.id, detail, caveat=True))
        items = kept
    if op.order_by is not None:
        items = _by_date(items, ctx.roles.date, descending=op.order_by == "date_desc")
    return child.replace(node=op.id, items=items, coverage=coverage, gaps=gaps)


def _by_date(items: Sequence[Item], field: str | None, *, descending: bool) -> tuple[Item, ...]:
    """Stable by the field that plays the ``date`` role: items of one date keep the input's
    order, whichever way dates run (all of them, where the schema has no date field)."""

    def date(item: Item) -> str:
        return str(item.hits[0].metadata.get(field, "")) if item.hits and field is not None else ""

    ranked = sorted(enumerate(items), key=lambda p: (date(p[1]), -p[0] if descending else p[0]), reverse=descending)
    return tuple(item for _, item in ranked)
