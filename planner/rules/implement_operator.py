"""ImplementOperator: an operator over the best alternatives of its input groups."""

from __future__ import annotations

from planner.logical import RefineOp
from planner.memo import Alternative, GroupContext
from planner.physical import RRF, EarlyStopVerdict, HybridNode, OperatorNode, ScanNode, verdict_of
from rsc import OperatorKind, SearchCoverage, weakest

RULE = "ImplementOperator"
_CONCURRENT = {"union", "intersect", "corroborate", "oppose", "join"}
_FUSING = {"union", "intersect", "corroborate"}


def implement_operator(group: GroupContext) -> tuple[Alternative, ...]:
    op = group.operator_of(group.node_id)
    if op is None:
        return ()
    inputs = op.inputs_of()
    children = [group.chosen_children.get(i) for i in inputs]
    if any(c is None or c.implementation is None for c in children):
        missing = [i for i, c in zip(inputs, children, strict=True) if c is None or c.implementation is None]
        raise AssertionError(f"child groups {missing} were not planned before {op.id}")
    chosen = [c for c in children if c is not None]
    costs = [c.cost for c in chosen]
    # Concurrent inputs cost the slowest one; later stages of a cascade or fallback run only
    # sometimes, so they count at half.
    cost = max(costs) if op.op in _CONCURRENT else costs[0] + 0.5 * sum(costs[1:])
    reach = _reach(op, [c.reach for c in chosen])
    verdict = early_stop_verdict(op.op, chosen, group)
    node = OperatorNode(
        node=op.id,
        group=group.group_id,
        op=OperatorKind(op.op),
        children=tuple(c.implementation for c in chosen if c.implementation is not None),
        fusion=RRF if op.op in _FUSING else None,
        early_stop=verdict,
    )
    return (
        Alternative(
            rule=RULE,
            cost=round(cost, 6),
            reach=reach,
            model_calls=sum(c.model_calls for c in chosen),
            eligible=True,
            early_stop=verdict,
            implementation=node,
        ),
    )


def _reach(op: object, reaches: list[SearchCoverage]) -> SearchCoverage:
    reach = weakest(*reaches)
    if isinstance(op, RefineOp) and op.filters:
        # A filter applied after the input's top-k is a postfilter (I4).
        reach = weakest(reach, SearchCoverage.HEURISTIC)
    return reach


def early_stop_verdict(op: str, chosen: list[Alternative], group: GroupContext) -> EarlyStopVerdict:
    """Fagin's threshold algorithm needs sorted and random access on every leg and a monotone
    aggregation (I9); everything else is evaluated in full."""
    if op not in _FUSING:
        return verdict_of(admissible=False, reason=f"{op} is not a top-k aggregation; full evaluation")
    if op == "corroborate":
        return verdict_of(admissible=False, reason="corroborate counts every origin; full evaluation")
    lacking: list[str] = []
    for alt in chosen:
        impl = alt.implementation
        if isinstance(impl, ScanNode):
            contract = group.contract(impl.rsc)
            if not (contract.early_stop.sorted_access and contract.early_stop.random_access):
                lacking.append(contract.ref)
        elif isinstance(impl, HybridNode):
            for leg in impl.legs:
                contract = group.contract(leg.rsc)
                if not (contract.early_stop.sorted_access and contract.early_stop.random_access):
                    lacking.append(contract.ref)
        else:
            lacking.append(f"{alt.rule} input is not a scan")
    if lacking:
        return verdict_of(
            admissible=False, reason=f"full evaluation: {', '.join(sorted(set(lacking)))} lack sorted+random access"
        )
    return verdict_of(
        admissible=True, reason="every input declares exact sorted and random access; RRF is monotone in ranks"
    )
