"""ScanContract: one scan alternative per contract matched against an obligation."""

from __future__ import annotations

from functools import partial

from planner.cost import known_selectivity
from planner.memo import Alternative, GroupContext
from planner.physical import ScanNode
from rsc import (
    UNCALIBRATED,
    UNFILTERED,
    Contract,
    CoverageClaim,
    ExpectedRecall,
    Filter,
    FilterOp,
    Gap,
    GapKind,
    GapSeverity,
    Query,
    ScanRequest,
    SearchCoverage,
    bucket_of,
)

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
            contract, k=ob.k, pushed=tr.pushed, residual=tr.residual, ref=verdict.ref, key=tr, query=ob.query
        )
        expected = expected_recall(contract, tr.pushed + tr.residual, group)
        short = recall_shortfall(ob.min_recall, contract, expected)
        alternative = Alternative(
            rule=RULE,
            rsc=verdict.ref,
            strategy=verdict.strategy,
            cost=est.cost_ms,
            reach=tr.reach,
            losses=tr.losses,
            model_calls=model_calls_of(contract, ob.query),
            eligible=verdict.eligible and short is None,
            rejected_because=verdict.rejected_because + ((short,) if short else ()),
            estimate=est,
        )
        if verdict.eligible and short is None:
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
                    expected_recall=expected,
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
    expected_recall: ExpectedRecall | None = None,
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
        model_calls=model_calls_of(contract, ob.query),
        cost=round(cost, 6),
        deadline_ms=min(deadline, group.budget.deadline_ms),
        expected_recall=expected_recall,
    )


def expected_recall(contract: Contract, pushed: tuple[Filter, ...], group: GroupContext) -> ExpectedRecall | None:
    """What an approximate contract promises for a request with these hard filters (pushed and
    residual alike: the calibration measured the filtered top-k): the bound of the bucket their
    selectivity falls in (known from value counts, else the lowest bound). A contract with no
    calibration of this index generation promises nothing: the recall it ships with was
    measured elsewhere."""
    if contract.coverage.claim is not CoverageClaim.APPROXIMATE:
        return None
    filters = tuple(f for f in pushed if f.field != "chunk_id")
    stats = group.cost_model.stats.backends.get(contract.backend)
    sel = known_selectivity(stats, filters) if filters else 1.0
    if contract.calibration is None:
        ob = group.obligation
        bucket = UNFILTERED if not filters else bucket_of(sel) or "unknown selectivity"
        k = ob.k if ob is not None else 1
        return ExpectedRecall(recall=None, bucket=bucket, queries=0, k=k, calibration=UNCALIBRATED)
    return contract.calibration.expected(sel, [leaf.field for f in filters for leaf in f.leaves()])


def recall_shortfall(min_recall: float | None, contract: Contract, expected: ExpectedRecall | None) -> str | None:
    """Why an approximate contract cannot serve an obligation's ``min_recall``, if it cannot."""
    if min_recall is None or contract.coverage.claim is not CoverageClaim.APPROXIMATE:
        return None
    if expected is None or expected.calibration == UNCALIBRATED:
        return f"min_recall {min_recall:g}: no recall was calibrated for {contract.ref} on this index"
    if expected.recall is None:
        return f"min_recall {min_recall:g}: recall of bucket {expected.bucket} was not measured"
    if expected.recall < min_recall:
        return (
            f"min_recall {min_recall:g}: calibrated lower bound {expected.recall:.3f} "
            f"(bucket {expected.bucket}, {expected.queries} queries) is below it"
        )
    return None


def _filter_order(f: Filter) -> tuple[str, str, str]:
    return (f.field, f.op.value, f.describe() if f.op is not FilterOp.IN else repr(sorted(map(str, f.values))))


def model_calls_of(contract: Contract, query: Query) -> int:
    """The model calls a scan makes: none when the caller brings the query's vector (a leg of
    another embedder refuses it rather than embed), the contract's per query otherwise (I10)."""
    return 0 if query.vector is not None else contract.model_calls
