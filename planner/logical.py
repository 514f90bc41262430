"""The logical plan: typed retrieval obligations (leaves) joined by typed operators.

A plan is input, never derived (I1). ``parse_plan`` turns JSON bytes into a validated
``LogicalPlan`` or raises one ``PlanError`` that names the place; ``normalize`` gives the
canonical form whose fingerprint identifies the plan whatever the key order of its file.
"""

from __future__ import annotations

import datetime as dt
import weakref
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, model_validator

from rsc import (
    BoundExceeded,
    DanglingReference,
    Egress,
    Filter,
    ObligationKind,
    PlanCycleError,
    PlanError,
    Query,
    QueryClass,
    Record,
    SearchCoverage,
    Strategy,
    canonical_data,
    dumps_canonical,
    fingerprint,
    fingerprint_bytes,
    first_validation_error,
)
from rsc.canonical import read_json

PLAN_SCHEMA_VERSION = "race.plan/1"
MAX_NODES_CEILING = 4096
# The longest root-to-leaf chain: a physical plan nests one level per node, and the
# pydantic's serializer and the executor's recursion stop a few dozen levels past this.
MAX_DEPTH_CEILING = 208

NodeId = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")]


def _calendar_date(text: str) -> str:
    # The pattern admits 2026-02-30; a date the calendar lacks is bad input, not a crash later.
    try:
        dt.date.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a calendar date: {exc}") from None
    return text


IsoDate = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$"), AfterValidator(_calendar_date)]


class Freshness(Record):
    """A current-evidence requirement: evidence older than this, or superseded, is stale (I16)."""

    as_of: IsoDate
    max_age_days: Annotated[int, Field(ge=0)] | None = None


class Obligation(Record):
    id: NodeId
    kind: ObligationKind
    query: Query
    query_class: QueryClass
    hard_filters: tuple[Filter, ...] = ()
    soft_filters: tuple[Filter, ...] = ()
    k: Annotated[int, Field(ge=1, le=1000)] = 10
    freshness: Freshness | None = None
    egress: Egress = Egress.LOCAL
    mandatory: bool = True
    required_coverage: SearchCoverage = SearchCoverage.HEURISTIC
    strategy: Strategy | None = None
    allow_contracts: tuple[str, ...] = ()
    deadline_ms: Annotated[int, Field(ge=1, le=600_000)] | None = None
    min_recall: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Approximate legs only where their calibrated recall bound reaches this; exact otherwise."""


class _Op(Record):
    id: NodeId

    def inputs_of(self) -> tuple[str, ...]:
        raise NotImplementedError


class _Inputs(_Op):
    inputs: Annotated[tuple[NodeId, ...], Field(min_length=1)]

    def inputs_of(self) -> tuple[str, ...]:
        return self.inputs


class UnionOp(_Inputs):
    """Everything its inputs found; with ``k``, only the best ``k`` of the fused ranking.

    Inputs whose contracts share a score calibration fuse by the sum of their calibrated
    similarities, the others by RRF (I11); only a ``k`` makes early stop possible (I9).
    """

    op: Literal["union"]
    k: Annotated[int, Field(ge=1, le=1000)] | None = None


class CascadeOp(_Inputs):
    """Run stages in order; the next only if the previous was insufficient."""

    op: Literal["cascade"]
    min_hits: Annotated[int, Field(ge=1)] = 1


class FallbackOp(_Inputs):
    """Run stages in order; the next only on error, timeout or ineligibility."""

    op: Literal["fallback"]


class IntersectOp(_Inputs):
    op: Literal["intersect"]


class JoinOp(_Op):
    """Left evidence whose document has a ``via`` edge to a document in the right input."""

    op: Literal["join"]
    left: NodeId
    right: NodeId
    via: Annotated[str, Field(min_length=1)]
    direction: Literal["out", "in"] = "out"

    def inputs_of(self) -> tuple[str, ...]:
        return (self.left, self.right)


class RefineOp(_Op):
    """A residual filter or reorder over one input."""

    op: Literal["refine"]
    input: NodeId
    filters: tuple[Filter, ...] = ()
    order_by: Literal["date_desc", "date_asc"] | None = None

    def inputs_of(self) -> tuple[str, ...]:
        return (self.input,)


class RelevanceFloor(Record):
    """Which hits of one input are relevant enough for their origin to count: the best
    ``top_n`` of the input's ranking, and/or those at least as relevant as ``native_score``
    in the hit's own score kind (a BM25 score at least it, a distance at most it)."""

    input: NodeId
    top_n: Annotated[int, Field(ge=1)] | None = None
    native_score: float | None = None

    @model_validator(mode="after")
    def _some_floor(self) -> RelevanceFloor:
        if self.top_n is None and self.native_score is None:
            raise ValueError(f"relevance floor for {self.input!r} needs 'top_n' and/or 'native_score'")
        return self


