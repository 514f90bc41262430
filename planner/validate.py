"""Graph validation of a logical plan: unique ids, resolved references, no repeated input,
no cycle, a bounded depth, every node reachable from the root."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from planner.operators import JoinOp, LogicalOperator, Obligation, OpposeOp
from rsc import BoundExceeded, DanglingReference, PlanCycleError, PlanError


class PlanGraph(Protocol):
    """The nodes and root of a plan, as the checks read them (a ``LogicalPlan`` is one)."""

    @property
    def obligations(self) -> Sequence[Obligation]: ...

    @property
    def operators(self) -> Sequence[LogicalOperator]: ...

    @property
    def root(self) -> str: ...


# The longest root-to-leaf chain: a physical plan nests one level per node, and the
# pydantic's serializer and the executor's recursion stop a few dozen levels past this.
MAX_DEPTH_CEILING = 208


def check_graph(plan: PlanGraph, *, where: str = "plan") -> None:
    """Ids unique, every reference resolves, no operator names one input twice, no cycle, the
    root reaches every node."""
    ids: dict[str, str] = {}
    for node in [*plan.obligations, *plan.operators]:
        if node.id in ids:
            raise PlanError(f"node id {node.id!r} is used twice", where=where)
        ids[node.id] = "obligation" if isinstance(node, Obligation) else "operator"
    edges: dict[str, list[str]] = {node: [] for node in sorted(ids)}
    for op in plan.operators:
        seen: set[str] = set()
        for ref in op.inputs_of():
            if ref not in ids:
                raise DanglingReference(f"operator {op.id!r} names input {ref!r}, which is not a node", where=where)
            if ref in seen:
                raise PlanError(_repeated_input(op, ref), where=where)
            seen.add(ref)
            edges[op.id].append(ref)
    if plan.root not in ids:
        raise DanglingReference(f"root {plan.root!r} is not a node", where=where)
    cycle = _first_cycle(edges)
    if cycle:
        raise PlanCycleError(f"operators form a cycle: {' -> '.join([*cycle, cycle[0]])}", where=where)
    depth = _depth(edges, plan.root)
    if depth > MAX_DEPTH_CEILING:
        raise BoundExceeded(
            f"plan is {depth} nodes deep (root to leaf); at most {MAX_DEPTH_CEILING} are accepted", where=where
        )
    reached = {plan.root}
    frontier = [plan.root]
    while frontier:
        for ref in edges[frontier.pop()]:
            if ref not in reached:
                reached.add(ref)
                frontier.append(ref)
    unreached = sorted(set(ids) - reached)
    if unreached:
        raise PlanError(f"node {unreached[0]!r} is not reachable from root {plan.root!r}", where=where)


# The graph checks walk with explicit stacks, in time linear in the plan's size: a legal plan
# may be hundreds of nodes deep, past Python's recursion limit.


def _first_cycle(edges: dict[str, list[str]]) -> list[str]:
    """The first cycle met by depth-first search from each node in sorted order, or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in edges:
        if start in state:
            continue
        path = [start]
        state[start] = 1
        pending = [iter(edges[start])]
        while pending:
            ref = next(pending[-1], None)
            if ref is None:
                state[path.pop()] = 2
                pending.pop()
            elif state.get(ref) == 1:
                return path[path.index(ref) :]
            elif ref not in state:
                state[ref] = 1
                path.append(ref)
                pending.append(iter(edges[ref]))
    return []


def _depth(edges: dict[str, list[str]], root: str) -> int:
    """Nodes on the longest path from ``root`` to a leaf of an acyclic graph."""
    depth: dict[str, int] = {}
    stack = [root]
    while stack:
        node = stack[-1]
        if node in depth:  # a shared input, pushed by two parents
            stack.pop()
            continue
        waiting = [ref for ref in edges[node] if ref not in depth]
        if waiting:
            stack.extend(waiting)
            continue
        stack.pop()
        depth[node] = 1 + max((depth[ref] for ref in edges[node]), default=0)
    return depth[root]


def _repeated_input(op: LogicalOperator, ref: str) -> str:
    # A repeated input weighs twice in a fusion or a count while provenance records it
    # once; a join or oppose would pair a leg with itself.
    if isinstance(op, JoinOp):
        return f"operator {op.id!r} (join) names input {ref!r} as both left and right"
    if isinstance(op, OpposeOp):
        return f"operator {op.id!r} (oppose) names input {ref!r} as both support and refutation"
    return f"operator {op.id!r} ({op.op}) lists input {ref!r} more than once"
