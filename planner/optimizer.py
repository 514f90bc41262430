"""Compile a logical plan into a memo and a chosen physical plan. Pure: no I/O, no clock.

Groups are numbered breadth-first from the root and planned bottom-up, so an operator's
rules always see the best alternative of each input group. Planning the same inputs twice
gives the same explain bytes.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from collections.abc import Mapping, Sequence

from planner.cost import CostModel, Statistics
from planner.logical import LogicalPlan, logical_fingerprint
from planner.matching import Match, Matcher, check_filter_fields, pinned_contracts
from planner.memo import Alternative, Group, GroupContext, Revision, choose, prune
from planner.operators import Obligation
from planner.physical import PhysicalNode, UnsatisfiableNode
from planner.rules import LEAF_RULES, OPERATOR_RULES
from rsc import (
    DEFAULT_STRATEGY,
    Contract,
    Gap,
    GapKind,
    Record,
    SearchCoverage,
    Strategy,
    fingerprint,
    weakest,
)

EXPLAIN_SCHEMA_VERSION = "race.explain/1"

_log = logging.getLogger(__name__)


class Fingerprints(Record):
    plan: str
    """The plan fingerprint (I6): the logical plan, the contracts, their backends' generations and the caller's; with
    ``physical``, the key a receipt is cached under."""
    logical: str
    """The fingerprint of the logical plan's canonical form."""
    contracts: str
    """The fingerprint of the contracts the plan could use (id, version, translator)."""
    backends: dict[str, str]
    """Each backend's generation the plan was made at."""
    caller: str
    """The fingerprint of the caller's generations."""
    physical: str
    """The fingerprint of the chosen physical plan."""
    statistics: str
    """The fingerprint of the statistics the plan was costed with."""


class Bounds(Record):
    groups: int
    """The memo groups (one per logical node)."""
    alternatives: int
    """The alternatives kept in the memo."""
    max_alternatives_per_group: int
    """The plan's bound on alternatives per group."""
    max_memo_alternatives: int
    """The plan's bound on alternatives in the memo."""
    pruned: int
    """How many alternatives the bounds cut."""
    memo_limited: tuple[str, ...] = ()
    """The nodes where the memo-wide bound, not the per-group one, cut alternatives."""


class Explain(Record):
    schema_version: str = EXPLAIN_SCHEMA_VERSION
    """Always ``race.explain/1``."""
    fingerprints: Fingerprints
    """What the plan was made from."""
    contracts: tuple[str, ...]
    """The contracts the plan could use, ``rsc_id@version``."""
    groups: tuple[Group, ...]
    """The memo: one group per logical node with every alternative weighed."""
    physical: PhysicalNode
    """The chosen physical plan, from the root."""
    revisions: tuple[Revision, ...] = ()
    """What physical revisions changed after the first choice."""
    bounds: Bounds
    """The memo's size and what its bounds cut."""


def plan_fingerprint(
    plan: LogicalPlan,
    contracts: Sequence[Contract],
    backend_generations: Mapping[str, str],
    *,
    logical: str | None = None,
) -> tuple[str, str, dict[str, str]]:
    """The plan fingerprint (I6) and its parts: contracts, and the generations of their backends.

    ``logical`` is the plan's logical fingerprint when the caller has already computed it.
    """
    contract_part = fingerprint(
        [{"rsc_id": c.rsc_id, "version": c.version, "translator": c.translator_version} for c in contracts]
    )
    backends = sorted({c.backend for c in contracts})
    generations = {b: backend_generations.get(b, "absent") for b in backends}
    logical = logical if logical is not None else logical_fingerprint(plan)
    return combined_plan_fingerprint(plan, logical, contract_part, generations), contract_part, generations


def combined_plan_fingerprint(plan: LogicalPlan, logical: str, contracts: str, generations: Mapping[str, str]) -> str:
    """The plan fingerprint of its parts: ``plan`` (its caller's generations), its logical
    fingerprint, the contracts' fingerprint and their backends' generations. Replay checks a
    retained plan against its receipt with it."""
    return fingerprint(
        {"logical": logical, "contracts": contracts, "backends": dict(generations), "caller": plan.generations}
    )


def physical_fingerprint(physical: PhysicalNode, stats: Statistics | None = None) -> str:
    """The physical plan's fingerprint; where learned statistics chose it, with their digest
    (the statistics fingerprint), so that a plan chosen by other measurements is told apart."""
    if stats is None or not stats.learned:
        return fingerprint(physical)
    return fingerprint({"physical": physical, "statistics": stats.fingerprint})


def number_groups(plan: LogicalPlan) -> dict[str, int]:
    """Breadth-first from the root, inputs in plan order: G1 is the root."""
    inputs = {op.id: op.inputs_of() for op in plan.operators}
    numbering: dict[str, int] = {}
    queue = deque([plan.root])
    while queue:
        node = queue.popleft()
        if node in numbering:
            continue
        numbering[node] = len(numbering) + 1
        queue.extend(inputs.get(node, ()))
    return numbering