class CorroborateOp(_Inputs):
    """Needs ``min_independent`` distinct current origin components, not retrievers (I13).

    Only origins of current (not stale) evidence count; with ``floors``, only origins of
    hits that clear their input's relevance floor."""

    op: Literal["corroborate"]
    min_independent: Annotated[int, Field(ge=1)] = 2
    floors: tuple[RelevanceFloor, ...] = ()

    @model_validator(mode="after")
    def _floors_name_inputs(self) -> CorroborateOp:
        for floor in self.floors:
            if floor.input not in self.inputs:
                raise ValueError(f"relevance floor names {floor.input!r}, which is not an input of {self.id!r}")
        if len({f.input for f in self.floors}) != len(self.floors):
            raise ValueError(f"corroborate {self.id!r} gives one input two relevance floors")
        return self


class OpposeOp(_Op):
    op: Literal["oppose"]
    support: NodeId
    refutation: NodeId

    def inputs_of(self) -> tuple[str, ...]:
        return (self.support, self.refutation)


class FreshenOp(_Op):
    op: Literal["freshen"]
    input: NodeId
    as_of: IsoDate
    max_age_days: Annotated[int, Field(ge=0)] | None = None
    mode: Literal["drop", "mark"] = "mark"

    def inputs_of(self) -> tuple[str, ...]:
        return (self.input,)


LogicalOperator = (
    UnionOp | CascadeOp | FallbackOp | IntersectOp | JoinOp | RefineOp | CorroborateOp | OpposeOp | FreshenOp
)
Operator = Annotated[LogicalOperator, Field(discriminator="op")]

COMMUTATIVE = frozenset({"union", "intersect", "corroborate"})


class Budget(Record):
    deadline_ms: Annotated[int, Field(ge=1, le=600_000)] = 10_000
    leg_timeout_ms: Annotated[int, Field(ge=1, le=600_000)] = 5_000
    max_nodes: Annotated[int, Field(ge=1, le=MAX_NODES_CEILING)] = 256
    max_alternatives_per_group: Annotated[int, Field(ge=1, le=64)] = 8
    max_memo_alternatives: Annotated[int, Field(ge=1, le=100_000)] = 4096
    max_concurrency_per_backend: Annotated[int, Field(ge=1, le=256)] = 8


class Generations(Record):
    """The caller's generations; each one enters every plan and cache fingerprint (I6)."""

    identity: str = "0"
    source_dependence: str = "0"
    freshness: str = "0"
    authority: str = "0"


class LogicalPlan(Record):
    schema_version: Literal["race.plan/1"]
    obligations: Annotated[tuple[Obligation, ...], Field(min_length=1)]
    operators: tuple[Operator, ...] = ()
    root: NodeId
    budget: Budget = Budget()
    generations: Generations = Generations()
    contracts: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _bounded(self) -> LogicalPlan:
        size = len(self.obligations) + len(self.operators)
        if size > self.budget.max_nodes:
            raise ValueError(f"plan has {size} nodes; budget.max_nodes is {self.budget.max_nodes}")
        if size > self.budget.max_memo_alternatives:
            # Every node is one memo group and needs at least one alternative to be planned.
            raise ValueError(
                f"plan has {size} nodes; budget.max_memo_alternatives is {self.budget.max_memo_alternatives}"
                " (every node needs at least one alternative)"
            )
        return self

    def obligation(self, node_id: str) -> Obligation | None:
        return next((o for o in self.obligations if o.id == node_id), None)

    def operator(self, node_id: str) -> LogicalOperator | None:
        return next((o for o in self.operators if o.id == node_id), None)


def parse_plan(data: bytes | str, *, where: str = "plan") -> LogicalPlan:
    """Parse, validate and normalize a plan document; one ``PlanError`` names the place."""
    return plan_from_dict(read_json(data, where=where, error=PlanError), where=where)


def plan_from_dict(raw: object, *, where: str = "plan") -> LogicalPlan:
    if not isinstance(raw, dict):
        raise PlanError("a plan must be a JSON object", where=where)
    if raw.get("schema_version") != PLAN_SCHEMA_VERSION:
        raise PlanError(
            f"field 'schema_version' must be {PLAN_SCHEMA_VERSION!r}, got {raw.get('schema_version')!r}", where=where
        )
    size = len(raw.get("obligations") or []) + len(raw.get("operators") or [])
    if size > MAX_NODES_CEILING:
        raise BoundExceeded(f"plan has {size} nodes; at most {MAX_NODES_CEILING} are accepted", where=where)
    try:
        plan = LogicalPlan.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["type"] == "value_error" and "; budget.max_" in str(err["msg"]):
            raise BoundExceeded(str(err["msg"]).removeprefix("Value error, "), where=where) from exc
        raise PlanError(_located(first_validation_error(exc), raw), where=where) from exc
    check_graph(plan, where=where)
    return normalize(plan)


