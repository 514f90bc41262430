"""Deterministic async execution of a physical plan.

Every leg runs under its own deadline and the plan's; every timeout, cancellation and
error becomes a gap (I7), never an empty list. Children are always combined in plan
order, never in completion order, so the normalized receipt is the same whichever leg
finishes first (I5). Status and coverage are aggregated conservatively (I3).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import anyio

from backends.base import Adapter
from planner import (
    CascadeOp,
    CorroborateOp,
    Explain,
    FallbackOp,
    FreshenOp,
    HybridNode,
    IntersectOp,
    JoinOp,
    LogicalPlan,
    Obligation,
    OperatorNode,
    OpposeOp,
    PhysicalNode,
    RefineOp,
    ScanNode,
    UnionOp,
    UnsatisfiableNode,
    walk,
)
from race.cache import ResultCache
from race.fusion import RRF_K, LegScores, certified, resolved, rrf, score_sum, threshold, to_resolve
from race.receipt import EvidenceItem, Fusion, ObligationReceipt, OperatorReceipt
from rsc import (
    REFUTING_KINDS,
    BackendError,
    BackendTimeout,
    EvidenceStatus,
    Filter,
    FilterOp,
    Gap,
    GapKind,
    GapSeverity,
    Hit,
    ObligationStatus,
    OperatorKind,
    RaceError,
    ScanRequest,
    ScanResult,
    SearchCoverage,
    SupportClosure,
    canonical_float,
    fingerprint,
    weakest,
    weakest_closure,
)

# Stronger statuses win when one evidence unit is reached along several paths.
_STATUS_PRECEDENCE = (
    EvidenceStatus.STALE_EVIDENCE,
    EvidenceStatus.CONFLICTING_EVIDENCE,
    EvidenceStatus.CORROBORATED_FACT,
    EvidenceStatus.CANDIDATE_FACT,
    EvidenceStatus.DERIVED_RELATION,
    EvidenceStatus.RETRIEVED_OBSERVATION,
)
_MAX_DEPTH = 100_000_000
_DEPTH_GROWTH = 4
"""Each round of the threshold algorithm reads this many times deeper: a round's cost is
mostly the backend's fixed per-query work, so fewer, deeper rounds finish sooner."""
_T = TypeVar("_T")
_FAILURE_GAPS = frozenset({GapKind.TIMEOUT, GapKind.CANCELLED, GapKind.BACKEND_ERROR})


class Lineage(Protocol):
    """What the graph backend offers the runtime: source dependence and relations."""

    def origins(self, node_ids: Sequence[str]) -> dict[str, str]: ...

    def related(self, ids: Sequence[str], relation: str, direction: str) -> dict[str, tuple[str, ...]]: ...


@dataclass
class Item:
    key: str
    hits: list[Hit] = field(default_factory=list)
    obligations: set[str] = field(default_factory=set)
    statuses: set[EvidenceStatus] = field(default_factory=set)
    relations: set[str] = field(default_factory=set)
    fusion: Fusion | None = None
    origin: str | None = None

    @property
    def doc_id(self) -> str:
        return self.hits[0].doc_id if self.hits else self.key.split(":", 1)[-1]

    def merged(self, other: Item) -> Item:
        seen = {(h.custody.request, h.custody.rank) for h in self.hits}
        hits = self.hits + [h for h in other.hits if (h.custody.request, h.custody.rank) not in seen]
        return Item(
            key=self.key,
            hits=hits,
            obligations=self.obligations | other.obligations,
            statuses=self.statuses | other.statuses,
            relations=self.relations | other.relations,
            fusion=self.fusion or other.fusion,
            origin=self.origin or other.origin,
        )


@dataclass
class Outcome:
    node: str
    ranking: list[str]
    items: dict[str, Item]
    coverage: SearchCoverage
    closure: SupportClosure
    gaps: list[Gap]
    failed: bool = False

    def ordered(self) -> list[Item]:
        return [self.items[k] for k in self.ranking]


@dataclass
class LegRecord:
    ms: float
    cache: str
    hits: int
    outcome: str


def _gap(kind: GapKind, node: str, detail: str, backend: str | None = None, *, caveat: bool = False) -> Gap:
    return Gap(
        kind=kind,
        obligation=node,
        backend=backend,
        detail=detail,
        severity=GapSeverity.CAVEAT if caveat else GapSeverity.SHORTFALL,
    )


def _status_of(item: Item) -> EvidenceStatus:
    return (
        next(s for s in _STATUS_PRECEDENCE if s in item.statuses)
        if item.statuses
        else EvidenceStatus.RETRIEVED_OBSERVATION
    )


