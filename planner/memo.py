"""The memo: one group per logical node, each holding the physical alternatives rules made.

Groups are numbered breadth-first from the root (G1 is the root), so numbering never
depends on object identity or dict order. The best alternative is kept per (group,
required coverage); every other alternative keeps the reason it lost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from planner.cost import CostModel, Estimate, Statistics
from planner.logical import Budget, LogicalPlan
from planner.matching import FilterLoss, Match, Matcher
from planner.operators import LogicalOperator, Obligation
from planner.physical import EarlyStopVerdict, PhysicalNode
from rsc import CanonicalFloat, Contract, Record, SearchCoverage, Strategy


class Alternative(Record):
    """One physical way to serve a group, as a rule made it.

    ``estimate`` is how a scan's cost was reached (rows, selectivity and its basis);
    ``revision`` says what a physical revision changed, and is recorded in the explain's
    revisions when the alternative is chosen.
    """

    rule: str
    """The rule that made the alternative."""
    rsc: str = ""
    """The contract it would scan, ``rsc_id@version`` (empty for operators)."""
    strategy: Strategy | None = None
    """The strategy it serves the query class with."""
    cost: CanonicalFloat
    """The expected cost, in milliseconds."""
    reach: SearchCoverage
    """The best search coverage it can reach."""
    losses: tuple[FilterLoss, ...] = ()
    """What each hard filter loses in translation."""
    model_calls: int = 0
    """The embedding-model calls it makes."""
    eligible: bool
    """Whether it may serve the group at all (egress, filters, query class, pinned versions)."""
    chosen: bool = False
    """Whether the optimizer chose it."""
    rejected_because: tuple[str, ...] = ()
    """Why it was not chosen or not eligible, one reason each."""
    early_stop: EarlyStopVerdict | None = None
    """Whether a union over it may stop early (I9), and why."""
    estimate: Estimate | None = None
    """How a scan's cost was reached: rows, selectivity and their basis."""
    revision: str | None = None
    """What a physical revision changed, recorded in the explain's ``revisions`` when the alternative is chosen."""
    # The implementation lives in the physical tree; the memo lists what was weighed, so the
    # field is never serialized and need not be stripped from each alternative.
    implementation: PhysicalNode | None = Field(default=None, exclude=True)
    """The physical node the alternative stands for; never serialized (the chosen one is in ``physical``)."""


class Group(Record):
    id: int
    """The memo group's number."""
    logical: str
    """The logical node (obligation or operator id) the group serves."""
    kind: str
    """The node's kind (an obligation kind or an operator)."""
    required: SearchCoverage
    """The search coverage the node requires."""
    alternatives: tuple[Alternative, ...]
    """The physical alternatives weighed, the chosen one marked."""
    pruned: tuple[str, ...] = ()
    """The alternatives cut by the memo bounds, each with the bound."""


class Revision(Record):
    group: int
    """The memo group the revision changed."""
    logical: str
    """The logical node of that group."""
    rule: str
    """The rule that made the revision."""
    detail: str
    """What it changed."""


@dataclass
class GroupContext:
    """What a rule may look at: the group's logical node and the planning inputs (no I/O)."""

    plan: LogicalPlan
    group_id: int
    node_id: str
    contracts: tuple[Contract, ...]
    stats: Statistics
    budget: Budget
    obligation: Obligation | None = None
    child_groups: tuple[int, ...] = ()
    chosen_children: dict[str, Alternative] = field(default_factory=dict)
    parents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    by_ref: Mapping[str, Contract] = field(default_factory=dict)
    obligations: Mapping[str, Obligation] = field(default_factory=dict)
    operators: Mapping[str, LogicalOperator] = field(default_factory=dict)
    matcher: Matcher = field(default_factory=Matcher)
    costs: CostModel | None = None
    _matches: tuple[Match, ...] | None = field(default=None, repr=False)
    # Implementations a rule deferred, by (rule, rsc): only the chosen alternative ever needs
    # one, and most alternatives lose.
    deferred: dict[tuple[str, str], Callable[[], PhysicalNode]] = field(default_factory=dict)

    def defer(self, alternative: Alternative, build: Callable[[], PhysicalNode]) -> Alternative:
        self.deferred[(alternative.rule, alternative.rsc)] = build
        return alternative

    def materialize(self, alternative: Alternative) -> Alternative:
        build = self.deferred.get((alternative.rule, alternative.rsc))
        if alternative.implementation is not None or build is None:
            return alternative
        return alternative.model_copy(update={"implementation": build()})

    @property
    def matches(self) -> tuple[Match, ...]:
        """The group's obligation matched against every contract (made when first asked for)."""
        if self._matches is None:
            ob = self.obligation
            self._matches = tuple(self.matcher.match(ob, c) for c in self.contracts) if ob is not None else ()
        return self._matches

    @property
    def cost_model(self) -> CostModel:
        """The compile's cost model (one per compile, so each estimate is made once)."""
        if self.costs is None:
            self.costs = CostModel(self.stats)
        return self.costs

    def contract(self, ref: str) -> Contract:
        found = self.by_ref.get(ref)
        return found if found is not None else next(c for c in self.contracts if c.ref == ref)

    def obligation_of(self, node_id: str) -> Obligation | None:
        """The obligation with this id, if the node is one (indexed once per compile)."""
        return self.obligations.get(node_id) if self.obligations else self.plan.obligation(node_id)

    def operator_of(self, node_id: str) -> LogicalOperator | None:
        return self.operators.get(node_id) if self.operators else self.plan.operator(node_id)


