"""RSC capability matching: which contract may serve which obligation, and with what loss.

For every (obligation, contract) pair a ``Match`` says whether the contract is eligible,
how each hard filter would be translated (pushed exactly, pushed into a filtered ANN with
a declared recall, left as a residual postfilter, or impossible), the best search
coverage the scan can reach, the egress verdict (I15), model calls and early-stop access.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from planner.logical import LogicalPlan
from planner.operators import Obligation
from rsc import (
    CanonicalFloat,
    Contract,
    ContractEgress,
    Egress,
    Filter,
    FilterOp,
    FilterSupport,
    FilterSupportClass,
    GapKind,
    QueryClass,
    Record,
    ScoreKind,
    SearchCoverage,
    Strategy,
    UnknownFilterField,
    Version,
    VersionRange,
    VersionRangeError,
    weakest,
)
from rsc.suggest import did_you_mean

LossKind = Literal["pushed_exact", "pushed_ann", "residual_postfilter", "impossible"]


class FilterLoss(Record):
    field: str
    """The field filtered on (an ``any_of`` group's fields, comma-separated)."""
    filter: str
    """The filter, as text."""
    translation: LossKind
    """How the contract applies it: ``pushed_exact``, ``pushed_ann`` (inside an approximate index),
    ``residual_postfilter`` (after ranking) or ``impossible``."""
    recall: CanonicalFloat | None = None
    """``pushed_ann``: the recall the contract measured with this filter."""
    detail: str
    """What the translation loses, in words."""


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
        for flt in (leaf for f in (*ob.hard_filters, *ob.soft_filters) for leaf in f.leaves()):
            if flt.field not in known:
                raise UnknownFilterField(
                    f"obligation {ob.id!r} filters on unknown field {flt.field!r}{did_you_mean(flt.field, known)}"
                    f" (known: {', '.join(sorted(known))})",
                    where=where,
                )
    for op in plan.operators:
        for flt in (leaf for f in getattr(op, "filters", ()) for leaf in f.leaves()):
            if flt.field not in known:
                raise UnknownFilterField(
                    f"operator {op.id!r} filters on unknown field {flt.field!r}{did_you_mean(flt.field, known)}"
                    f" (known: {', '.join(sorted(known))})",
                    where=where,
                )


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
            hint = did_you_mean(rsc_id, by_id)
            place = f"{where}: contracts.{rsc_id}"
            raise VersionRangeError(f"pinned contract {rsc_id!r} is not known{hint}", where=place)
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


_UNSUPPORTED = FilterSupport(support=FilterSupportClass.UNSUPPORTED, ops=())


@dataclass(frozen=True, slots=True, eq=False)
class Translation:
    """An obligation's hard filters as one contract would apply them (I4).

    Compared and hashed by identity: a ``Matcher`` makes one per (contract, filters).
    """

    losses: tuple[FilterLoss, ...]
    reach: SearchCoverage
    pushed: tuple[Filter, ...]
    residual: tuple[Filter, ...]
    impossible: tuple[str, ...]


def translate(
    contract: Contract,
    filters: tuple[Filter, ...],
    losses_seen: dict[tuple[object, ...], FilterLoss] | None = None,
) -> Translation:
    """``losses_seen`` shares one ``FilterLoss`` between contracts with the same support for a field."""
    losses = []
    impossible = []
    reach = contract.coverage.best_reach()
    measured_here = contract.calibration is not None
    for flt in filters:
        support = contract.filters.get(flt.field, _UNSUPPORTED)
        if flt.op is FilterOp.ANY_OF:
            loss = group_loss(contract, flt, calibrated=measured_here)
        elif losses_seen is None:
            loss = filter_loss(support, flt, calibrated=measured_here)
        else:
            key = (support.support, support.ops, support.profile, support.recall, measured_here, flt)
            found = losses_seen.get(key)
            if found is None:
                found = losses_seen.setdefault(key, filter_loss(support, flt, calibrated=measured_here))
            loss = found
        losses.append(loss)
        if loss.translation == "impossible":
            impossible.append(f"hard filter {loss.filter}: {loss.detail}")
        elif loss.translation != "pushed_exact":
            # A postfilter after top-k, or a filtered ANN, is never exhaustive (I4).
            reach = weakest(reach, SearchCoverage.HEURISTIC)
    return Translation(
        losses=tuple(losses),
        reach=reach,
        pushed=tuple(f for f, loss in zip(filters, losses, strict=True) if loss.translation != "residual_postfilter"),
        residual=tuple(f for f, loss in zip(filters, losses, strict=True) if loss.translation == "residual_postfilter"),
        impossible=tuple(impossible),
    )


@dataclass(frozen=True, slots=True)
class _Facts:
    """What matching reads from one contract, worked out once."""

    ref: str
    classes: str
    parts: str
    remote: bool
    early_stop: bool
    strategy: Strategy


class Verdict(NamedTuple):
    """What ``match`` decides for one (obligation, contract), before it becomes a ``Match``."""

    contract: Contract
    ref: str
    strategy: Strategy
    eligible: bool
    rejected_because: tuple[str, ...]
    reject_gap: GapKind | None
    translation: Translation
    egress: Literal["allowed", "denied"]
    early_stop: bool

    @property
    def reach(self) -> SearchCoverage:
        return self.translation.reach


class Matcher:
    """``match`` for one compile, with what does not depend on the obligation worked out once.

    Contracts are told apart by ``ref``, unique among the contracts one plan may use; each
    (contract, hard filters) translation is made once.
    """

    def __init__(self) -> None:
        self._facts: dict[str, _Facts] = {}
        self._translations: dict[tuple[str, tuple[Filter, ...]], Translation] = {}
        self._of_obligation: dict[tuple[str, str], tuple[tuple[Filter, ...], Translation]] = {}
        self._losses: dict[tuple[object, ...], FilterLoss] = {}

    def facts(self, contract: Contract) -> _Facts:
        ref = contract.ref
        found = self._facts.get(ref)
        if found is None:
            found = self._facts[ref] = _Facts(
                ref=ref,
                classes=str([q.value for q in contract.query_classes]),
                parts=str(list(contract.query_parts)),
                remote=contract.egress is ContractEgress.REMOTE,
                early_stop=contract.early_stop.sorted_access and contract.early_stop.random_access,
                strategy=contract_strategy(contract),
            )
        return found

    def translation(self, contract: Contract, filters: tuple[Filter, ...], *, ref: str = "") -> Translation:
        key = (ref or contract.ref, filters)
        found = self._translations.get(key)
        if found is None:
            found = self._translations[key] = translate(contract, filters, self._losses)
        return found

    def check(self, ob: Obligation, contract: Contract) -> Verdict:
        facts = self.facts(contract)
        reasons: list[str] = []
        gap: GapKind | None = None
        if ob.query_class not in contract.query_classes:
            # Nothing else about a contract matters to an obligation it cannot even read.
            return Verdict(
                contract=contract,
                ref=facts.ref,
                strategy=facts.strategy,
                eligible=False,
                rejected_because=(f"query class {ob.query_class.value} is not among {facts.classes}",),
                reject_gap=GapKind.NO_ELIGIBLE_BACKEND,
                translation=self.translation(contract, (), ref=facts.ref),
                egress="denied" if facts.remote and ob.egress is Egress.LOCAL else "allowed",
                early_stop=facts.early_stop,
            )
        if ob.kind not in contract.obligation_kinds:
            reasons.append(f"obligation kind {ob.kind.value} is not served")
            gap = GapKind.NO_ELIGIBLE_BACKEND
        parts = ob.query.parts()
        if not any(part in contract.query_parts for part in parts):
            reasons.append(f"query has {list(parts)}; contract needs one of {facts.parts}")
            gap = GapKind.NO_ELIGIBLE_BACKEND
        if ob.allow_contracts and contract.rsc_id not in ob.allow_contracts:
            reasons.append(f"not in the obligation's allow_contracts {list(ob.allow_contracts)}")
            gap = GapKind.NO_ELIGIBLE_BACKEND
        egress: Literal["allowed", "denied"] = "allowed"
        if facts.remote and ob.egress is Egress.LOCAL:
            egress = "denied"
            reasons.append("egress: obligation is local-only and this contract is remote")
            gap = gap or GapKind.EGRESS_DENIED
        # An obligation is checked against every contract, sometimes twice: find its filters'
        # translation by obligation id while they are the very same tuple, by content otherwise.
        seen = self._of_obligation.get((facts.ref, ob.id))
        if seen is not None and seen[0] is ob.hard_filters:
            tr = seen[1]
        else:
            tr = self.translation(contract, ob.hard_filters, ref=facts.ref)
            self._of_obligation[(facts.ref, ob.id)] = (ob.hard_filters, tr)
        if tr.impossible:
            reasons += tr.impossible
            gap = gap or GapKind.UNSUPPORTED_FILTER
        if tr.reach.rank < ob.required_coverage.rank and not reasons:
            reasons.append(f"reaches {tr.reach.value} coverage; obligation requires {ob.required_coverage.value}")
            gap = GapKind.POSTFILTER_ONLY_FILTER if tr.residual else GapKind.NO_ELIGIBLE_BACKEND
        return Verdict(
            contract=contract,
            ref=facts.ref,
            strategy=facts.strategy,
            eligible=not reasons,
            rejected_because=tuple(reasons),
            reject_gap=gap,
            translation=tr,
            egress=egress,
            early_stop=facts.early_stop,
        )

    def match(self, ob: Obligation, contract: Contract) -> Match:
        verdict = self.check(ob, contract)
        return Match(
            obligation=ob.id,
            rsc=verdict.ref,
            rsc_id=contract.rsc_id,
            backend=contract.backend,
            eligible=verdict.eligible,
            rejected_because=verdict.rejected_because,
            reject_gap=verdict.reject_gap,
            losses=verdict.translation.losses,
            reach=verdict.reach,
            egress=verdict.egress,
            model_calls=0 if ob.query.vector is not None else contract.model_calls,
            early_stop=verdict.early_stop,
        )


def match(ob: Obligation, contract: Contract) -> Match:
    """Whether ``contract`` may serve ``ob``, how its hard filters translate, and what it can claim."""
    return Matcher().match(ob, contract)


def filter_loss(support: FilterSupport, flt: Filter, *, calibrated: bool = True) -> FilterLoss:
    """How one hard filter translates under one field's support class (I4). A filtered ANN's
    recall is a promise only where it was ``calibrated`` on the index itself; the figure a
    shipped contract carries was measured elsewhere, and is named as such."""
    desc = flt.describe()
    if support.support is FilterSupportClass.UNSUPPORTED or flt.op not in support.ops:
        why = "unsupported" if support.support is FilterSupportClass.UNSUPPORTED else f"op {flt.op.value} unsupported"
        return FilterLoss(field=flt.field, filter=desc, translation="impossible", detail=why)
    if support.support is FilterSupportClass.POSTFILTER_ONLY:
        return FilterLoss(
            field=flt.field,
            filter=desc,
            translation="residual_postfilter",
            detail="applied after top-k: never exhaustive, may return fewer than k",
        )
    if support.support is FilterSupportClass.NATIVE_FILTERED_ANN and not calibrated:
        return FilterLoss(
            field=flt.field,
            filter=desc,
            translation="pushed_ann",
            detail=f"filtered ANN ({support.profile}), not calibrated on this index: nothing promised "
            f"(the contract's recall {support.recall} was measured elsewhere)",
        )
    if support.support is FilterSupportClass.NATIVE_FILTERED_ANN:
        return FilterLoss(
            field=flt.field,
            filter=desc,
            translation="pushed_ann",
            recall=support.recall,
            detail=f"filtered ANN ({support.profile}), calibrated recall {support.recall} (lower bound on this index)",
        )
    return FilterLoss(field=flt.field, filter=desc, translation="pushed_exact", detail="exact prefilter")


_STRENGTH: dict[str, int] = {"impossible": 0, "residual_postfilter": 1, "pushed_ann": 2, "pushed_exact": 3}


def group_loss(contract: Contract, group: Filter, *, calibrated: bool = True) -> FilterLoss:
    """How an ``any_of`` group translates: as its weakest member. Every member's field must
    list ``any_of`` among its ops (the backend can take that field inside an OR); a member
    the contract cannot apply makes the group impossible, one it applies only after ranking
    makes the whole group a postfilter. A group pushed into a filtered ANN promises no recall:
    the contract measured recall field by field, never for an OR of fields."""
    desc = group.describe()
    members = []
    for leaf in group.any_of:
        support = contract.filters.get(leaf.field, _UNSUPPORTED)
        if support.support is not FilterSupportClass.UNSUPPORTED and FilterOp.ANY_OF not in support.ops:
            why = f"{leaf.field}: op any_of unsupported (the field cannot be filtered inside an OR)"
            return FilterLoss(field=leaf.field, filter=desc, translation="impossible", detail=why)
        members.append(filter_loss(support, leaf, calibrated=calibrated))
    weakest_member = min(members, key=lambda loss: _STRENGTH[loss.translation])
    fields = ",".join(sorted({leaf.field for leaf in group.any_of}))
    if weakest_member.translation == "impossible":
        detail = f"{weakest_member.field}: {weakest_member.detail}"
        return FilterLoss(field=fields, filter=desc, translation="impossible", detail=detail)
    if weakest_member.translation == "pushed_ann":
        detail = "filtered ANN over an OR of fields: no recall measured for the group, nothing promised"
        return FilterLoss(field=fields, filter=desc, translation="pushed_ann", detail=detail)
    return weakest_member.model_copy(update={"field": fields, "filter": desc})


def contract_strategy(contract: Contract) -> Strategy:
    """The strategy a contract implements, from what it declares."""
    if contract.score_kind is ScoreKind.EXACT_MATCH:
        return Strategy.EXACT
    if contract.score_kind is ScoreKind.BM25:
        return Strategy.LEXICAL
    if contract.score_kind in (ScoreKind.COSINE_DISTANCE, ScoreKind.L2_DISTANCE):
        return Strategy.VECTOR
    if contract.score_kind is ScoreKind.HOPS:
        return Strategy.STRUCTURAL if QueryClass.SYMBOL_RELATION in contract.query_classes else Strategy.GRAPH
    return Strategy.LEXICAL