class Executor:
    def __init__(
        self,
        *,
        plan: LogicalPlan,
        explain: Explain,
        adapters: Mapping[str, Adapter],
        generations: Mapping[str, str],
        cache: ResultCache | None = None,
        lineage: Lineage | None = None,
        early_stop: bool = True,
    ) -> None:
        self.plan = plan
        self.explain = explain
        self.adapters = adapters
        self.generations = generations
        self.cache = cache
        self.lineage = lineage
        self.early_stop = early_stop
        self.obligation_receipts: dict[str, ObligationReceipt] = {}
        self.operator_receipts: dict[str, OperatorReceipt] = {}
        self.legs: dict[str, LegRecord] = {}
        self.calls: dict[str, int] = {}
        self.cache_counts = {"hit": 0, "miss": 0}
        self.model_calls_made = 0
        self._limiters = {
            name: anyio.CapacityLimiter(plan.budget.max_concurrency_per_backend) for name in sorted(adapters)
        }
        self._done: dict[str, Outcome] = {}
        self._fetched: dict[str, ScanResult] = {}
        self._early_stop_notes: dict[str, str] = {}
        self._running: dict[str, anyio.Event] = {}
        self._deadline = 0.0

    # -- entry -----------------------------------------------------------------------------

    async def run(self) -> Outcome:
        self._deadline = time.monotonic() + self.plan.budget.deadline_ms / 1000.0
        root = await self._node(self.explain.physical)
        for ob in self.plan.obligations:
            if ob.id not in self.obligation_receipts:
                self._not_attempted(
                    ob, _gap(GapKind.NOT_NEEDED, ob.id, "not reached by the chosen physical plan", caveat=True)
                )
        return root

    def evidence(self, root: Outcome) -> list[EvidenceItem]:
        items = []
        for rank, item in enumerate(root.ordered(), start=1):
            hits = sorted(item.hits, key=lambda h: (h.custody.rsc, h.custody.request, h.custody.rank))
            items.append(
                EvidenceItem(
                    key=item.key,
                    rank=rank,
                    status=_status_of(item),
                    obligations=tuple(sorted(item.obligations)),
                    origin=item.origin,
                    relations=tuple(sorted(item.relations)),
                    hits=tuple(hits),
                    fusion=item.fusion or Fusion(method="single"),
                )
            )
        return items

    # -- dispatch --------------------------------------------------------------------------

    async def _node(self, node: PhysicalNode) -> Outcome:
        # A node shared by several parents runs once; later readers wait for it.
        if node.node in self._done:
            return self._done[node.node]
        if node.node in self._running:
            await self._running[node.node].wait()
            return self._done[node.node]
        event = self._running[node.node] = anyio.Event()
        try:
            if isinstance(node, OperatorNode):
                outcome = await self._operator(node)
            else:
                outcome = await self._obligation(node)
            self._done[node.node] = outcome
        finally:
            event.set()
        return outcome

    async def _gather(self, nodes: Sequence[PhysicalNode]) -> list[Outcome]:
        results: list[Outcome | None] = [None] * len(nodes)

        async def one(i: int, child: PhysicalNode) -> None:
            results[i] = await self._node(child)

        async with anyio.create_task_group() as tg:
            for i, child in enumerate(nodes):
                tg.start_soon(one, i, child)
        return [r for r in results if r is not None]

    # -- leaves ----------------------------------------------------------------------------

    async def _obligation(self, node: ScanNode | HybridNode | UnsatisfiableNode) -> Outcome:
        ob = self.plan.obligation(node.node)
        assert ob is not None, f"physical node {node.node} serves no obligation"
        if isinstance(node, UnsatisfiableNode):
            outcome = Outcome(
                ob.id, [], {}, SearchCoverage.UNKNOWN, SupportClosure.PARTIAL, list(node.gaps), failed=True
            )
            self._record_obligation(ob, outcome, served_by=(), model_calls=0)
            return outcome
        if isinstance(node, ScanNode):
            outcome, model_calls = await self._scan(node, ob)
            served: tuple[str, ...] = (node.rsc,)
        else:
            outcome, model_calls = await self._hybrid(node, ob)
            served = tuple(leg.rsc for leg in node.legs)
        outcome = self._soft_reorder(ob, outcome)
        outcome = self._freshness(ob, outcome)
        self._mark_status(ob, outcome)
        self._record_obligation(ob, outcome, served_by=served, model_calls=model_calls)
        return outcome

    @staticmethod
    def _mark_status(ob: Obligation, outcome: Outcome) -> None:
        status_mark = EvidenceStatus.CANDIDATE_FACT if ob.kind.value == "seek_support" else None
        if ob.kind in REFUTING_KINDS:
            status_mark = EvidenceStatus.CONFLICTING_EVIDENCE
        if status_mark is not None:
            for item in outcome.items.values():
                if (
                    EvidenceStatus.STALE_EVIDENCE not in item.statuses
                    and EvidenceStatus.DERIVED_RELATION not in item.statuses
                ):
                    item.statuses.add(status_mark)

    def _remaining_ms(self) -> float:
        return (self._deadline - time.monotonic()) * 1000.0

    async def _scan(self, scan: ScanNode, ob: Obligation) -> tuple[Outcome, int]:
        result, gaps = await self._fetch(scan, ob, f"{ob.id}/{scan.rsc}")
        if result is None:
            return Outcome(ob.id, [], {}, SearchCoverage.UNKNOWN, _failure_closure(gaps), gaps, failed=True), 0
        return self._leaf_outcome(scan, ob, result, gaps), result.model_calls

    async def _fetch(self, scan: ScanNode, ob: Obligation, label: str) -> tuple[ScanResult | None, list[Gap]]:
        """One request through the result cache, the backend's concurrency limit and the leg and
        plan deadlines; a request already answered in this run is not sent again."""
        request = scan.request
        backend = request.backend
        adapter = self.adapters.get(backend)
        gaps: list[Gap] = list(scan.planned_gaps)
        started = time.monotonic()
        if adapter is None:
            gaps.append(_gap(GapKind.BACKEND_ERROR, ob.id, f"backend {backend!r} is not open in this engine", backend))
            self.legs[label] = LegRecord(0.0, "none", 0, "backend_error")
            return None, gaps
        generation = self.generations.get(backend, "absent")
        cache_key = fingerprint({"request": request, "generation": generation, "caller": self.plan.generations})
        if cache_key in self._fetched:
            return self._fetched[cache_key], gaps
        result = self.cache.get(cache_key) if self.cache is not None else None
        cache_state = "hit" if result is not None else "miss"
        if result is None:
            remaining = self._remaining_ms()
            timeout_ms = min(float(scan.deadline_ms), remaining)
            plan_bound = remaining < scan.deadline_ms
            if timeout_ms <= 0:
                gaps.append(
                    _gap(
                        GapKind.RESOURCE_LIMITED,
                        ob.id,
                        f"plan deadline {self.plan.budget.deadline_ms} ms passed before the leg started",
                        backend,
                    )
                )
                self.legs[label] = LegRecord(0.0, "none", 0, "resource_limited")
                return None, gaps
            self.calls[backend] = self.calls.get(backend, 0) + 1
            try:
                with anyio.fail_after(timeout_ms / 1000.0):
                    result = await self._limited(backend, adapter, request)
            except TimeoutError as exc:
                # A replayed deadline carries the live run's verdict; replay never re-measures time.
                plan_bound = bool(getattr(exc, "plan_bound", plan_bound))
                kind = GapKind.CANCELLED if plan_bound else GapKind.TIMEOUT
                why = (
                    f"cancelled at the plan deadline ({self.plan.budget.deadline_ms} ms)"
                    if plan_bound
                    else f"no answer within the leg deadline of {scan.deadline_ms} ms"
                )
                gaps.append(
                    _gap(kind, ob.id, f"{scan.rsc}: {why}; absence of hits is not absence of evidence", backend)
                )
            except BackendTimeout as exc:
                gaps.append(_gap(GapKind.TIMEOUT, ob.id, f"{scan.rsc}: {exc}", backend))
            except BackendError as exc:
                gaps.append(_gap(GapKind.BACKEND_ERROR, ob.id, f"{scan.rsc}: {exc}", backend))
            except RaceError as exc:
                gaps.append(_gap(GapKind.BACKEND_ERROR, ob.id, f"{scan.rsc}: {exc}", backend))
            if result is not None:
                self.model_calls_made += result.model_calls
                if self.cache is not None and not any(g.kind in _FAILURE_GAPS for g in result.gaps):
                    self.cache.put(cache_key, result)
                    self.cache_counts["miss"] += 1
        else:
            self.cache_counts["hit"] += 1
        elapsed = (time.monotonic() - started) * 1000.0
        if result is None:
            self.legs[label] = LegRecord(round(elapsed, 3), cache_state, 0, gaps[-1].kind.value)
            return None, gaps
        self._fetched[cache_key] = result
        self.legs[label] = LegRecord(round(elapsed, 3), cache_state, len(result.hits), "ok")
        return result, gaps

    async def _limited(self, backend: str, adapter: Adapter, request: ScanRequest) -> ScanResult:
        """``adapter.scan`` within the backend's concurrency limit. A free slot is taken without
        a trip through the event loop; a full limiter waits (and can be cancelled) as usual."""
        limiter = self._limiters[backend]
        try:
            limiter.acquire_nowait()
        except anyio.WouldBlock:
            await limiter.acquire()
        try:
            return await adapter.scan(request)
        finally:
            limiter.release()

    def _leaf_outcome(self, scan: ScanNode, ob: Obligation, result: ScanResult, gaps: list[Gap]) -> Outcome:
        hits = [h for h in result.hits if all(f.matches(h.metadata) for f in scan.request.residual)]
        gaps = gaps + list(result.gaps)
        if scan.request.residual and len(hits) < ob.k and len(result.hits) >= ob.k:
            gaps.append(
                _gap(
                    GapKind.POSTFILTER_ONLY_FILTER,
                    ob.id,
                    f"{len(hits)} of {len(result.hits)} top candidates survived the postfilter "
                    f"({', '.join(f.describe() for f in scan.request.residual)}); fewer than k={ob.k}",
                    scan.request.backend,
                )
            )
        coverage, closure = scan.reach, SupportClosure.CLOSED
        for gap in gaps:
            if gap.kind in (GapKind.RESOURCE_LIMITED,):
                coverage, closure = weakest(coverage, SearchCoverage.PARTIAL_BACKEND), SupportClosure.RESOURCE_LIMITED
            elif gap.kind is GapKind.UNINDEXED_ROWS_SKIPPED:
                coverage, closure = (
                    weakest(coverage, SearchCoverage.PARTIAL_BACKEND),
                    weakest_closure(closure, SupportClosure.PARTIAL),
                )
            elif gap.kind is GapKind.POSTFILTER_ONLY_FILTER:
                coverage = weakest(coverage, SearchCoverage.HEURISTIC)
                if gap.severity is GapSeverity.SHORTFALL:
                    closure = weakest_closure(closure, SupportClosure.PARTIAL)
            elif gap.severity is GapSeverity.SHORTFALL:
                closure = weakest_closure(closure, SupportClosure.PARTIAL)
        items: dict[str, Item] = {}
        ranking: list[str] = []
        derived = scan.request.mode.startswith("graph")
        for hit in hits:
            if hit.key in items:
                items[hit.key].hits.append(hit)
                continue
            item = Item(key=hit.key, hits=[hit], obligations={ob.id})
            if derived:
                item.statuses.add(EvidenceStatus.DERIVED_RELATION)
            item.fusion = Fusion(method="single", ranks={f"{ob.id}/{scan.rsc}": hit.custody.rank})
            items[hit.key] = item
            ranking.append(hit.key)
        return Outcome(ob.id, ranking, items, coverage, closure, gaps)

    async def _hybrid(self, node: HybridNode, ob: Obligation) -> tuple[Outcome, int]:
        results: list[tuple[Outcome, int] | None] = [None] * len(node.legs)

        async def leg(i: int, scan: ScanNode) -> None:
            results[i] = await self._scan(scan, ob)

        async with anyio.create_task_group() as tg:
            for i, scan in enumerate(node.legs):
                tg.start_soon(leg, i, scan)
        done = [r for r in results if r is not None]
        outcomes = [o for o, _ in done]
        model_calls = sum(m for _, m in done)
        labels = [f"{ob.id}/{scan.rsc}" for scan in node.legs]
        fused = self._fuse(ob.id, list(zip(labels, outcomes, strict=True)), node.fusion.k)
        failed = [o for o in outcomes if o.failed]
        if failed and len(failed) < len(outcomes):
            fused.coverage = weakest(fused.coverage, SearchCoverage.PARTIAL_BACKEND)
        fused.failed = len(failed) == len(outcomes)
        return fused, model_calls

    def _fuse(self, node: str, parts: Sequence[tuple[str, Outcome]], k: int = RRF_K) -> Outcome:
        items: dict[str, Item] = {}
        for _, outcome in parts:
            for key in outcome.ranking:
                item = outcome.items[key]
                items[key] = (
                    items[key].merged(item)
                    if key in items
                    else Item(
                        key=item.key,
                        hits=list(item.hits),
                        obligations=set(item.obligations),
                        statuses=set(item.statuses),
                        relations=set(item.relations),
                        origin=item.origin,
                    )
                )
        live = [(label, o.ranking) for label, o in parts if o.ranking]
        if len(live) <= 1:
            ranking = list(live[0][1]) if live else []
            for key in ranking:
                source = next(o for _, o in parts if key in o.items)
                items[key].fusion = source.items[key].fusion
        else:
            ranking, scores, ranks = rrf(live, k)
            for key in ranking:
                items[key].fusion = Fusion(method="rrf", k=k, ranks=ranks[key], score=round(scores[key], 12))
        gaps = [g for _, o in parts for g in o.gaps]
        coverage = weakest(*(o.coverage for _, o in parts)) if parts else SearchCoverage.UNKNOWN
        closure = weakest_closure(*(o.closure for _, o in parts)) if parts else SupportClosure.PARTIAL
        return Outcome(node, ranking, items, coverage, closure, gaps, failed=all(o.failed for _, o in parts))

    def _soft_reorder(self, ob: Obligation, outcome: Outcome) -> Outcome:
        if not ob.soft_filters:
            return outcome
        position = {key: i for i, key in enumerate(outcome.ranking)}

        def matched(key: str) -> int:
            meta = outcome.items[key].hits[0].metadata
            return sum(1 for f in ob.soft_filters if f.matches(meta))

        outcome.ranking = sorted(outcome.ranking, key=lambda key: (-matched(key), position[key]))
        return outcome

    def _is_stale(self, item: Item, as_of: str, max_age_days: int | None) -> str | None:
        meta = item.hits[0].metadata if item.hits else {}
        if str(meta.get("status", "")) in ("superseded", "retracted"):
            return f"{item.doc_id} is {meta['status']}"
        if max_age_days is not None and "date" in meta:
            limit = dt.date.fromisoformat(as_of) - dt.timedelta(days=max_age_days)
            if str(meta["date"]) < limit.isoformat():
                return f"{item.doc_id} dated {meta['date']} is older than {limit.isoformat()}"
        return None

    def _superseded(self, items: Sequence[Item]) -> dict[str, tuple[str, ...]]:
        if self.lineage is None:
            return {}
        docs = sorted({i.doc_id for i in items})
        return {d: by for d, by in self.lineage.related(docs, "supersedes", "in").items() if by}

    def _freshness(self, ob: Obligation, outcome: Outcome) -> Outcome:
        """Stale evidence is kept and marked, and never counts toward a current requirement (I16)."""
        if ob.freshness is None:
            return outcome
        stale = self._mark_stale(outcome, ob.freshness.as_of, ob.freshness.max_age_days)
        if not stale:
            return outcome
        current = [k for k in outcome.ranking if k not in stale]
        detail = "; ".join(sorted(set(stale.values())))
        outcome.gaps.append(
            _gap(
                GapKind.STALE_EVIDENCE,
                ob.id,
                f"stale evidence cannot satisfy the freshness requirement (as of {ob.freshness.as_of}): {detail}",
                caveat=bool(current),
            )
        )
        outcome.closure = weakest_closure(outcome.closure, SupportClosure.STALE)
        outcome.ranking = current + [k for k in outcome.ranking if k in stale]
        return outcome

    def _mark_stale(self, outcome: Outcome, as_of: str, max_age_days: int | None) -> dict[str, str]:
        stale: dict[str, str] = {}
        superseded = self._superseded(outcome.ordered())
        for key in outcome.ranking:
            item = outcome.items[key]
            why = self._is_stale(item, as_of, max_age_days)
            if why is None and item.doc_id in superseded:
                why = f"{item.doc_id} is superseded by {', '.join(superseded[item.doc_id])}"
            if why is not None:
                stale[key] = why
                item.statuses.add(EvidenceStatus.STALE_EVIDENCE)
        return stale

    # -- obligation receipts ---------------------------------------------------------------

    def _record_obligation(
        self, ob: Obligation, outcome: Outcome, *, served_by: tuple[str, ...], model_calls: int
    ) -> None:
        gaps = list(outcome.gaps)
        current = [k for k in outcome.ranking if EvidenceStatus.STALE_EVIDENCE not in outcome.items[k].statuses]
        if not outcome.failed and not current:
            gaps.append(
                _gap(
                    GapKind.MISSING_EVIDENCE,
                    ob.id,
                    f"no {'current ' if ob.freshness else ''}evidence within a {outcome.coverage.value} search; "
                    "omitted is not false",
                    caveat=outcome.coverage is SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT
                    or outcome.coverage is SearchCoverage.BOUNDED_STRUCTURAL,
                )
            )
        if outcome.failed and not outcome.items:
            status = ObligationStatus.UNSATISFIED
        elif outcome.coverage.rank < ob.required_coverage.rank or any(
            g.severity is GapSeverity.SHORTFALL for g in gaps
        ):
            status = ObligationStatus.PARTIAL
        else:
            status = ObligationStatus.SATISFIED
        self.obligation_receipts[ob.id] = ObligationReceipt(
            id=ob.id,
            kind=ob.kind,
            status=status,
            required_coverage=ob.required_coverage,
            search_coverage=outcome.coverage,
            support_closure=outcome.closure,
            model_calls=model_calls,
            mandatory=ob.mandatory,
            served_by=served_by,
            evidence_count=len(outcome.ranking),
            gaps=tuple(_sorted_gaps(gaps)),
        )

    def _not_attempted(self, ob: Obligation, gap: Gap) -> None:
        if ob.id in self.obligation_receipts:
            return
        self.obligation_receipts[ob.id] = ObligationReceipt(
            id=ob.id,
            kind=ob.kind,
            status=ObligationStatus.NOT_ATTEMPTED,
            required_coverage=ob.required_coverage,
            search_coverage=SearchCoverage.UNKNOWN,
            support_closure=SupportClosure.PARTIAL,
            model_calls=0,
            mandatory=ob.mandatory,
            gaps=(gap,),
        )

    def _skip(self, node: PhysicalNode, gap_for: Callable[[str], Gap]) -> None:
        """Mark every obligation under ``node`` not attempted (it was never run)."""
        for item in walk(node):
            if isinstance(item, ScanNode | HybridNode | UnsatisfiableNode):
                ob = self.plan.obligation(item.node)
                if ob is not None and item.node not in self._done:
                    self._not_attempted(ob, gap_for(ob.id))

    # -- operators -------------------------------------------------------------------------

    async def _operator(self, node: OperatorNode) -> Outcome:
        op = self.plan.operator(node.node)
        assert op is not None
        if isinstance(op, CascadeOp):
            outcome = await self._cascade(node, op)
        elif isinstance(op, FallbackOp):
            outcome = await self._fallback(node, op)
        elif isinstance(op, UnionOp) and node.fusion is not None and node.fusion.method == "score_sum":
            outcome = await self._score_union(node, op)
        else:
            children = await self._gather(node.children)
            if isinstance(op, UnionOp):
                outcome = self._fuse(op.id, [(c.node, c) for c in children])
                if op.k is not None:
                    outcome.ranking = outcome.ranking[: op.k]
                    outcome.items = {k: outcome.items[k] for k in outcome.ranking}
            elif isinstance(op, IntersectOp):
                outcome = self._intersect(op, children)
            elif isinstance(op, JoinOp):
                outcome = self._join(op, children)
            elif isinstance(op, RefineOp):
                outcome = self._refine(op, node, children[0])
            elif isinstance(op, CorroborateOp):
                outcome = self._corroborate(op, children)
            elif isinstance(op, OpposeOp):
                outcome = self._oppose(op, children)
            elif isinstance(op, FreshenOp):
                outcome = self._freshen(op, children[0])
            else:  # pragma: no cover - the plan model admits no other operator
                raise AssertionError(f"unknown operator {op!r}")
        self._record_operator(node, outcome)
        return outcome

    def _record_operator(self, node: OperatorNode, outcome: Outcome) -> None:
        own = [g for g in outcome.gaps if g.obligation == node.node]
        if outcome.failed and not outcome.items:
            status = ObligationStatus.UNSATISFIED
        elif any(g.severity is GapSeverity.SHORTFALL for g in outcome.gaps):
            status = ObligationStatus.PARTIAL
        else:
            status = ObligationStatus.SATISFIED
        previous = self.operator_receipts.get(node.node)
        self.operator_receipts[node.node] = OperatorReceipt(
            id=node.node,
            op=node.op,
            status=status,
            search_coverage=outcome.coverage,
            support_closure=outcome.closure,
            opposition_coverage=previous.opposition_coverage if previous else None,
            independent_origins=previous.independent_origins if previous else None,
            early_stop=self._early_stop_notes.get(node.node, node.early_stop.reason),
            gaps=tuple(_sorted_gaps(own)),
        )

    async def _score_union(self, node: OperatorNode, op: UnionOp) -> Outcome:
        """Fuse inputs of one score calibration by the sum of their similarities (I11).

        Each input first answers its own obligation. Every candidate's score on every input is
        then read exactly, by random access where the input's answer did not hold it. With a
        top-k, sorted access goes deeper round by round until Fagin's threshold proves that
        no unread row can enter the top k (I9), or, where early stop is not admissible or is
        switched off, until every input is read to the end (full evaluation). Depths depend
        only on the data, so the receipt does not depend on timing (I5). The deeper reads re-use
        the obligation's query embedding (the adapter keeps it), so they add no model calls.
        """
        fusion = node.fusion
        assert fusion is not None and fusion.score_kind is not None
        children = await self._gather(node.children)
        legs: list[tuple[ScanNode, Obligation]] = []
        for child in node.children:
            ob = self.plan.obligation(child.node)
            assert isinstance(child, ScanNode) and ob is not None, f"score_sum input {child.node} is not a scan"
            legs.append((child, ob))
        failed = [c for c in children if c.failed]
        if failed:
            # A failed input's scores are unknown: the others fuse by rank, and the receipt says why.
            outcome = self._fuse(op.id, [(c.node, c) for c in children])
            outcome.coverage = weakest(outcome.coverage, SearchCoverage.PARTIAL_BACKEND)
            self._early_stop_notes[op.id] = (
                f"not applied: {', '.join(c.node for c in failed)} failed, so their scores are unknown; "
                "the other inputs were fused by RRF"
            )
            if op.k is not None:
                outcome.ranking = outcome.ranking[: op.k]
                outcome.items = {k: outcome.items[k] for k in outcome.ranking}
            return outcome
        kind = fusion.score_kind
        state = [LegScores(label=f"{ob.id}/{scan.rsc}", score_kind=kind) for scan, ob in legs]
        hits: list[dict[str, Hit]] = [{} for _ in legs]
        ranks: list[dict[str, int]] = [{} for _ in legs]
        gaps: list[Gap] = [g for c in children for g in c.gaps]
        top_k = fusion.top_k
        early = top_k is not None and node.early_stop.admissible and self.early_stop
        # Early stop reads deeper by _DEPTH_GROWTH a round; full evaluation jumps to the largest
        # set an input said it matches.
        depth = 0 if top_k is None else max(top_k, *(ob.k for _, ob in legs))  # 0: each input's own answer
        totals_known: list[int] = []
        rounds = random_reads = lookup_rounds = 0
        stop = ""
        while True:
            rounds += 1
            sorted_reads = [
                self._fetch(self._deeper(scan, depth or ob.k), ob, f"{ob.id}/{scan.rsc}@{depth or ob.k}")
                for scan, ob in legs
            ]
            answers = await self._all(sorted_reads)
            for i, ((scan, ob), (result, fetch_gaps)) in enumerate(zip(legs, answers, strict=True)):
                gaps += _union_gaps(op.id, fetch_gaps, scan.planned_gaps)
                if result is None:
                    stop = f"stopped: sorted access to {state[i].label} failed at depth {depth or ob.k}"
                    break
                self._read_sorted(state[i], hits[i], ranks[i], scan, result, depth or ob.k)
                if result.total_matches is not None:
                    totals_known.append(result.total_matches)
            if stop:
                break
            seen = _candidates(state)
            # Random access only for what can still change the top k (all of them without a k);
            # full evaluation reads every input to the end, which leaves nothing to look up.
            while early or top_k is None:
                need = to_resolve(state, seen, top_k)
                if not need:
                    break
                lookup_rounds += 1
                reads, stop = await self._random_access(
                    legs, state, hits, need, gaps, f"{rounds}.{lookup_rounds}", op.id
                )
                random_reads += reads
                if stop:
                    break
            if stop:
                break
            order, totals = score_sum(state, [key for key in seen if resolved(state, key)])
            if top_k is None:
                break
            bound = threshold(state)
            if all(leg.exhausted for leg in state):
                stop = (
                    f"full evaluation: every input read to the end (depth {depth}, {rounds} "
                    f"{'round' if rounds == 1 else 'rounds'})"
                )
                break
            if early and certified(state, seen, top_k):
                kth = _num(totals[order[top_k - 1]])
                stop = (
                    f"threshold algorithm stopped at depth {depth} after {rounds} "
                    f"{'round' if rounds == 1 else 'rounds'}: score {kth} of rank {top_k} > threshold "
                    f"{_num(bound)}; {random_reads} random accesses"
                )
                gaps.append(
                    _gap(
                        GapKind.EARLY_STOP,
                        op.id,
                        f"sorted access read {depth} rows per input (of up to {max(totals_known, default=depth)}); "
                        "no unread row can reach the "
                        f"top {top_k}: its score is at most the threshold {_num(bound)} < {kth}",
                        legs[0][0].request.backend,
                        caveat=True,
                    )
                )
                break
            depth = min(depth * _DEPTH_GROWTH if early else max([depth * 2, *totals_known]), _MAX_DEPTH)
        # Only candidates whose every score is known are ranked; the others cannot reach the top k.
        order, totals = score_sum(state, [key for key in _candidates(state) if resolved(state, key)])
        if top_k is not None:
            order = order[:top_k]
        items = self._score_items(legs, state, hits, ranks, order, totals)
        coverage = weakest(*(c.coverage for c in children))
        closure = weakest_closure(*(c.closure for c in children))
        if stop.startswith("stopped"):
            coverage = weakest(coverage, SearchCoverage.PARTIAL_BACKEND)
            closure = weakest_closure(closure, _failure_closure(gaps))
        if top_k is None:
            stop = node.early_stop.reason
        elif not early and node.early_stop.admissible and not stop.startswith("stopped"):
            stop = f"admissible ({node.early_stop.reason}) but switched off; {stop}"
        elif not node.early_stop.admissible and not stop.startswith("stopped"):
            stop = f"{node.early_stop.reason}; {stop}"
        self._early_stop_notes[op.id] = stop
        return Outcome(op.id, order, items, coverage, closure, gaps)

    async def _random_access(
        self,
        legs: Sequence[tuple[ScanNode, Obligation]],
        state: Sequence[LegScores],
        hits: Sequence[dict[str, Hit]],
        need: Sequence[str],
        gaps: list[Gap],
        tag: str,
        union: str,
    ) -> tuple[int, str]:
        """Read every input's score of the ``need`` keys it has not answered for, all inputs at
        once; return how many keys were asked and, if an input failed, why the union stops."""
        wanted = [[key for key in need if key not in leg.scores and not leg.exhausted] for leg in state]
        chunk_ids = {key: hit.chunk_id for leg_hits in hits for key, hit in leg_hits.items()}
        asked = [(i, keys) for i, keys in enumerate(wanted) if keys]
        lookups = [
            self._fetch(
                self._lookup(legs[i][0], [chunk_ids[k] for k in keys]),
                legs[i][1],
                f"{legs[i][1].id}/{legs[i][0].rsc}#random{tag}",
            )
            for i, keys in asked
        ]
        reads = 0
        for (i, keys), (result, fetch_gaps) in zip(asked, await self._all(lookups), strict=True):
            gaps += _union_gaps(union, fetch_gaps, ())
            reads += len(keys)
            if result is None:
                return reads, f"stopped: random access to {state[i].label} failed"
            residual = legs[i][0].request.residual
            found = {h.key: h for h in result.hits if all(f.matches(h.metadata) for f in residual)}
            for key in keys:
                hit = found.get(key)
                state[i].scores[key] = None if hit is None else _native(hit)
                if hit is not None:
                    hits[i].setdefault(key, hit)
        return reads, ""

    @staticmethod
    def _deeper(scan: ScanNode, depth: int) -> ScanNode:
        if depth == scan.request.k:
            return scan
        return scan.model_copy(update={"request": scan.request.model_copy(update={"k": depth})})

    @staticmethod
    def _lookup(scan: ScanNode, chunk_ids: Sequence[str]) -> ScanNode:
        """Random access: the input's request restricted to the named rows (their identity filter
        pushed), scored exactly; a row the request's filters exclude does not come back."""
        ids = tuple(sorted(set(chunk_ids)))
        request = scan.request.model_copy(
            update={
                "k": len(ids),
                "pushed": (*scan.request.pushed, Filter(field="chunk_id", op=FilterOp.IN, values=ids)),
                "params": {**scan.request.params, "access": "random"},
            }
        )
        return scan.model_copy(update={"request": request, "planned_gaps": ()})

    async def _all(self, calls: Sequence[Awaitable[_T]]) -> list[_T]:
        results: list[_T | None] = [None] * len(calls)

        async def one(i: int, call: Awaitable[_T]) -> None:
            results[i] = await call

        async with anyio.create_task_group() as tg:
            for i, call in enumerate(calls):
                tg.start_soon(one, i, call)
        return [r for r in results if r is not None]

    @staticmethod
    def _read_sorted(
        leg: LegScores,
        hits: dict[str, Hit],
        ranks: dict[str, int],
        scan: ScanNode,
        result: ScanResult,
        depth: int,
    ) -> None:
        for hit in result.hits:
            eligible = all(f.matches(hit.metadata) for f in scan.request.residual)
            leg.scores[hit.key] = _native(hit) if eligible else None
            if eligible:
                hits[hit.key] = hit
                ranks[hit.key] = hit.custody.rank
        leg.last = _native(result.hits[-1]) if result.hits else None
        # Fewer rows than asked, or every row the filters match: nothing is left unread.
        leg.exhausted = len(result.hits) < depth or (
            result.total_matches is not None and len(result.hits) >= result.total_matches
        )

    def _score_items(
        self,
        legs: Sequence[tuple[ScanNode, Obligation]],
        state: Sequence[LegScores],
        hits: Sequence[dict[str, Hit]],
        ranks: Sequence[dict[str, int]],
        order: Sequence[str],
        totals: Mapping[str, float],
    ) -> dict[str, Item]:
        items: dict[str, Item] = {}
        for key in order:
            item: Item | None = None
            for (scan, ob), leg, leg_hits in zip(legs, state, hits, strict=True):
                hit = leg_hits.get(key)
                if hit is None or leg.scores.get(key) is None:
                    continue
                one = self._leg_item(scan, ob, hit)
                item = one if item is None else item.merged(one)
            assert item is not None, f"{key} has a score but no hit"
            item.fusion = Fusion(
                method="score_sum",
                ranks={leg.label: r[key] for leg, r in zip(state, ranks, strict=True) if key in r},
                similarities={leg.label: round(leg.similarity(key), 12) for leg in state},
                score=round(totals[key], 12),
            )
            items[key] = item
        return items

    def _leg_item(self, scan: ScanNode, ob: Obligation, hit: Hit) -> Item:
        """The item one input's hit makes, with the statuses its obligation gives (I16)."""
        outcome = self._leaf_outcome(scan, ob, ScanResult(hits=(hit,), generation=""), [])
        item = outcome.items[hit.key]
        if ob.freshness is not None:
            self._mark_stale(outcome, ob.freshness.as_of, ob.freshness.max_age_days)
        self._mark_status(ob, outcome)
        return item

    async def _cascade(self, node: OperatorNode, op: CascadeOp) -> Outcome:
        ran: list[Outcome] = []
        sufficient_at: int | None = None
        for i, child in enumerate(node.children):
            outcome = await self._node(child)
            ran.append(outcome)
            if self._sufficient(child, outcome, op.min_hits):
                sufficient_at = i
                break
        for later in node.children[len(ran) :]:
            self._skip(
                later,
                lambda ob_id: _gap(
                    GapKind.NOT_NEEDED,
                    ob_id,
                    f"cascade {op.id}: stage {ran[-1].node} was sufficient"
                    f" (>= {op.min_hits} current hits at required coverage)",
                    caveat=True,
                ),
            )
        merged = self._concat(op.id, ran)
        if sufficient_at is not None:
            merged.coverage = ran[sufficient_at].coverage
            merged.closure = ran[sufficient_at].closure
        else:
            merged.gaps.append(
                _gap(GapKind.MISSING_EVIDENCE, op.id, f"cascade {op.id}: no stage was sufficient ({len(ran)} run)")
            )
        return merged

    def _sufficient(self, child: PhysicalNode, outcome: Outcome, min_hits: int) -> bool:
        if outcome.failed or any(g.severity is GapSeverity.SHORTFALL for g in outcome.gaps):
            return False
        required = weakest(*(o.required_coverage for o in self._obligations_under(child)))
        current = [k for k in outcome.ranking if EvidenceStatus.STALE_EVIDENCE not in outcome.items[k].statuses]
        return outcome.coverage.rank >= required.rank and len(current) >= min_hits

    def _obligations_under(self, node: PhysicalNode) -> list[Obligation]:
        obs = []
        for item in walk(node):
            if not isinstance(item, OperatorNode):
                ob = self.plan.obligation(item.node)
                if ob is not None:
                    obs.append(ob)
        return obs

    async def _fallback(self, node: OperatorNode, op: FallbackOp) -> Outcome:
        ran: list[Outcome] = []
        for child in node.children:
            outcome = await self._node(child)
            ran.append(outcome)
            if not outcome.failed:
                break
        for later in node.children[len(ran) :]:
            self._skip(
                later,
                lambda ob_id: _gap(
                    GapKind.NOT_NEEDED,
                    ob_id,
                    f"fallback {op.id}: stage {ran[-1].node} answered without error",
                    caveat=True,
                ),
            )
        answered = ran[-1]
        failure_gaps = [g for o in ran[:-1] for g in o.gaps]
        result = Outcome(
            op.id,
            list(answered.ranking),
            dict(answered.items),
            answered.coverage,
            answered.closure,
            failure_gaps + list(answered.gaps),
            failed=answered.failed,
        )
        return result

    def _concat(self, node: str, outcomes: Sequence[Outcome]) -> Outcome:
        items: dict[str, Item] = {}
        ranking: list[str] = []
        for outcome in outcomes:
            for key in outcome.ranking:
                if key in items:
                    items[key] = items[key].merged(outcome.items[key])
                else:
                    items[key] = outcome.items[key]
                    ranking.append(key)
        return Outcome(
            node,
            ranking,
            items,
            weakest(*(o.coverage for o in outcomes)),
            weakest_closure(*(o.closure for o in outcomes)),
            [g for o in outcomes for g in o.gaps],
            failed=all(o.failed for o in outcomes),
        )

    def _intersect(self, op: IntersectOp, children: list[Outcome]) -> Outcome:
        fused = self._fuse(op.id, [(c.node, c) for c in children])
        common = (
            set.intersection(*({fused.items[k].doc_id for k in c.ranking} for c in children)) if children else set()
        )
        fused.ranking = [k for k in fused.ranking if fused.items[k].doc_id in common]
        fused.items = {k: fused.items[k] for k in fused.ranking}
        fused.failed = any(c.failed for c in children)
        return fused

    def _join(self, op: JoinOp, children: list[Outcome]) -> Outcome:
        left, right = children
        if self.lineage is None:
            gap = _gap(
                GapKind.BACKEND_ERROR,
                op.id,
                f"join {op.id} needs the graph backend for relation {op.via!r}; it is not open",
            )
            return Outcome(
                op.id,
                [],
                {},
                SearchCoverage.UNKNOWN,
                SupportClosure.PARTIAL,
                left.gaps + right.gaps + [gap],
                failed=True,
            )
        right_docs = {right.items[k].doc_id for k in right.ranking}
        left_docs = sorted({left.items[k].doc_id for k in left.ranking})
        related = self.lineage.related(left_docs, op.via, op.direction)
        ranking, items = [], {}
        for key in left.ranking:
            item = left.items[key]
            targets = sorted(t for t in related.get(item.doc_id, ()) if t in right_docs)
            if targets:
                joined = Item(
                    key=item.key,
                    hits=list(item.hits),
                    obligations=set(item.obligations)
                    | {
                        o
                        for t in targets
                        for k in right.ranking
                        if right.items[k].doc_id == t
                        for o in right.items[k].obligations
                    },
                    statuses=set(item.statuses) | {EvidenceStatus.DERIVED_RELATION},
                    relations=set(item.relations)
                    | {f"{op.via} {'->' if op.direction == 'out' else '<-'} {t}" for t in targets},
                    fusion=item.fusion,
                    origin=item.origin,
                )
                items[key] = joined
                ranking.append(key)
        return Outcome(
            op.id,
            ranking,
            items,
            weakest(left.coverage, right.coverage),
            weakest_closure(left.closure, right.closure),
            left.gaps + right.gaps,
            failed=left.failed or right.failed,
        )

    def _refine(self, op: RefineOp, node: OperatorNode, child: Outcome) -> Outcome:
        ranking = list(child.ranking)
        gaps = list(child.gaps)
        coverage = child.coverage
        if op.filters and not node.pushed_into_children:
            kept = [k for k in ranking if all(_matches(f, child.items[k]) for f in op.filters)]
            coverage = weakest(coverage, SearchCoverage.HEURISTIC)
            gaps.append(
                _gap(
                    GapKind.POSTFILTER_ONLY_FILTER,
                    op.id,
                    f"refine {op.id} filters ({', '.join(f.describe() for f in op.filters)}) applied after the input's "
                    f"top-k: {len(kept)} of {len(ranking)} kept; not an exhaustive filtered search",
                    caveat=True,
                )
            )
            ranking = kept
        if op.order_by is not None:
            position = {k: i for i, k in enumerate(ranking)}
            reverse = op.order_by == "date_desc"

            def date_key(key: str) -> str:
                return str(child.items[key].hits[0].metadata.get("date", "")) if child.items[key].hits else ""

            ranking = sorted(
                ranking, key=lambda k: (date_key(k), -position[k] if reverse else position[k]), reverse=reverse
            )
        return Outcome(
            op.id, ranking, {k: child.items[k] for k in ranking}, coverage, child.closure, gaps, failed=child.failed
        )

    def _corroborate(self, op: CorroborateOp, children: list[Outcome]) -> Outcome:
        fused = self._fuse(op.id, [(c.node, c) for c in children])
        docs = sorted({fused.items[k].doc_id for k in fused.ranking})
        origins = self.lineage.origins(docs) if self.lineage is not None else {d: d for d in docs}
        for key in fused.ranking:
            fused.items[key].origin = origins.get(fused.items[key].doc_id, fused.items[key].doc_id)
        distinct = tuple(sorted({fused.items[k].origin or k for k in fused.ranking}))
        if self.lineage is None:
            fused.gaps.append(
                _gap(
                    GapKind.WEAK_SOURCE,
                    op.id,
                    "graph backend not open: source dependence unknown, each document counted as its own origin",
                )
            )
        if len(distinct) >= op.min_independent:
            for key in fused.ranking:
                if EvidenceStatus.STALE_EVIDENCE not in fused.items[key].statuses:
                    fused.items[key].statuses.add(EvidenceStatus.CORROBORATED_FACT)
        else:
            fused.gaps.append(
                _gap(
                    GapKind.WEAK_SOURCE,
                    op.id,
                    f"corroborate {op.id} needs {op.min_independent} independent origins; "
                    f"{len(docs)} documents come from {len(distinct)} ({', '.join(distinct) or 'none'})",
                )
            )
        self.operator_receipts[op.id] = OperatorReceipt(
            id=op.id,
            op=OperatorKind.CORROBORATE,
            status=ObligationStatus.PARTIAL,
            search_coverage=fused.coverage,
            support_closure=fused.closure,
            independent_origins=distinct,
            early_stop="",
        )
        return fused

    def _oppose(self, op: OpposeOp, children: list[Outcome]) -> Outcome:
        support, refutation = children
        for key in refutation.ranking:
            refutation.items[key].statuses.add(EvidenceStatus.CONFLICTING_EVIDENCE)
        fused = self._fuse(op.id, [(support.node, support), (refutation.node, refutation)])
        current = [k for k in refutation.ranking if EvidenceStatus.STALE_EVIDENCE not in refutation.items[k].statuses]
        if not current:
            fused.gaps.append(
                _gap(
                    GapKind.MISSING_EVIDENCE,
                    op.id,
                    f"no refuting evidence found by {refutation.node} within a {refutation.coverage.value} search; "
                    "this is not evidence that no defeater exists",
                    caveat=True,
                )
            )
        self.operator_receipts[op.id] = OperatorReceipt(
            id=op.id,
            op=OperatorKind.OPPOSE,
            status=ObligationStatus.PARTIAL,
            search_coverage=fused.coverage,
            support_closure=fused.closure,
            opposition_coverage=refutation.coverage,
            early_stop="",
        )
        return fused

    def _freshen(self, op: FreshenOp, child: Outcome) -> Outcome:
        stale = self._mark_stale(child, op.as_of, op.max_age_days)
        gaps = list(child.gaps)
        ranking = list(child.ranking)
        closure = child.closure
        if stale:
            detail = "; ".join(sorted(set(stale.values())))
            if op.mode == "drop":
                ranking = [k for k in ranking if k not in stale]
                gaps.append(
                    _gap(
                        GapKind.STALE_EVIDENCE,
                        op.id,
                        f"freshen {op.id} dropped stale evidence: {detail}",
                        caveat=bool(ranking),
                    )
                )
            else:
                gaps.append(
                    _gap(GapKind.STALE_EVIDENCE, op.id, f"freshen {op.id} marked stale evidence: {detail}", caveat=True)
                )
                ranking = [k for k in ranking if k not in stale] + [k for k in ranking if k in stale]
            closure = weakest_closure(closure, SupportClosure.STALE)
        return Outcome(
            op.id, ranking, {k: child.items[k] for k in ranking}, child.coverage, closure, gaps, failed=child.failed
        )


