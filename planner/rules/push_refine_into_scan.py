"""PushRefineIntoScan: a refine's filters pushed into its input scan where that is exact.

A refine over a top-k result is a postfilter: at most heuristic, possibly short of k
(I4). When the refine's only input is an obligation served by a scan whose contract
supports every refine filter as ``native_prefilter_exact``, and no other node reads that
obligation, the filters can go into the scan itself and the coverage claim is kept.
"""

from __future__ import annotations

from planner.memo import Alternative, GroupContext
from planner.operators import RefineOp
from planner.physical import OperatorNode, ScanNode, verdict_of
from planner.rules.scan_contract import build_scan, expected_recall
from rsc import OperatorKind, SearchCoverage, weakest

RULE = "PushRefineIntoScan"


def push_refine_into_scan(group: GroupContext) -> tuple[Alternative, ...]:
    op = group.operator_of(group.node_id)
    if not isinstance(op, RefineOp) or not op.filters:
        return ()
    child = group.chosen_children.get(op.input)
    reasons: list[str] = []
    scan = child.implementation if child else None
    if not isinstance(scan, ScanNode):
        reasons.append(f"input {op.input} is not served by a single scan")
    elif group.parents.get(op.input, ()) != (op.id,):
        reasons.append(f"input {op.input} is shared with {[p for p in group.parents.get(op.input, ()) if p != op.id]}")
    else:
        contract = group.contract(scan.rsc)
        for flt in op.filters:
            if not contract.prefilters_exactly(flt):
                classes = sorted({contract.filter_support(leaf.field).support.value for leaf in flt.leaves()})
                reasons.append(f"{contract.ref} cannot prefilter {flt.describe()} exactly ({', '.join(classes)})")
    if reasons or not isinstance(scan, ScanNode) or child is None:
        return (
            Alternative(
                rule=RULE,
                cost=child.cost if child else 0.0,
                reach=weakest(),
                eligible=False,
                rejected_because=tuple(reasons),
            ),
        )
    obligation = group.obligation_of(op.input)
    assert obligation is not None
    sub = type(group)(
        plan=group.plan,
        group_id=scan.group,
        node_id=op.input,
        contracts=group.contracts,
        stats=group.stats,
        budget=group.budget,
        obligation=obligation,
        by_ref=group.by_ref,
        obligations=group.obligations,
        operators=group.operators,
    )
    pushed_scan = build_scan(
        sub,
        scan.rsc,
        pushed=scan.request.pushed + op.filters,
        residual=scan.request.residual,
        cost=scan.cost,
        reach=scan.reach,
        expected_recall=expected_recall(
            sub.contract(scan.rsc), scan.request.pushed + op.filters + scan.request.residual, sub
        ),
    )
    verdict = verdict_of(admissible=False, reason="refine is not a top-k aggregation; full evaluation")
    return (
        Alternative(
            rule=RULE,
            rsc=scan.rsc,
            cost=scan.cost,
            reach=scan.reach,
            model_calls=scan.model_calls,
            eligible=True,
            early_stop=verdict,
            revision=f"refine filters pushed into the scan of its input ({scan.rsc});"
            f" coverage kept at {scan.reach.value}",
            implementation=OperatorNode(
                node=op.id,
                group=group.group_id,
                op=OperatorKind.REFINE,
                children=(pushed_scan,),
                pushed_into_children=True,
                early_stop=verdict,
            ),
        ),
    )


def residual_reach(child_reach: SearchCoverage) -> SearchCoverage:
    """A refine evaluated after its input's top-k is a postfilter: at most heuristic."""
    return weakest(child_reach, SearchCoverage.HEURISTIC)
