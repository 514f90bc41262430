"""Leaves of the physical plan: one obligation answered by a scan, a hybrid or nothing.

A leaf's outcome is its backend answers after residual filters, fused (a hybrid, RRF, cut to
the obligation's ``k``), reordered by soft filters, checked for freshness, marked with the
status its kind gives and, with ``collapse``, one item per text or origin (``race.run.collapse``).
Its receipt says how it was served and what it lacks (I3).
"""

from __future__ import annotations

from collections.abc import Sequence

from planner import HybridNode, Obligation, ScanNode, UnsatisfiableNode
from race.receipt import Fusion, ObligationReceipt
from race.run.collapse import collapse, read_collapsed
from race.run.context import RunContext
from race.run.freshness import current_first, marked, stale_reasons
from race.run.fusion import fuse
from race.run.legs import Answer
from race.run.outcome import Item, Outcome, failed_outcome, gap, sorted_gaps, status_of
from rsc import (
    REFUTING_KINDS,
    EvidenceStatus,
    Gap,
    GapKind,
    GapSeverity,
    ObligationKind,
    ObligationStatus,
    ScanResult,
    SearchCoverage,
    SupportClosure,
    weakest,
    weakest_closure,
)

LeafNode = ScanNode | HybridNode | UnsatisfiableNode


async def answer(node: LeafNode, ctx: RunContext) -> tuple[Outcome, ObligationReceipt]:
    ob = ctx.obligation(node.node)
    if isinstance(node, UnsatisfiableNode):
        outcome = Outcome(ob.id, (), SearchCoverage.UNKNOWN, SupportClosure.PARTIAL, tuple(node.gaps), failed=True)
        return outcome, receipt(ob, outcome, served_by=(), model_calls=0)
    legs: Sequence[ScanNode] = (node,) if isinstance(node, ScanNode) else node.legs
    answers: Sequence[Answer] = await ctx.fetch_all([(leg, ob.id, f"{ob.id}/{leg.rsc}") for leg in legs])

    def build(found: Sequence[Answer], top_k: int | None = ob.k) -> Outcome:
        scan = leg_outcome(node, ob, found[0]) if isinstance(node, ScanNode) else hybrid(node, ob, found, top_k)
        return soft_reorder(ob, scan)

    groups: dict[str, str] | None = None
    if ob.collapse is None:
        outcome = build(answers)
    else:
        # Read as deep as it takes for k groups; collapse after freshness puts current copies first.
        outcome, groups, answers = await read_collapsed(ob, legs, answers, lambda found: build(found, None), ctx)
    outcome = freshness(ob, outcome, ctx)
    status = kind_status(ob)
    # An item given its status already (``result_outcome``) is kept as it is; so is the outcome
    # when every item has it.
    if status is not None and any(status not in i.statuses for i in outcome.items):
        outcome = outcome.replace(
            items=tuple(i if status in i.statuses else with_kind_status(ob, i) for i in outcome.items)
        )
    if ob.collapse is not None and groups is not None:
        outcome = collapse(outcome, ob.collapse, groups)
    served = tuple(leg.rsc for leg in legs)
    # The model calls of the legs that answered: what the receipt counts cannot depend on timing.
    calls = sum(leg.model_calls for leg, found in zip(legs, answers, strict=True) if found.result is not None)
    return outcome, receipt(ob, outcome, served_by=served, model_calls=calls)


def hybrid(node: HybridNode, ob: Obligation, answers: Sequence[Answer], top_k: int | None) -> Outcome:
    """Every leg's answer fused by RRF in leg order, ``top_k`` (the obligation's ``k``, or none
    for a collapsing obligation, which cuts by groups) bounding the result."""
    outcomes = [
        leg_outcome(leg, ob, found).replace(node=f"{ob.id}/{leg.rsc}")
        for leg, found in zip(node.legs, answers, strict=True)
    ]
    fused = fuse(ob.id, outcomes, node.fusion, top_k=top_k)
    failed = [o for o in outcomes if o.failed]
    if failed and len(failed) < len(outcomes):
        fused = fused.replace(coverage=weakest(fused.coverage, SearchCoverage.PARTIAL_BACKEND))
    return fused.replace(failed=len(failed) == len(outcomes))