def choose(
    alternatives: Sequence[Alternative],
    *,
    policy: Strategy | None,
    required: SearchCoverage,
    must_choose: bool = False,
    budget_ms: float | None = None,
) -> tuple[tuple[Alternative, ...], Literal["policy", "fallback", "deadline", "none"]]:
    """Mark the best alternative chosen and give every other one its reason.

    ``budget_ms`` is the time the group may take (its leg deadline, capped by the plan's): where
    every alternative of the policy strategy is estimated past it and another alternative at
    the required coverage is estimated within it, the one within it is chosen (``deadline``)."""
    eligible = [a for a in alternatives if a.eligible and a.reach.rank >= required.rank]
    preferred = [a for a in eligible if policy is None or a.strategy in (policy, None)]
    how: Literal["policy", "fallback", "deadline", "none"] = "policy"
    pool = preferred
    if not pool:
        pool, how = eligible, "fallback"
    if budget_ms is not None and pool and all(a.cost > budget_ms for a in pool):
        within = [a for a in eligible if a.cost <= budget_ms]
        if within:
            pool, how = within, "deadline"
    if not pool and must_choose:
        pool, how = [a for a in alternatives if a.eligible], "fallback"
    if not pool:
        how = "none"
    best = min(pool, key=lambda a: (a.cost, -a.reach.rank, a.rule, a.rsc)) if pool else None
    out = []
    for alt in alternatives:
        # Only the chosen alternative's implementation is used; the others drop theirs.
        if alt is best:
            out.append(alt.model_copy(update={"chosen": True}))
        elif alt.rejected_because:
            out.append(alt)
        elif alt.eligible and alt.reach.rank < required.rank:
            out.append(_rejected(alt, f"reaches {alt.reach.value}; required {required.value}"))
        elif how == "deadline" and budget_ms is not None and alt.cost > budget_ms:
            out.append(_rejected(alt, over_budget(alt.cost, budget_ms)))
        elif policy is not None and alt.strategy not in (policy, None) and how in ("policy", "deadline"):
            out.append(
                _rejected(
                    alt,
                    f"strategy {alt.strategy.value if alt.strategy else '-'} is not the policy strategy {policy.value}",
                )
            )
        elif best is not None:
            out.append(_rejected(alt, f"cost {alt.cost:.3f} ms > chosen {best.cost:.3f} ms ({_name(best)})"))
        else:  # pragma: no cover - an eligible alternative at the required coverage is always in the pool
            out.append(alt)
    return tuple(out), how


def over_budget(cost: float, budget_ms: float) -> str:
    """Why an alternative lost to the deadline: ``estimate 120 ms > remaining budget 80 ms``."""
    return f"estimate {cost:g} ms > remaining budget {budget_ms:g} ms"


def _name(alt: Alternative) -> str:
    return f"{alt.rule} {alt.rsc}" if alt.rsc else alt.rule


def _rejected(alt: Alternative, reason: str) -> Alternative:
    return alt.model_copy(update={"rejected_because": (reason,), "implementation": None})


def prune(
    alternatives: Sequence[Alternative],
    limit: int,
    *,
    policy: Strategy | None = None,
    required: SearchCoverage = SearchCoverage.UNKNOWN,
    bound: str = "",
    budget_ms: float | None = None,
) -> tuple[tuple[Alternative, ...], tuple[str, ...]]:
    """Keep at most ``limit`` alternatives and record the rest with the bound that cut them.

    The ranking is the one ``choose`` applies (eligible at the required coverage under the
    policy strategy, then eligible at the required coverage, then eligible; cheapest first),
    so pruning never removes the alternative that would have been chosen.
    """

    def usable(alt: Alternative) -> bool:
        return alt.eligible and alt.reach.rank >= required.rank

    def preferred(alt: Alternative) -> bool:
        return usable(alt) and (policy is None or alt.strategy in (policy, None))

    # As ``choose`` does: where every usable alternative of the policy strategy is estimated past
    # the budget, those within it rank first.
    within = [a for a in alternatives if usable(a) and budget_ms is not None and a.cost <= budget_ms]
    pool = [a for a in alternatives if preferred(a)] or [a for a in alternatives if usable(a)]
    by_deadline = bool(within) and bool(pool) and all(budget_ms is not None and a.cost > budget_ms for a in pool)

    def rank(item: tuple[int, Alternative]) -> tuple[bool, bool, bool, bool, float, int, str, str, int]:
        index, alt = item
        first = alt in within if by_deadline else preferred(alt)
        return (
            not first,
            not preferred(alt),
            not usable(alt),
            not alt.eligible,
            alt.cost,
            -alt.reach.rank,
            alt.rule,
            alt.rsc,
            index,
        )

    if len(alternatives) <= limit:
        return tuple(alternatives), ()
    ranked = sorted(enumerate(alternatives), key=rank)
    kept = sorted(ranked[:limit], key=lambda p: p[0])
    why = bound or f"limit {limit}"
    notes = tuple(f"{_name(a)} cost={a.cost:.3f}: over {why}" for _, a in ranked[limit:])
    return tuple(a for _, a in kept), notes