def _located(message: str, raw: dict[str, object]) -> str:
    """Add the node id to a field path like ``obligations.2.kind`` so the error names the node."""
    prefix = message.removeprefix("field '").split("'", 1)[0]
    parts = prefix.split(".")
    if len(parts) >= 2 and parts[0] in ("obligations", "operators") and parts[1].isdigit():
        items = raw.get(parts[0])
        if isinstance(items, list) and int(parts[1]) < len(items) and isinstance(items[int(parts[1])], dict):
            node = items[int(parts[1])].get("id")
            if node is not None:
                return f"node {node!r}: {message}"
    return message


def check_graph(plan: LogicalPlan, *, where: str = "plan") -> None:
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


@lru_cache(maxsize=4096)
def _filter_key(f: Filter) -> str:
    # Filters are frozen and hash by value, so equal filters share one key.
    return fingerprint(f)


def is_normalized(plan: LogicalPlan) -> bool:
    """Whether ``plan`` is already in the form ``normalize`` gives (``parse_plan`` output is)."""

    def ordered(filters: tuple[Filter, ...]) -> bool:
        keys = [_filter_key(f) for f in filters]
        return keys == sorted(keys)

    ids = [o.id for o in plan.obligations]
    op_ids = [o.id for o in plan.operators]
    if ids != sorted(ids) or op_ids != sorted(op_ids):
        return False
    if not all(ordered(o.hard_filters) and ordered(o.soft_filters) for o in plan.obligations):
        return False
    for op in plan.operators:
        if op.op in COMMUTATIVE and isinstance(op, _Inputs) and list(op.inputs) != sorted(op.inputs):
            return False
        if isinstance(op, RefineOp) and not ordered(op.filters):
            return False
    return True


def normalize(plan: LogicalPlan) -> LogicalPlan:
    """Canonical form: nodes sorted by id, commutative inputs and filters sorted."""
    obligations = tuple(
        o.model_copy(
            update={
                "hard_filters": tuple(sorted(o.hard_filters, key=_filter_key)),
                "soft_filters": tuple(sorted(o.soft_filters, key=_filter_key)),
            }
        )
        for o in sorted(plan.obligations, key=lambda o: o.id)
    )
    operators = []
    for op in sorted(plan.operators, key=lambda o: o.id):
        if op.op in COMMUTATIVE and isinstance(op, _Inputs):
            op = op.model_copy(update={"inputs": tuple(sorted(op.inputs))})
        if isinstance(op, RefineOp):
            op = op.model_copy(update={"filters": tuple(sorted(op.filters, key=_filter_key))})
        operators.append(op)
    return plan.model_copy(update={"obligations": obligations, "operators": tuple(operators)})


def logical_fingerprint(plan: LogicalPlan) -> str:
    """``fingerprint(normalize(plan))``, computed on the plan's JSON data without rebuilding models.

    A plan already in normal form is its own normalization: its digest, which the engine
    computes once per plan object for the plan cache, is the logical fingerprint.
    """
    if is_normalized(plan):
        return plan_digest(plan)
    data = canonical_data(plan)
    obligations = sorted(data["obligations"], key=lambda o: o["id"])
    for ob in obligations:
        ob["hard_filters"] = sorted(ob["hard_filters"], key=_data_key)
        ob["soft_filters"] = sorted(ob["soft_filters"], key=_data_key)
    operators = sorted(data["operators"], key=lambda o: o["id"])
    for op in operators:
        if op["op"] in COMMUTATIVE:
            op["inputs"] = sorted(op["inputs"])
        if op["op"] == "refine":
            op["filters"] = sorted(op["filters"], key=_data_key)
    data["obligations"], data["operators"] = obligations, operators
    return fingerprint_bytes(dumps_canonical(data))


def _data_key(item: Any) -> str:
    """``fingerprint`` of canonical data, which is what ``normalize`` sorts filters by."""
    return fingerprint_bytes(dumps_canonical(item))


_RECENT_DIGESTS: list[tuple[weakref.ref[LogicalPlan], dict[str, str], str]] = []
_RECENT_LIMIT = 64


def plan_digest(plan: LogicalPlan) -> str:
    """The fingerprint of this plan exactly as given (not normalized), computed once per object.

    A plan cache key must change whenever the plan does. Every field of a ``LogicalPlan`` is
    immutable except the ``contracts`` dict, so the digests of the most recently seen plan
    objects are kept (held weakly, found by identity) and reused while that dict is unchanged.
    """
    for ref, contracts, digest in _RECENT_DIGESTS:
        if ref() is plan:
            if contracts == plan.contracts:
                return digest
            break
    digest = fingerprint(plan)
    alive = [entry for entry in _RECENT_DIGESTS if (found := entry[0]()) is not None and found is not plan]
    _RECENT_DIGESTS[:] = [(weakref.ref(plan), dict(plan.contracts), digest), *alive[: _RECENT_LIMIT - 1]]
    return digest


def plan_json_schema() -> dict[str, object]:
    return LogicalPlan.model_json_schema()
