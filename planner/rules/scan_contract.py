"""ScanContract: one scan alternative per contract matched against an obligation."""

from __future__ import annotations

from functools import partial

from planner.memo import Alternative, GroupContext
from planner.physical import ScanNode
from rsc import Filter, FilterOp, Gap, GapKind, GapSeverity, ScanRequest, SearchCoverage

RULE = "ScanContract"


def scan_contract(group: GroupContext) -> tuple[Alternative, ...]:
    ob = group.obligation
    if ob is None:
        return ()
    out = []
    unreadable: list[str] = []
    for contract in group.contracts:
        if ob.query_class not in contract.query_classes:
            # Not an alternative at all: summarized in one line below instead of one each.
            unreadable.append(contract.ref)
            continue
        verdict = group.matcher.check(ob, contract)
        tr = verdict.translation
        est = group.cost_model.estimate(
            contract, k=ob.k, pushed=tr.pushed, residual=tr.residual, ref=verdict.ref, key=tr
        )
        alternative = Alternative(
            rule=RULE,
            rsc=verdict.ref,
            strategy=verdict.strategy,
            cost=est.cost_ms,
            reach=tr.reach,
            losses=tr.losses,
            model_calls=contract.model_calls,
            eligible=verdict.eligible,
            rejected_because=verdict.rejected_because,
            estimate=est,
        )
        if verdict.eligible:
            alternative = group.defer(
                alternative,
                partial(
                    build_scan,
                    group,
                    verdict.ref,
                    pushed=tr.pushed,
                    residual=tr.residual,
                    cost=est.cost_ms,
                    reach=tr.reach,
                ),
            )
        out.append(alternative)
    if unreadable:
        out.append(
            Alternative(
                rule=RULE,
                cost=0.0,
                reach=SearchCoverage.UNKNOWN,
                eligible=False,
                rejected_because=(
                    f"query class {ob.query_class.value} is served by none of {', '.join(sorted(unreadable))}",
                ),
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
