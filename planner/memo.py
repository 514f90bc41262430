"""The memo: one group per logical node, each holding the physical alternatives rules made.

Groups are numbered breadth-first from the root (G1 is the root), so numbering never
depends on object identity or dict order. The best alternative is kept per (group,
required coverage); every other alternative keeps the reason it lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from planner.cost import Statistics
from planner.logical import Budget, LogicalPlan, Obligation
from planner.matching import FilterLoss, Match
from planner.physical import EarlyStopVerdict, PhysicalNode
from rsc import Contract, Record, ScoreKind, SearchCoverage, Strategy


class Alternative(Record):
    rule: str
    rsc: str = ""
    strategy: Strategy | None = None
    cost: float
    reach: SearchCoverage
    losses: tuple[FilterLoss, ...] = ()
    model_calls: int = 0
    eligible: bool
    chosen: bool = False
    rejected_because: tuple[str, ...] = ()
    early_stop: EarlyStopVerdict | None = None
    implementation: PhysicalNode | None = None


class Group(Record):
    id: int
    logical: str
    kind: str
    required: SearchCoverage
    alternatives: tuple[Alternative, ...]
    pruned: tuple[str, ...] = ()


class Revision(Record):
    group: int
    logical: str
    rule: str
    detail: str


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
    matches: tuple[Match, ...] = ()
    child_groups: tuple[int, ...] = ()
    chosen_children: dict[str, Alternative] = field(default_factory=dict)
    parents: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def contract(self, ref: str) -> Contract:
        return next(c for c in self.contracts if c.ref == ref)


def contract_strategy(contract: Contract) -> Strategy:
    """The strategy a contract implements, from what it declares."""
    if contract.score_kind is ScoreKind.EXACT_MATCH:
        return Strategy.EXACT
    if contract.score_kind is ScoreKind.BM25:
        return Strategy.LEXICAL
    if contract.score_kind in (ScoreKind.COSINE_DISTANCE, ScoreKind.L2_DISTANCE):
        return Strategy.VECTOR
    if contract.score_kind is ScoreKind.HOPS:
        names = {q.value for q in contract.query_classes}
        return Strategy.STRUCTURAL if "symbol_relation" in names else Strategy.GRAPH
    return Strategy.LEXICAL


def choose(
    alternatives: Sequence[Alternative], *, policy: Strategy | None, required: SearchCoverage, must_choose: bool = False
) -> tuple[tuple[Alternative, ...], Literal["policy", "fallback", "none"]]:
    """Mark the best alternative chosen and give every other one its reason."""
    eligible = [a for a in alternatives if a.eligible and a.reach.rank >= required.rank]
    preferred = [a for a in eligible if policy is None or a.strategy in (policy, None)]
    how: Literal["policy", "fallback", "none"] = "policy"
    pool = preferred
    if not pool:
        pool, how = eligible, "fallback"
    if not pool and must_choose:
        pool, how = [a for a in alternatives if a.eligible], "fallback"
    if not pool:
        return tuple(alternatives), "none"
    best = min(pool, key=lambda a: (a.cost, -a.reach.rank, a.rule, a.rsc))
    out = []
    for alt in alternatives:
        if alt is best:
            out.append(alt.model_copy(update={"chosen": True}))
        elif alt.rejected_because:
            out.append(alt)
        elif alt.eligible and alt.reach.rank < required.rank:
            out.append(
                alt.model_copy(update={"rejected_because": (f"reaches {alt.reach.value}; required {required.value}",)})
            )
        elif policy is not None and alt.strategy not in (policy, None) and how == "policy":
            out.append(
                alt.model_copy(
                    update={
                        "rejected_because": (
                            f"strategy {alt.strategy.value if alt.strategy else '-'}"
                            f" is not the policy strategy {policy.value}",
                        )
                    }
                )
            )
        else:
            out.append(
                alt.model_copy(
                    update={
                        "rejected_because": (
                            f"cost {alt.cost:.3f} ms > chosen {best.cost:.3f} ms ({best.rule} {best.rsc})".rstrip(),
                        )
                    }
                )
            )
    return tuple(out), how


def prune(alternatives: Sequence[Alternative], limit: int) -> tuple[tuple[Alternative, ...], tuple[str, ...]]:
    """Keep at most ``limit`` alternatives: eligible first, then cheapest; record the rest."""
    ranked = sorted(enumerate(alternatives), key=lambda p: (not p[1].eligible, p[1].cost, p[1].rule, p[1].rsc, p[0]))
    kept = sorted(ranked[:limit], key=lambda p: p[0])
    notes = tuple(
        f"{a.rule} {a.rsc} cost={a.cost:.3f}: over max_alternatives_per_group={limit}" for _, a in ranked[limit:]
    )
    return tuple(a for _, a in kept), notes