def _parents(plan: LogicalPlan) -> dict[str, tuple[str, ...]]:
    parents: dict[str, list[str]] = {}
    for op in plan.operators:
        for child in op.inputs_of():
            parents.setdefault(child, []).append(op.id)
    return {k: tuple(sorted(set(v))) for k, v in parents.items()}


def _bottom_up(plan: LogicalPlan, numbering: dict[str, int]) -> list[str]:
    """Every input before the operators that read it; ties go to the lowest group number.

    Kahn's algorithm from the root down, always taking the ready node with the lowest group
    number, then reversed.
    """
    children: dict[str, list[str]] = {}
    waiting: dict[str, int] = dict.fromkeys(numbering, 0)
    for op in plan.operators:
        if op.id not in numbering:
            continue
        unique = list(dict.fromkeys(op.inputs_of()))
        children[op.id] = unique
        for child in unique:
            waiting[child] += 1
    ready = [(numbering[n], n) for n, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    top_down: list[str] = []
    while ready:
        _, node = heapq.heappop(ready)
        top_down.append(node)
        for child in children.get(node, ()):
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, (numbering[child], child))
    return list(reversed(top_down))


def unsatisfiable_gaps(
    ob: Obligation,
    matches: Sequence[Match],
    others: Sequence[Alternative],
    absent: Sequence[tuple[Contract, str]] = (),
) -> tuple[Gap, ...]:
    """Why nothing can serve an obligation, grouped by gap kind; every rejected match named,
    and every ``absent`` contract (one the index was built without) that could have read it."""
    relevant = [m for m in matches if m.reject_gap not in (None, GapKind.NO_ELIGIBLE_BACKEND)]
    kinds = sorted({m.reject_gap for m in relevant if m.reject_gap is not None}, key=lambda k: k.value)
    gaps = []
    for kind in kinds:
        detail = "; ".join(f"{m.rsc}: {', '.join(m.rejected_because)}" for m in relevant if m.reject_gap is kind)
        gaps.append(Gap(kind=kind, obligation=ob.id, detail=detail))
    if not gaps:
        reasons = [f"{m.rsc}: {', '.join(m.rejected_because)}" for m in matches]
        # A scan alternative's reasons are its match's; other rules' reasons are added once.
        stated = {(m.rsc, m.rejected_because) for m in matches}
        reasons += [
            f"{a.rule}: {', '.join(a.rejected_because)}"
            for a in others
            if a.rejected_because and (a.rsc, a.rejected_because) not in stated
        ]
        reasons += [f"{c.ref}: {why}" for c, why in absent if ob.query_class in c.query_classes]
        gaps.append(
            Gap(
                kind=GapKind.NO_ELIGIBLE_BACKEND,
                obligation=ob.id,
                detail="no contract can serve this obligation: " + ("; ".join(reasons) or "no contracts known"),
            )
        )
    return tuple(gaps)


def _described(alt: Alternative) -> str:
    return f"{alt.rule} {alt.rsc}" if alt.rsc else alt.rule


