"""Compile a logical plan into a memo and a chosen physical plan. Pure: no I/O, no clock.

Groups are numbered breadth-first from the root and planned bottom-up, so an operator's
rules always see the best alternative of each input group. Planning the same inputs twice
gives the same explain bytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

import networkx as nx

from planner.cost import Statistics
from planner.logical import LogicalPlan, Obligation, logical_fingerprint
from planner.matching import Match, check_filter_fields, match, pinned_contracts
from planner.memo import Alternative, Group, GroupContext, Revision, choose, prune
from planner.physical import PhysicalNode, UnsatisfiableNode
from planner.rules import LEAF_RULES, OPERATOR_RULES
from rsc import (
    DEFAULT_STRATEGY,
    Contract,
    Gap,
    GapKind,
    Record,
    SearchCoverage,
    fingerprint,
    weakest,
)

EXPLAIN_SCHEMA_VERSION = "race.explain/1"


class Fingerprints(Record):
    plan: str
    logical: str
    contracts: str
    backends: dict[str, str]
    caller: str
    physical: str
    statistics: str


class Bounds(Record):
    groups: int
    alternatives: int
    max_alternatives_per_group: int
    max_memo_alternatives: int
    pruned: int
    memo_limited: tuple[str, ...] = ()


class Explain(Record):
    schema_version: str = EXPLAIN_SCHEMA_VERSION
    fingerprints: Fingerprints
    contracts: tuple[str, ...]
    groups: tuple[Group, ...]
    physical: PhysicalNode
    revisions: tuple[Revision, ...] = ()
    bounds: Bounds


def plan_fingerprint(
    plan: LogicalPlan, contracts: Sequence[Contract], backend_generations: Mapping[str, str]
) -> tuple[str, str, dict[str, str]]:
    """The plan fingerprint (I6) and its parts: contracts, and the generations of their backends."""
    contract_part = fingerprint(
        [{"rsc_id": c.rsc_id, "version": c.version, "translator": c.translator_version} for c in contracts]
    )
    backends = sorted({c.backend for c in contracts})
    generations = {b: backend_generations.get(b, "absent") for b in backends}
    plan_fp = fingerprint(
        {
            "logical": logical_fingerprint(plan),
            "contracts": contract_part,
            "backends": generations,
            "caller": plan.generations,
        }
    )
    return plan_fp, contract_part, generations


def number_groups(plan: LogicalPlan) -> dict[str, int]:
    """Breadth-first from the root, inputs in plan order: G1 is the root."""
    numbering: dict[str, int] = {}
    queue = deque([plan.root])
    while queue:
        node = queue.popleft()
        if node in numbering:
            continue
        numbering[node] = len(numbering) + 1
        op = plan.operator(node)
        if op is not None:
            queue.extend(op.inputs_of())
    return numbering


def _parents(plan: LogicalPlan) -> dict[str, tuple[str, ...]]:
    parents: dict[str, list[str]] = {}
    for op in plan.operators:
        for child in op.inputs_of():
            parents.setdefault(child, []).append(op.id)
    return {k: tuple(sorted(set(v))) for k, v in parents.items()}


def _bottom_up(plan: LogicalPlan, numbering: dict[str, int]) -> list[str]:
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(numbering)
    for op in plan.operators:
        for child in op.inputs_of():
            graph.add_edge(op.id, child)
    top_down = list(nx.lexicographical_topological_sort(graph, key=lambda n: f"{numbering[n]:08d}"))
    return list(reversed(top_down))


def _descendant_obligations(plan: LogicalPlan, node: str) -> list[Obligation]:
    ob = plan.obligation(node)
    if ob is not None:
        return [ob]
    op = plan.operator(node)
    assert op is not None
    out: list[Obligation] = []
    for child in op.inputs_of():
        out += _descendant_obligations(plan, child)
    return out


def unsatisfiable_gaps(ob: Obligation, matches: Sequence[Match], others: Sequence[Alternative]) -> tuple[Gap, ...]:
    """Why nothing can serve an obligation, grouped by gap kind; every rejected match named."""
    relevant = [m for m in matches if m.reject_gap not in (None, GapKind.NO_ELIGIBLE_BACKEND)]
    kinds = sorted({m.reject_gap for m in relevant if m.reject_gap is not None}, key=lambda k: k.value)
    gaps = []
    for kind in kinds:
        detail = "; ".join(f"{m.rsc}: {', '.join(m.rejected_because)}" for m in relevant if m.reject_gap is kind)
        gaps.append(Gap(kind=kind, obligation=ob.id, detail=detail))
    if not gaps:
        reasons = [f"{m.rsc}: {', '.join(m.rejected_because)}" for m in matches]
        reasons += [f"{a.rule}: {', '.join(a.rejected_because)}" for a in others if a.rejected_because]
        gaps.append(
            Gap(
                kind=GapKind.NO_ELIGIBLE_BACKEND,
                obligation=ob.id,
                detail="no contract can serve this obligation: " + ("; ".join(reasons) or "no contracts known"),
            )
        )
    return tuple(gaps)


def compile_plan(
    plan: LogicalPlan,
    *,
    contracts: Sequence[Contract],
    backend_generations: Mapping[str, str],
    stats: Statistics,
    where: str = "plan",
) -> Explain:
    check_filter_fields(plan, contracts, where=where)
    usable = pinned_contracts(plan, contracts, where=where)
    numbering = number_groups(plan)
    parents = _parents(plan)
    budget = plan.budget
    chosen: dict[str, Alternative] = {}
    groups: dict[str, Group] = {}
    revisions: list[Revision] = []
    total_alternatives = 0
    pruned_count = 0
    memo_limited: list[str] = []
    for node in _bottom_up(plan, numbering):
        gid = numbering[node]
        ob = plan.obligation(node)
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
        )
        if ob is not None:
            ctx.matches = tuple(match(ob, c) for c in usable)
            made = [alt for rule in LEAF_RULES for alt in rule(ctx)]
            policy = ob.strategy or DEFAULT_STRATEGY[ob.query_class]
            required = ob.required_coverage
        else:
            made = [alt for rule in OPERATOR_RULES for alt in rule(ctx)]
            policy = None
            required = weakest(*(o.required_coverage for o in _descendant_obligations(plan, node)))
        limit = budget.max_alternatives_per_group
        if total_alternatives + min(len(made), limit) > budget.max_memo_alternatives:
            limit = max(1, budget.max_memo_alternatives - total_alternatives)
            memo_limited.append(node)
        kept, pruned = prune(made, limit)
        pruned_count += len(pruned)
        total_alternatives += len(kept)
        alternatives, how = choose(kept, policy=policy, required=required, must_choose=ob is None)
        best = next((a for a in alternatives if a.chosen), None)
        if best is None:
            assert ob is not None
            gaps = unsatisfiable_gaps(ob, ctx.matches, alternatives)
            best = Alternative(
                rule="Unsatisfiable",
                cost=0.0,
                reach=SearchCoverage.UNKNOWN,
                eligible=False,
                implementation=UnsatisfiableNode(node=node, group=gid, gaps=gaps),
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
        if best.rule == "PushRefineIntoScan":
            revisions.append(
                Revision(
                    group=gid,
                    logical=node,
                    rule=best.rule,
                    detail=f"refine filters pushed into the scan of its input ({best.rsc});"
                    f" coverage kept at {best.reach.value}",
                )
            )
        chosen[node] = best
        operator = plan.operator(node)
        if ob is not None:
            kind = f"obligation {ob.kind.value} {ob.query_class.value}"
        else:
            kind = operator.op if operator is not None else "?"
        groups[node] = Group(
            id=gid,
            logical=node,
            kind=kind,
            required=required,
            alternatives=tuple(a.model_copy(update={"implementation": None}) for a in alternatives),
            pruned=pruned,
        )
    physical = chosen[plan.root].implementation
    assert physical is not None
    plan_fp, contract_fp, generations = plan_fingerprint(plan, usable, backend_generations)
    return Explain(
        fingerprints=Fingerprints(
            plan=plan_fp,
            logical=logical_fingerprint(plan),
            contracts=contract_fp,
            backends=generations,
            caller=fingerprint(plan.generations),
            physical=fingerprint(physical),
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