def leg_outcome(node: ScanNode, ob: Obligation, found: Answer) -> Outcome:
    """One backend answer as an outcome: residual filters applied, coverage from its gaps."""
    if found.result is None:
        return failed_outcome(ob.id, found.gaps)
    return result_outcome(node, ob, found.result, found.gaps)


def result_outcome(node: ScanNode, ob: Obligation, result: ScanResult, leg_gaps: Sequence[Gap]) -> Outcome:
    request = node.request
    if request.residual:
        hits = [h for h in result.hits if all(f.matches(h.metadata) for f in request.residual)]
    else:
        hits = list(result.hits)
    if node.expected_recall is not None:
        # An approximate hit carries the recall its contract promised for this request
        # (docs/invariants.md#calibrated-approximation).
        promise = {"expected_recall": node.expected_recall}
        hits = [h.model_copy(update={"custody": h.custody.model_copy(update=promise)}) for h in hits]
    gaps = [*leg_gaps, *result.gaps]
    if request.residual and len(hits) < ob.k and len(result.hits) >= ob.k:
        gaps.append(
            gap(
                GapKind.POSTFILTER_ONLY_FILTER,
                ob.id,
                f"{len(hits)} of {len(result.hits)} top candidates survived the postfilter "
                f"({', '.join(f.describe() for f in request.residual)}); fewer than k={ob.k}",
                request.backend,
            )
        )
    coverage, closure = node.reach, SupportClosure.CLOSED
    for g in gaps:
        if g.kind is GapKind.RESOURCE_LIMITED:
            coverage, closure = weakest(coverage, SearchCoverage.PARTIAL_BACKEND), SupportClosure.RESOURCE_LIMITED
        elif g.kind in (GapKind.UNINDEXED_ROWS_SKIPPED, GapKind.SHARD_UNAVAILABLE):
            coverage = weakest(coverage, SearchCoverage.PARTIAL_BACKEND)
            closure = weakest_closure(closure, SupportClosure.PARTIAL)
        elif g.kind is GapKind.POSTFILTER_ONLY_FILTER:
            coverage = weakest(coverage, SearchCoverage.HEURISTIC)
            if g.severity is GapSeverity.SHORTFALL:
                closure = weakest_closure(closure, SupportClosure.PARTIAL)
        elif g.kind is GapKind.BACKEND_ERROR:
            # Malformed hits were dropped: the answer is short by what they would have said.
            coverage = weakest(coverage, SearchCoverage.PARTIAL_BACKEND)
            closure = weakest_closure(closure, SupportClosure.PARTIAL)
        elif g.severity is GapSeverity.SHORTFALL:
            closure = weakest_closure(closure, SupportClosure.PARTIAL)
    if request.mode.startswith("graph"):
        statuses = frozenset({EvidenceStatus.DERIVED_RELATION})
    else:
        # Without a freshness check nothing is marked stale, so the kind's status is given now
        # rather than by a second copy of every item (``with_kind_status``).
        status = kind_status(ob) if ob.freshness is None else None
        statuses = frozenset() if status is None else frozenset({status})
    label, found_by, node_id = f"{ob.id}/{node.rsc}", frozenset({ob.id}), ob.id
    items: dict[str, Item] = {}
    found, new, put = Item.found, object.__new__, object.__setattr__
    for hit in hits:
        key = hit.key
        if key not in items:
            # Built from valid values: what ``Fusion(method="single", node=..., ranks=...)`` makes
            # (``rsc.records.trusted``, its steps inline: a leg makes one per hit).
            fusion = new(Fusion)
            put(
                fusion, "__dict__", {**_SINGLE, "node": node_id, "ranks": {label: hit.custody.rank}, "similarities": {}}
            )
            put(fusion, "__pydantic_fields_set__", set(_SINGLE_SET))
            put(fusion, "__pydantic_extra__", None)
            put(fusion, "__pydantic_private__", None)
            items[key] = found(key, hit, found_by, statuses, fusion)
    return Outcome(ob.id, tuple(items.values()), coverage, closure, tuple(gaps))