def compile_plan(
    plan: LogicalPlan,
    *,
    contracts: Sequence[Contract],
    backend_generations: Mapping[str, str],
    stats: Statistics,
    where: str = "plan",
    absent: Sequence[tuple[Contract, str]] = (),
) -> Explain:
    """``absent``: contracts the index was built without, and why (a lexical cold start)."""
    check_filter_fields(plan, contracts, where=where)
    usable = pinned_contracts(plan, contracts, where=where)
    by_ref = {c.ref: c for c in usable}
    matcher = Matcher()
    costs = CostModel(stats)
    obligations = {o.id: o for o in plan.obligations}
    operators = {o.id: o for o in plan.operators}
    numbering = number_groups(plan)
    order = _bottom_up(plan, numbering)
    parents = _parents(plan)
    budget = plan.budget
    chosen: dict[str, Alternative] = {}
    required_of: dict[str, SearchCoverage] = {}
    groups: dict[str, Group] = {}
    revisions: list[Revision] = []
    total_alternatives = 0
    pruned_count = 0
    memo_limited: list[str] = []
    for position, node in enumerate(order):
        gid = numbering[node]
        ob = obligations.get(node)
        operator = operators.get(node)
        ctx = GroupContext(
            plan=plan,
            group_id=gid,
            node_id=node,
            contracts=usable,
            stats=stats,
            budget=budget,
            obligation=ob,
            chosen_children=chosen,
            parents=parents,
            by_ref=by_ref,
            obligations=obligations,
            operators=operators,
            matcher=matcher,
            costs=costs,
        )
        policy: Strategy | None
        if ob is not None:
            made = [alt for rule in LEAF_RULES for alt in rule(ctx)]
            policy = ob.strategy or DEFAULT_STRATEGY[ob.query_class]
            required = ob.required_coverage
        else:
            assert operator is not None
            made = [alt for rule in OPERATOR_RULES for alt in rule(ctx)]
            policy = None
            # Never better than the weakest obligation underneath (children are planned first).
            required = weakest(*(required_of[child] for child in operator.inputs_of()))
        required_of[node] = required
        # Every group still to be planned keeps room for one alternative, so the memo bound
        # holds exactly (the plan model guarantees max_memo_alternatives >= node count).
        room = budget.max_memo_alternatives - total_alternatives - (len(order) - position - 1)
        limit = min(budget.max_alternatives_per_group, max(1, room))
        bound = f"max_alternatives_per_group={budget.max_alternatives_per_group}"
        if limit < min(len(made), budget.max_alternatives_per_group):
            bound = f"max_memo_alternatives={budget.max_memo_alternatives} (room for {limit} here)"
            memo_limited.append(node)
        # The time the group may take: its legs' deadline (an obligation's own, or the plan's leg
        # timeout), never more than the plan's.
        own = (ob.deadline_ms or budget.leg_timeout_ms) if ob is not None else budget.deadline_ms
        budget_ms = float(min(own, budget.deadline_ms))
        kept, pruned = prune(made, limit, policy=policy, required=required, bound=bound, budget_ms=budget_ms)
        pruned_count += len(pruned)
        total_alternatives += len(kept)
        alternatives, how = choose(kept, policy=policy, required=required, must_choose=ob is None, budget_ms=budget_ms)
        best = next((a for a in alternatives if a.chosen), None)
        if best is None:
            assert ob is not None
            # Every rule's reasons, pruned or not: the gaps do not depend on the memo bounds.
            gaps = unsatisfiable_gaps(ob, ctx.matches, made, absent)
            best = Alternative(
                rule="Unsatisfiable",
                cost=0.0,
                reach=SearchCoverage.UNKNOWN,
                eligible=False,
                implementation=UnsatisfiableNode(node=node, group=gid, gaps=gaps),
            )
        elif how == "deadline":
            revisions.append(
                Revision(
                    group=gid,
                    logical=node,
                    rule=best.rule,
                    detail=f"every alternative of {policy.value if policy else 'the plan'} is estimated past the "
                    f"remaining budget {budget_ms:g} ms; chose {_described(best)}, estimated {best.cost:g} ms",
                )
            )
        elif how == "fallback" and policy is not None:
            revisions.append(
                Revision(
                    group=gid,
                    logical=node,
                    rule=best.rule,
                    detail=f"no eligible alternative for policy strategy {policy.value}; "
                    f"chose {best.strategy.value if best.strategy else best.rule} ({best.rsc})",
                )
            )
        if best.revision is not None:
            revisions.append(Revision(group=gid, logical=node, rule=best.rule, detail=best.revision))
        chosen[node] = best = ctx.materialize(best)
        if ob is not None:
            kind = f"obligation {ob.kind.value} {ob.query_class.value}"
            kind += f" collapse={ob.collapse}" if ob.collapse else ""
        else:
            kind = operator.op if operator is not None else "?"
        groups[node] = Group(
            id=gid,
            logical=node,
            kind=kind,
            required=required,
            alternatives=alternatives,
            pruned=pruned,
        )
    physical = chosen[plan.root].implementation
    assert physical is not None
    logical_fp = logical_fingerprint(plan)
    plan_fp, contract_fp, generations = plan_fingerprint(plan, usable, backend_generations, logical=logical_fp)
    explain = Explain(
        fingerprints=Fingerprints(
            plan=plan_fp,
            logical=logical_fp,
            contracts=contract_fp,
            backends=generations,
            caller=fingerprint(plan.generations),
            physical=physical_fingerprint(physical, stats),
            statistics=stats.fingerprint,
        ),
        contracts=tuple(c.ref for c in usable),
        groups=tuple(sorted(groups.values(), key=lambda g: g.id)),
        physical=physical,
        revisions=tuple(sorted(revisions, key=lambda r: r.group)),
        bounds=Bounds(
            groups=len(groups),
            alternatives=total_alternatives,
            max_alternatives_per_group=budget.max_alternatives_per_group,
            max_memo_alternatives=budget.max_memo_alternatives,
            pruned=pruned_count,
            memo_limited=tuple(sorted(memo_limited)),
        ),
    )
    if _log.isEnabledFor(logging.DEBUG):
        _log_choices(explain)
    return explain


def _log_choices(explain: Explain) -> None:
    """DEBUG records of ``planner.optimizer``: per obligation, the alternative chosen and why
    each other one was not (its reasons, or its cost), with the plan fingerprint."""
    for group in explain.groups:
        if not group.kind.startswith("obligation"):
            continue
        best = next((a for a in group.alternatives if a.chosen), None)
        chosen = (
            f"{_described(best)} ({best.cost:g} ms, reach {best.reach.value})" if best else "nothing: unsatisfiable"
        )
        others = [
            f"{_described(a)}: {', '.join(a.rejected_because) or f'costlier ({a.cost:g} ms)'}"
            for a in group.alternatives
            if not a.chosen
        ]
        rejected = "; ".join(others + list(group.pruned)) or "no other alternative"
        _log.debug(
            "plan %s: obligation %s chose %s; rejected %s", explain.fingerprints.plan, group.logical, chosen, rejected
        )
