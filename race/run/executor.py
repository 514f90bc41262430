"""Deterministic async execution of a physical plan.

The executor walks the physical tree: a leaf answers its obligation (``race.run.obligations``),
an operator node is dispatched through the ``OPERATORS`` table (``race.run.operators``). Each
node runs once and its ``Outcome`` is immutable, so a node shared by several parents is one
value for all of them; children are combined in plan order, never completion order, so the
normalized receipt is the same whichever leg finishes first (I5). Every fault is contained
at the leg edge (``race.run.legs``): the run always ends with a receipt for every obligation (I3).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial

import anyio

from backends.base import Adapter
from planner import Explain, LogicalPlan, OperatorNode, PhysicalNode, walk
from race.receipt import (
    CoverageSummary,
    EvidenceItem,
    Fusion,
    ObligationReceipt,
    Operational,
    OperatorReceipt,
    Receipt,
    ReceiptFingerprints,
    Roles,
)
from race.receipt import Lineage as ReceiptLineage
from race.run.context import RunContext
from race.run.deadline import cut_short, not_reached
from race.run.detached import CallPool
from race.run.freshness import Lineage
from race.run.fusion import FUSION_SECONDS
from race.run.lateness import Lateness
from race.run.legs import LegRecord, LegRunner, ScanCache
from race.run.obligations import answer, not_attempted
from race.run.operators import OPERATORS
from race.run.outcome import Outcome, gap_key, sorted_gaps, status_of
from race.run.roles import DEFAULT_ROLES
from rsc import Contract, Gap, Hit, ObligationStatus, OperatorKind, fingerprint, weakest
from rsc.records import trusted

__all__ = ["Executor", "Lineage"]


class Executor:
    def __init__(
        self,
        *,
        plan: LogicalPlan,
        explain: Explain,
        adapters: Mapping[str, Adapter],
        generations: Mapping[str, str],
        cache: ScanCache | None = None,
        lineage: Lineage | None = None,
        early_stop: bool = True,
        contracts: Mapping[str, Contract] | None = None,
        deadline: float | None = None,
        roles: Roles | None = None,
        pool: CallPool | None = None,
        cut: float | None = None,
        end: float | None = None,
    ) -> None:
        self.plan = plan
        self.explain = explain
        budget = plan.budget
        # When the run stops evaluating nodes, whatever is still running (``race.run.deadline``).
        self._cut = cut
        self._was_cut = False
        self._legs = LegRunner(
            adapters=adapters,
            generations=generations,
            caller=plan.generations,
            contracts=contracts or {},
            deadline=deadline if deadline is not None else time.monotonic() + budget.deadline_ms / 1000.0,
            deadline_ms=budget.deadline_ms,
            concurrency=budget.max_concurrency_per_backend,
            cache=cache,
            pool=pool,
        )
        self._ctx = RunContext(
            plan=plan,
            legs=self._legs,
            lineage=lineage,
            early_stop=early_stop,
            evaluate=self._node,
            skip=self._skip,
            roles=roles if roles is not None else DEFAULT_ROLES,
        )
        self.obligation_receipts: dict[str, ObligationReceipt] = {}
        self.operator_receipts: dict[str, OperatorReceipt] = {}
        self._done: dict[str, Outcome] = {}
        self._running: dict[str, anyio.Event] = {}
        self._skipped: dict[str, set[str]] = {}
        self._fusion = [0.0]
        # With the plan deadline (``end``), the reserves before it grow as the loop runs late.
        self._lateness: Lateness | None = None
        if cut is not None and end is not None:
            self._lateness = Lateness(legs=self._legs.deadline, cut=cut, end=end)

    # -- operational figures (never in the normalized receipt) ------------------------------

    @property
    def legs(self) -> dict[str, LegRecord]:
        return self._legs.operational.legs

    @property
    def calls(self) -> dict[str, int]:
        return self._legs.operational.calls

    @property
    def cache_counts(self) -> dict[str, int]:
        return self._legs.operational.cache

    @property
    def model_calls_made(self) -> int:
        return self._legs.operational.model_calls_made

    @property
    def left_behind(self) -> dict[str, int]:
        return dict(sorted(self._legs.operational.left_behind.items()))

    @property
    def limited(self) -> bool:
        """Whether time or the call pool kept a leg from starting, or the run was cut short:
        what the receipt lacks then depends on timing, and it is never cached."""
        return self._legs.operational.refused > 0 or self._was_cut

    # -- entry ------------------------------------------------------------------------------

    @property
    def fusion_seconds(self) -> float:
        """The seconds spent fusing, in every task of the run (operational only)."""
        return self._fusion[0]

    async def run(self) -> Outcome:
        token = FUSION_SECONDS.set(self._fusion)
        try:
            physical = self.explain.physical
            if self._cut is None:
                root = await self._node(physical)
            else:
                # A run whose planning used up its time does not start the tree only to cancel it.
                if self._legs.remaining_ms() > 0:
                    with anyio.move_on_after(max(self._cut - time.monotonic(), 0.0)) as scope:
                        lateness = self._lateness
                        stop = lateness.start(partial(self._moved, scope)) if lateness is not None else None
                        try:
                            root = await self._node(physical)
                        finally:
                            if stop is not None:
                                stop()
                if self._was_cut or physical.node not in self._done:
                    self._was_cut = True
                    root = cut_short(self._ctx, physical, self._done, self.obligation_receipts, self.operator_receipts)
        finally:
            FUSION_SECONDS.reset(token)
            self._release()
        for ob in self.plan.obligations:
            if ob.id in self.obligation_receipts:
                continue
            reasons = sorted(self._skipped.get(ob.id, ())) or ["not reached by the chosen physical plan"]
            self.obligation_receipts[ob.id] = not_attempted(ob, reasons)
        return root

    def evidence(self, root: Outcome) -> list[EvidenceItem]:
        # Every value is a validated record or a plain value of its field's type: the items are
        # built as ``EvidenceItem(...)`` would build them, without validating each hit again.
        return [
            trusted(
                EvidenceItem,
                {
                    "key": item.key,
                    "rank": rank,
                    "status": item.status,
                    "obligations": _sorted(item.obligations),
                    "origin": item.origin,
                    "relations": _sorted(item.relations),
                    "hits": tuple(item.hits) if len(item.hits) < 2 else tuple(sorted(item.hits, key=_custody_order)),
                    "fusion": item.fusion or Fusion(method="single"),
                    "collapsed": item.collapsed,
                },
                _EVIDENCE_SET,
            )
            for rank, item in enumerate(root.items, start=1)
        ]

    def receipt(self, root: Outcome, *, models: tuple[dict[str, str | int], ...]) -> Receipt:
        """The run's receipt: every obligation and operator, the evidence, coverage and gaps."""
        plan, explain = self.plan, self.explain
        obligations = tuple(self.obligation_receipts[o.id] for o in sorted(plan.obligations, key=lambda o: o.id))
        operators = tuple(self.operator_receipts[k] for k in sorted(self.operator_receipts))
        gaps: dict[tuple[object, ...], Gap] = {}
        for gap in [g for o in obligations for g in o.gaps] + [g for op in operators for g in op.gaps]:
            gaps[gap_key(gap)] = gap
        statuses = {s.value: sum(1 for o in obligations if o.status is s) for s in ObligationStatus}
        oppositions = [o.opposition_coverage for o in operators if o.opposition_coverage is not None]
        fps = explain.fingerprints
        return Receipt(
            lineage=ReceiptLineage(id=fingerprint({"plan": fps.plan, "mode": "live"}), mode="live"),
            fingerprints=ReceiptFingerprints(
                plan=fps.plan, physical=fps.physical, contracts=fps.contracts, backends=fps.backends, caller=fps.caller
            ),
            models=models,
            obligations=obligations,
            operators=operators,
            evidence=tuple(self.evidence(root)),
            coverage=CoverageSummary(
                search_coverage=root.coverage,
                support_closure=root.closure,
                opposition_coverage=weakest(*oppositions) if oppositions else None,
                statuses=statuses,
            ),
            gaps=sorted_gaps(gaps.values()),
            roles=None if self._ctx.roles == DEFAULT_ROLES else self._ctx.roles,
            operational=_NO_OPERATIONAL,
        ).with_evidence_fingerprint()

    # -- nodes ------------------------------------------------------------------------------

    async def _node(self, node: PhysicalNode) -> Outcome:
        # A node shared by several parents runs once; later readers wait for its value.
        if node.node in self._done:
            return self._done[node.node]
        if node.node in self._running:
            await self._running[node.node].wait()
            return self._done[node.node]
        if self._cut is not None and time.monotonic() >= self._cut:
            # Past the cut a node is not started: the run records it as not reached (cut_short).
            self._was_cut = True
            return not_reached(self._ctx, node)
        event = self._running[node.node] = anyio.Event()
        try:
            if isinstance(node, OperatorNode):
                op = self.plan.operator(node.node)
                assert op is not None, f"physical node {node.node} serves no operator"
                outcome = await OPERATORS[node.op](node, op, self._ctx)
                self.operator_receipts[node.node] = _operator_receipt(node, outcome)
            else:
                outcome, receipt = await answer(node, self._ctx)
                self.obligation_receipts[node.node] = receipt
            self._done[node.node] = outcome
        finally:
            event.set()
        return outcome

    def _release(self) -> None:
        """Drop the context's hold on this executor (its callbacks are the executor's methods):
        no node is evaluated after the run, and without that cycle the run's outcomes, hits and
        pinned adapters are freed as soon as the run is, not at the next collection."""
        ctx = self._ctx
        self._ctx = RunContext(
            plan=ctx.plan,
            legs=ctx.legs,
            lineage=ctx.lineage,
            early_stop=ctx.early_stop,
            evaluate=_ran,
            skip=_ran_skip,
            roles=ctx.roles,
        )

    def _moved(self, scope: anyio.CancelScope, legs: float, cut: float) -> None:
        """The loop runs late: the legs stop starting, and the run is cut, earlier (``race.run.lateness``)."""
        self._legs.move_deadline(legs)
        self._cut = cut
        scope.deadline = anyio.current_time() + (cut - time.monotonic())

    def _skip(self, node: PhysicalNode, why: str) -> None:
        """Remember why a parent did not run the obligations under ``node``; an obligation that
        some other parent ran keeps its own receipt, whatever the order (I5)."""
        for item in walk(node):
            if not isinstance(item, OperatorNode):
                self._skipped.setdefault(item.node, set()).add(why)


