"""OrderCascadeByCost: a cascade of equivalent stages run strongest reach first, then cheapest.

A cascade runs its next stage only when the previous one was insufficient. When every
stage is the same obligation in all but the contracts it may use (``allow_contracts``, a
strategy or a deadline), any stage can go first without changing what the cascade asks
for; the stage whose chosen implementation reaches the strongest coverage goes first (a cheaper,
weaker stage that sufficed would lower what the receipt covers), and among stages of equal
reach the one expected to be cheapest. This is a
physical revision: the stages keep their chosen implementations, so every obligation keeps
its required coverage; a stage without one (unsatisfiable, or short of its required
coverage) stops the revision. Stages that are not equivalent are never reordered, and the
rejected alternative says which fields differ.
"""

from __future__ import annotations

from planner.memo import Alternative, GroupContext
from planner.operators import CascadeOp
from planner.physical import OperatorNode, UnsatisfiableNode
from planner.rules.cascade_stages import not_equivalent, reach_first_order
from planner.rules.implement_operator import early_stop_verdict
from rsc import OperatorKind, weakest

RULE = "OrderCascadeByCost"


def order_cascade_by_cost(group: GroupContext) -> tuple[Alternative, ...]:
    op = group.operator_of(group.node_id)
    if not isinstance(op, CascadeOp) or len(op.inputs) < 2:
        return ()
    children = [group.chosen_children[i] for i in op.inputs]
    costs = [c.cost for c in children]
    in_plan_order = costs[0] + 0.5 * sum(costs[1:])
    reasons = not_equivalent(op, group)
    if not reasons:
        for stage, child in zip(op.inputs, children, strict=True):
            ob = group.obligation_of(stage)
            assert ob is not None
            if isinstance(child.implementation, UnsatisfiableNode) or child.reach.rank < ob.required_coverage.rank:
                required = ob.required_coverage.value
                reasons.append(f"stage {stage} has no implementation reaching its required {required}")
    # A stage of stronger reach runs before a weaker one whatever they cost: the first stage
    # that suffices answers, so running a cheaper, weaker one first would lower what the
    # receipt covers where the plan order kept it. Costs order stages of equal reach.
    by_cost = sorted(range(len(children)), key=lambda i: (costs[i], i))
    order = reach_first_order(children)
    by_reach = order != by_cost
    if not reasons and order == list(range(len(children))):
        if by_reach:
            reasons.append("stages are already in order of reach (stronger first), then expected cost")
        else:
            reasons.append("stages are already in order of expected cost")
    if reasons:
        return (
            Alternative(
                rule=RULE,
                cost=round(in_plan_order, 6),
                reach=weakest(),
                eligible=False,
                rejected_because=tuple(reasons),
            ),
        )
    ordered = [children[i] for i in order]
    # Same formula as ImplementOperator: later stages run only sometimes, so count at half.
    cost = ordered[0].cost + 0.5 * sum(c.cost for c in ordered[1:])
    verdict = early_stop_verdict(op, ordered, group, None)
    stages = " -> ".join(f"{op.inputs[i]} ({costs[i]:.3f} ms)" for i in order)
    return (
        Alternative(
            rule=RULE,
            cost=round(cost, 6),
            # The stages keep their implementations, so the cascade keeps its coverage.
            reach=weakest(*(c.reach for c in children)),
            model_calls=sum(c.model_calls for c in children),
            eligible=True,
            early_stop=verdict,
            revision=f"equivalent cascade stages run in order of {'reach (stronger first), then ' if by_reach else ''}"
            f"expected cost: {stages}"
            f" (plan order {', '.join(op.inputs)}); every stage keeps its implementation and required coverage",
            implementation=OperatorNode(
                node=op.id,
                group=group.group_id,
                op=OperatorKind.CASCADE,
                children=tuple(c.implementation for c in ordered if c.implementation is not None),
                early_stop=verdict,
            ),
        ),
    )
