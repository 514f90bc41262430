"""Equivalent cascade stages and the order they run in (``OrderCascadeByCost``), shared with
``ImplementOperator``, which must not keep a plan order that runs a weaker stage before an
equivalent stronger one."""

from __future__ import annotations

from collections.abc import Sequence

from planner.memo import Alternative, GroupContext
from planner.operators import CascadeOp, Obligation
from planner.physical import UnsatisfiableNode

# What makes two stages the same request; they may differ only in how they are served.
EQUIVALENCE_FIELDS = (
    "kind",
    "query",
    "query_class",
    "hard_filters",
    "soft_filters",
    "k",
    "freshness",
    "egress",
    "mandatory",
    "required_coverage",
)


def not_equivalent(op: CascadeOp, group: GroupContext) -> list[str]:
    stages: list[Obligation] = []
    for stage in op.inputs:
        ob = group.obligation_of(stage)
        if ob is None:
            return [f"stage {stage} is an operator, not an obligation"]
        stages.append(ob)
    first = stages[0]
    reasons = []
    for ob in stages[1:]:
        differ = [name for name in EQUIVALENCE_FIELDS if getattr(ob, name) != getattr(first, name)]
        if differ:
            reasons.append(f"stage {ob.id} differs from {first.id} in {', '.join(differ)}")
    return reasons


def reach_first_order(children: Sequence[Alternative]) -> list[int]:
    """Stage positions in run order: stronger reach first, then cheaper, then plan order."""
    return sorted(range(len(children)), key=lambda i: (-children[i].reach.rank, children[i].cost, i))


def weaker_stage_first(op: CascadeOp, group: GroupContext) -> str | None:
    """Why the plan order of an equivalent cascade loses coverage, if it does: a stage of
    weaker reach runs before an equivalent one of stronger reach, each implemented at its
    required coverage (then ``OrderCascadeByCost`` runs the stronger first)."""
    if len(op.inputs) < 2 or not_equivalent(op, group):
        return None
    children = [group.chosen_children[i] for i in op.inputs]
    for stage, child in zip(op.inputs, children, strict=True):
        ob = group.obligation_of(stage)
        if ob is None or isinstance(child.implementation, UnsatisfiableNode):
            return None
        if child.reach.rank < ob.required_coverage.rank:
            return None
    for i, first in enumerate(children):
        for j in range(i + 1, len(children)):
            if children[j].reach.rank > first.reach.rank:
                return (
                    f"stage {op.inputs[i]} (reach {first.reach.value}) would run before the equivalent stage "
                    f"{op.inputs[j]} (reach {children[j].reach.value}): the stronger stage runs first"
                )
    return None