def _matches(flt: Filter, item: Item) -> bool:
    return bool(item.hits) and flt.matches(item.hits[0].metadata)


def _union_gaps(union: str, fetched: Sequence[Gap], planned: Sequence[Gap]) -> list[Gap]:
    """Gaps of the union's own deeper reads belong to the union: each input's obligation was
    already answered (and recorded) in full, so they are charged where they shortened an answer."""
    return [
        g.model_copy(update={"obligation": union, "detail": f"{g.obligation}: {g.detail}"})
        for g in fetched
        if g not in planned
    ]


def _candidates(legs: Sequence[LegScores]) -> list[str]:
    """Every key some input holds (a known score that is not ``None``), sorted."""
    return sorted({key for leg in legs for key, score in leg.scores.items() if score is not None})


def _native(hit: Hit) -> float:
    """A hit's native score as its receipt and its retained response write it (canonical), so
    a replayed fusion adds up the very same numbers as the live one (I8)."""
    return float(canonical_float(hit.custody.score))


def _num(value: float) -> str:
    return f"{value:.6f}"


def _failure_closure(gaps: Sequence[Gap]) -> SupportClosure:
    return (
        SupportClosure.RESOURCE_LIMITED
        if any(g.kind is GapKind.RESOURCE_LIMITED for g in gaps)
        else (SupportClosure.PARTIAL)
    )


def _sorted_gaps(gaps: Sequence[Gap]) -> list[Gap]:
    unique = {fingerprint(g): g for g in gaps}
    return sorted(unique.values(), key=lambda g: (g.obligation, g.kind.value, g.backend or "", g.detail))
