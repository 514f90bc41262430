"""RSC capability matching: which contract may serve which obligation, and with what loss.

For every (obligation, contract) pair a ``Match`` says whether the contract is eligible,
how each hard filter would be translated (pushed exactly, pushed into a filtered ANN with
a declared recall, left as a residual postfilter, or impossible), the best search
coverage the scan can reach, the egress verdict (I15), model calls and early-stop access.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from planner.logical import LogicalPlan, Obligation
from rsc import (
    Contract,
    ContractEgress,
    Egress,
    FilterSupportClass,
    GapKind,
    Record,
    SearchCoverage,
    UnknownFilterField,
    Version,
    VersionRange,
    VersionRangeError,
    weakest,
)

LossKind = Literal["pushed_exact", "pushed_ann", "residual_postfilter", "impossible"]


class FilterLoss(Record):
    field: str
    filter: str
    translation: LossKind
    recall: float | None = None
    detail: str


class Match(Record):
    obligation: str
    rsc: str
    rsc_id: str
    backend: str
    eligible: bool
    rejected_because: tuple[str, ...] = ()
    reject_gap: GapKind | None = None
    losses: tuple[FilterLoss, ...] = ()
    reach: SearchCoverage
    egress: Literal["allowed", "denied"]
    model_calls: int
    early_stop: bool


def known_filter_fields(contracts: Sequence[Contract]) -> frozenset[str]:
    return frozenset(field for c in contracts for field in c.filters)


def check_filter_fields(plan: LogicalPlan, contracts: Sequence[Contract], *, where: str = "plan") -> None:
    """A filter on a field that no contract knows is an input error, not a quiet miss."""
    known = known_filter_fields(contracts)
    for ob in plan.obligations:
        for flt in (*ob.hard_filters, *ob.soft_filters):
            if flt.field not in known:
                raise UnknownFilterField(
                    f"obligation {ob.id!r} filters on unknown field {flt.field!r} (known: {', '.join(sorted(known))})",
                    where=where,
                )
    for op in plan.operators:
        for flt in getattr(op, "filters", ()):
            if flt.field not in known:
                raise UnknownFilterField(f"operator {op.id!r} filters on unknown field {flt.field!r}", where=where)


def pinned_contracts(plan: LogicalPlan, contracts: Sequence[Contract], *, where: str = "plan") -> tuple[Contract, ...]:
    """The contracts a plan may use: for a pinned rsc_id, only versions inside the range.

    Where several versions of one rsc_id are known, the highest admissible one serves.
    A pin that no known version satisfies fails closed.
    """
    by_id: dict[str, list[Contract]] = {}
    for c in contracts:
        by_id.setdefault(c.rsc_id, []).append(c)
    for rsc_id, text in sorted(plan.contracts.items()):
        if rsc_id not in by_id:
            raise VersionRangeError(f"pinned contract {rsc_id!r} is not known", where=f"{where}: contracts.{rsc_id}")
        rng = VersionRange.parse(text, where=f"{where}: contracts.{rsc_id}")
        if not any(rng.contains(c.semver) for c in by_id[rsc_id]):
            versions = ", ".join(sorted(c.version for c in by_id[rsc_id]))
            raise VersionRangeError(
                f"no version of {rsc_id} ({versions}) is inside the pinned range {text!r}",
                where=f"{where}: contracts.{rsc_id}",
            )
    chosen = []
    for rsc_id in sorted(by_id):
        candidates = by_id[rsc_id]
        if rsc_id in plan.contracts:
            rng = VersionRange.parse(plan.contracts[rsc_id])
            candidates = [c for c in candidates if rng.contains(c.semver)]
        chosen.append(max(candidates, key=lambda c: Version.parse(c.version)))
    return tuple(chosen)


def match(ob: Obligation, contract: Contract) -> Match:
    reasons: list[str] = []
    gap: GapKind | None = None
    if ob.query_class not in contract.query_classes:
        reasons.append(f"query class {ob.query_class.value} is not among {[q.value for q in contract.query_classes]}")
        gap = gap or GapKind.NO_ELIGIBLE_BACKEND
    if ob.kind not in contract.obligation_kinds:
        reasons.append(f"obligation kind {ob.kind.value} is not served")
        gap = gap or GapKind.NO_ELIGIBLE_BACKEND
    if not set(ob.query.parts()) & set(contract.query_parts):
        reasons.append(f"query has {list(ob.query.parts())}; contract needs one of {list(contract.query_parts)}")
        gap = gap or GapKind.NO_ELIGIBLE_BACKEND
    if ob.allow_contracts and contract.rsc_id not in ob.allow_contracts:
        reasons.append(f"not in the obligation's allow_contracts {list(ob.allow_contracts)}")
        gap = gap or GapKind.NO_ELIGIBLE_BACKEND
    egress: Literal["allowed", "denied"] = "allowed"
    if ob.egress is Egress.LOCAL and contract.egress is ContractEgress.REMOTE:
        egress = "denied"
        reasons.append("egress: obligation is local-only and this contract is remote")
        gap = gap or GapKind.EGRESS_DENIED
    losses: list[FilterLoss] = []
    reach = contract.coverage.best_reach()
    for flt in ob.hard_filters:
        support = contract.filter_support(flt.field)
        desc = flt.describe()
        if support.support is FilterSupportClass.UNSUPPORTED or flt.op not in support.ops:
            why = (
                "unsupported" if support.support is FilterSupportClass.UNSUPPORTED else f"op {flt.op.value} unsupported"
            )
            losses.append(FilterLoss(field=flt.field, filter=desc, translation="impossible", detail=why))
            reasons.append(f"hard filter {desc}: {why}")
            gap = gap or GapKind.UNSUPPORTED_FILTER
        elif support.support is FilterSupportClass.POSTFILTER_ONLY:
            losses.append(
                FilterLoss(
                    field=flt.field,
                    filter=desc,
                    translation="residual_postfilter",
                    detail="applied after top-k: never exhaustive, may return fewer than k",
                )
            )
            reach = weakest(reach, SearchCoverage.HEURISTIC)
        elif support.support is FilterSupportClass.NATIVE_FILTERED_ANN:
            losses.append(
                FilterLoss(
                    field=flt.field,
                    filter=desc,
                    translation="pushed_ann",
                    recall=support.recall,
                    detail=f"filtered ANN ({support.profile}), measured recall {support.recall}",
                )
            )
            reach = weakest(reach, SearchCoverage.HEURISTIC)
        else:
            losses.append(
                FilterLoss(field=flt.field, filter=desc, translation="pushed_exact", detail="exact prefilter")
            )
    if reach.rank < ob.required_coverage.rank and not reasons:
        reasons.append(f"reaches {reach.value} coverage; obligation requires {ob.required_coverage.value}")
        gap = gap or (
            GapKind.POSTFILTER_ONLY_FILTER
            if any(loss.translation == "residual_postfilter" for loss in losses)
            else GapKind.NO_ELIGIBLE_BACKEND
        )
    return Match(
        obligation=ob.id,
        rsc=contract.ref,
        rsc_id=contract.rsc_id,
        backend=contract.backend,
        eligible=not reasons,
        rejected_because=tuple(reasons),
        reject_gap=gap,
        losses=tuple(losses),
        reach=reach,
        egress=egress,
        model_calls=contract.model_calls,
        early_stop=contract.early_stop.sorted_access and contract.early_stop.random_access,
    )
