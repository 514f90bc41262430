"""ScanContract: one scan alternative per contract matched against an obligation."""

from __future__ import annotations

from planner.cost import estimate_scan
from planner.memo import Alternative, GroupContext, contract_strategy
from planner.physical import ScanNode
from rsc import Filter, FilterOp, Gap, GapKind, GapSeverity, ScanRequest, SearchCoverage

RULE = "ScanContract"


def scan_contract(group: GroupContext) -> tuple[Alternative, ...]:
    ob = group.obligation
    if ob is None:
        return ()
    out = []
    for m in group.matches:
        contract = group.contract(m.rsc)
        pushed = tuple(
            f for f, loss in zip(ob.hard_filters, m.losses, strict=True) if loss.translation != "residual_postfilter"
        )
        residual = tuple(
            f for f, loss in zip(ob.hard_filters, m.losses, strict=True) if loss.translation == "residual_postfilter"
        )
        est = estimate_scan(contract, k=ob.k, pushed=pushed, stats=group.stats)
        implementation = None
        if m.eligible:
            implementation = build_scan(group, m.rsc, pushed=pushed, residual=residual, cost=est.cost_ms, reach=m.reach)
        out.append(
            Alternative(
                rule=RULE,
                rsc=m.rsc,
                strategy=contract_strategy(contract),
                cost=round(est.cost_ms, 6),
                reach=m.reach,
                losses=m.losses,
                model_calls=m.model_calls,
                eligible=m.eligible,
                rejected_because=m.rejected_because,
                implementation=implementation,
            )
        )
    return tuple(out)


def build_scan(
    group: GroupContext,
    rsc: str,
    *,
    pushed: tuple[Filter, ...],
    residual: tuple[Filter, ...],
    cost: float,
    reach: SearchCoverage,
    extra_params: dict[str, str | int | float | bool] | None = None,
) -> ScanNode:
    ob = group.obligation
    assert ob is not None
    contract = group.contract(rsc)
    gaps = tuple(
        Gap(
            kind=GapKind.POSTFILTER_ONLY_FILTER,
            obligation=ob.id,
            backend=contract.backend,
            detail=f"hard filter {f.describe()} is applied after the top-{ob.k} candidates ({contract.ref}); "
            "the search cannot be exhaustive and coverage is at most heuristic",
            severity=GapSeverity.CAVEAT,
        )
        for f in residual
    )
    request = ScanRequest(
        obligation=ob.id,
        rsc_id=contract.rsc_id,
        rsc_version=contract.version,
        backend=contract.backend,
        mode=contract.mode,
        query=ob.query,
        k=ob.k,
        pushed=tuple(sorted(pushed, key=_filter_order)),
        residual=tuple(sorted(residual, key=_filter_order)),
        params=dict(sorted((extra_params or {}).items())),
    )
    deadline = ob.deadline_ms or group.budget.leg_timeout_ms
    return ScanNode(
        node=ob.id,
        group=group.group_id,
        rsc=contract.ref,
        request=request,
        reach=reach,
        planned_gaps=gaps,
        model_calls=contract.model_calls,
        cost=round(cost, 6),
        deadline_ms=min(deadline, group.budget.deadline_ms),
    )


def _filter_order(f: Filter) -> tuple[str, str, str]:
    return (f.field, f.op.value, f.describe() if f.op is not FilterOp.IN else repr(sorted(map(str, f.values))))