_SINGLE = {name: field.get_default(call_default_factory=True) for name, field in Fusion.model_fields.items()}
_SINGLE["method"] = "single"
_SINGLE_SET = frozenset({"method", "node", "ranks"})


def soft_reorder(ob: Obligation, outcome: Outcome) -> Outcome:
    """Soft filters only reorder: more matched filters first, the input's order otherwise."""
    if not ob.soft_filters:
        return outcome

    def matched(item: Item) -> int:
        return sum(1 for f in ob.soft_filters if f.matches(item.hits[0].metadata)) if item.hits else 0

    order = sorted(enumerate(outcome.items), key=lambda p: (-matched(p[1]), p[0]))
    return outcome.replace(items=tuple(item for _, item in order))


def freshness(ob: Obligation, outcome: Outcome, ctx: RunContext) -> Outcome:
    """Stale evidence is kept and marked, and never counts toward a current requirement (I16)."""
    if ob.freshness is None:
        return outcome
    reasons, checks = stale_reasons(
        outcome.items,
        as_of=ob.freshness.as_of,
        max_age_days=ob.freshness.max_age_days,
        lineage=ctx.lineage,
        node=ob.id,
        roles=ctx.roles,
    )
    gaps = (*outcome.gaps, *checks)
    if not reasons:
        return outcome.replace(gaps=gaps)
    items = current_first(marked(outcome.items, reasons))
    detail = "; ".join(sorted(set(reasons.values())))
    stale = gap(
        GapKind.STALE_EVIDENCE,
        ob.id,
        f"stale evidence cannot satisfy the freshness requirement (as of {ob.freshness.as_of}): {detail}",
        caveat=any(not i.stale for i in items),
    )
    return outcome.replace(
        items=items, gaps=(*gaps, stale), closure=weakest_closure(outcome.closure, SupportClosure.STALE)
    )


def with_kind_status(ob: Obligation, item: Item) -> Item:
    """The status an obligation's kind gives what it found; stale and derived items keep theirs."""
    if item.stale or EvidenceStatus.DERIVED_RELATION in item.statuses:
        return item
    status = kind_status(ob)
    return item if status is None else item.with_status(status)


def kind_status(ob: Obligation) -> EvidenceStatus | None:
    if ob.kind in REFUTING_KINDS:
        # Retrieved for a refutation is a candidate: score is not warrant of a conflict.
        return EvidenceStatus.CANDIDATE_REFUTATION
    if ob.kind is ObligationKind.SEEK_SUPPORT:
        return EvidenceStatus.CANDIDATE_FACT
    return None


def receipt(ob: Obligation, outcome: Outcome, *, served_by: tuple[str, ...], model_calls: int) -> ObligationReceipt:
    gaps = list(outcome.gaps)
    if not outcome.failed and not outcome.current:
        gaps.append(
            gap(
                GapKind.MISSING_EVIDENCE,
                ob.id,
                f"no {'current ' if ob.freshness else ''}evidence within a {outcome.coverage.value} search; "
                "omitted is not false",
                caveat=outcome.coverage
                in (SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT, SearchCoverage.BOUNDED_STRUCTURAL),
            )
        )
    return ObligationReceipt(
        id=ob.id,
        kind=ob.kind,
        status=status_of(outcome, gaps, ob.required_coverage),
        required_coverage=ob.required_coverage,
        search_coverage=outcome.coverage,
        support_closure=outcome.closure,
        model_calls=model_calls,
        mandatory=ob.mandatory,
        served_by=served_by,
        evidence_count=len(outcome.items),
        gaps=sorted_gaps(gaps),
    )


def not_attempted(ob: Obligation, reasons: Sequence[str]) -> ObligationReceipt:
    return ObligationReceipt(
        id=ob.id,
        kind=ob.kind,
        status=ObligationStatus.NOT_ATTEMPTED,
        required_coverage=ob.required_coverage,
        search_coverage=SearchCoverage.UNKNOWN,
        support_closure=SupportClosure.PARTIAL,
        model_calls=0,
        mandatory=ob.mandatory,
        gaps=sorted_gaps(gap(GapKind.NOT_NEEDED, ob.id, why, caveat=True) for why in reasons),
    )