_EVIDENCE_SET = frozenset(EvidenceItem.model_fields)


async def _ran(node: PhysicalNode) -> Outcome:
    raise RuntimeError(f"node {node.node}: the run has ended; an executor runs its plan once")


def _ran_skip(node: PhysicalNode, why: str) -> None:
    raise RuntimeError(f"node {node.node}: the run has ended; an executor runs its plan once")


def _sorted(values: frozenset[str]) -> tuple[str, ...]:
    return tuple(values) if len(values) < 2 else tuple(sorted(values))


def _custody_order(hit: Hit) -> tuple[str, str, int]:
    return (hit.custody.rsc, hit.custody.request, hit.custody.rank)


_NO_OPERATIONAL = Operational()
"""The receipt's operational record until the engine fills it in: given, so that pydantic does not
deep-copy the field's default for every receipt."""


def _operator_receipt(node: OperatorNode, outcome: Outcome) -> OperatorReceipt:
    return OperatorReceipt(
        id=node.node,
        op=node.op,
        status=status_of(outcome, outcome.gaps),
        search_coverage=outcome.coverage,
        support_closure=outcome.closure,
        # What an operator established is its own: a refine over a corroborate is not one.
        opposition_coverage=outcome.opposition if node.op is OperatorKind.OPPOSE else None,
        independent_origins=outcome.origins if node.op is OperatorKind.CORROBORATE else None,
        origin_rule=outcome.note if node.op is OperatorKind.CORROBORATE else None,
        early_stop=outcome.note if node.op is OperatorKind.UNION and outcome.note else node.early_stop.reason,
        gaps=sorted_gaps(g for g in outcome.gaps if g.obligation == node.node),
    )
