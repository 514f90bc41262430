"""A typed plan builder: a ``race.plan/1`` document written in Python, checked by mypy.

``Plan(root, *nodes, budget=…)`` over nodes made by ``obligation(…)`` and one function per
operator (``union``, ``cascade``, ``fallback``, ``intersect``, ``join``, ``refine``,
``corroborate``, ``oppose``, ``freshen``). Every closed vocabulary (obligation kinds, query
classes, strategies, coverage, filter operators, directions) is a ``Literal`` type, so a plain
string is accepted where the plan's enum is expected and a misspelt one is a mypy error.

The builder writes exactly the JSON a user would write by hand, keeping only the fields given:
``Plan.to_dict()`` is that document, ``Plan.build()`` the ``LogicalPlan`` that ``parse_plan``
gives for it (validated and normalized, with the same fingerprint), and an operator's input is
a node id or the node itself (nested nodes join the plan).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Required, TypeAlias, TypedDict

from race.search import KindName, StrategyName, Where
from rsc import InputError

if TYPE_CHECKING:
    from planner import LogicalPlan

QueryClassName = Literal["identifier", "lexical", "symbol_relation", "dependency", "conceptual", "broad_question"]
CoverageName = Literal[
    "exhaustive_for_declared_fragment", "bounded_structural", "heuristic", "partial_backend", "unknown"
]
EgressName = Literal["local", "remote_ok"]
FilterOpName = Literal["eq", "ne", "in", "not_in", "range", "prefix", "exists", "any_of"]
OperatorName = Literal[
    "union", "cascade", "fallback", "intersect", "join", "refine", "corroborate", "oppose", "freshen"
]
Scalar: TypeAlias = str | int | float | bool


class FilterSpec(TypedDict, total=False):
    """One typed filter as the plan writes it: ``{"field": "status", "op": "eq", "value": "fixed"}``
    (``op`` defaults to ``eq``; ``ne`` and ``prefix`` take ``value``, ``in``/``not_in`` ``values``,
    ``range`` ``gte`` and/or ``lte``, ``exists`` nothing, and ``any_of`` a list of filters and no
    ``field``)."""

    field: str
    op: FilterOpName
    value: Scalar
    values: Sequence[Scalar]
    gte: Scalar
    lte: Scalar
    any_of: Sequence[FilterSpec]


Filters: TypeAlias = Where | Sequence[FilterSpec]
"""Filters as a ``race.search`` expression (``Field("status") == "fixed"``) or filter dicts."""


class PatternSpec(TypedDict, total=False):
    """A graph traversal from the query's entities (``query.pattern``)."""

    relations: Sequence[str]
    direction: Literal["out", "in", "both"]
    depth: int
    node_budget: int


class FreshnessSpec(TypedDict, total=False):
    """An obligation's current-evidence requirement."""

    as_of: Required[str]
    max_age_days: int


class FloorSpec(TypedDict, total=False):
    """A corroborate input's relevance floor: its best ``top_n`` hits and/or a native score."""

    input: Required[str]
    top_n: int
    native_score: float


class BudgetSpec(TypedDict, total=False):
    """The plan's deadlines and size bounds (``budget``); unset keys keep their defaults."""

    deadline_ms: int
    leg_timeout_ms: int
    max_nodes: int
    max_alternatives_per_group: int
    max_memo_alternatives: int
    max_concurrency_per_backend: int


class GenerationsSpec(TypedDict, total=False):
    """The caller's generations (``generations``)."""

    identity: str
    source_dependence: str
    freshness: str
    authority: str


@dataclass(frozen=True)
class Node:
    """One obligation or operator: its id, its JSON object, and the nodes given as its inputs."""

    id: str
    data: Mapping[str, Any]
    children: tuple[Node, ...] = field(default=(), repr=False)
    is_obligation: bool = True

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.data))  # type: ignore[no-any-return]


Input: TypeAlias = Node | str
"""An operator's input: a node id, or the node itself."""


def _given(**fields: Any) -> dict[str, Any]:
    """The fields a caller gave (``None`` is not given), sequences as lists, as JSON writes them."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, tuple):
            value = list(value)
        out[key] = value
    return out


def _filters(filters: Filters | None, where: str) -> list[dict[str, Any]] | None:
    if filters is None:
        return None
    if isinstance(filters, Where):
        return [dict(f) for f in filters.filters]
    if isinstance(filters, str | bytes | Mapping):
        raise InputError("filters are a Where expression or a list of filter dicts", where=where)
    return [_given(**f) for f in filters]


def _seq(values: Iterable[Any] | None) -> list[Any] | None:
    return None if values is None else list(values)


def obligation(
    id: str,
    kind: KindName,
    *,
    query_class: QueryClassName,
    text: str | None = None,
    ids: Sequence[str] | None = None,
    entities: Sequence[str] | None = None,
    pattern: PatternSpec | None = None,
    k: int | None = None,
    hard_filters: Filters | None = None,
    soft_filters: Filters | None = None,
    freshness: FreshnessSpec | None = None,
    egress: EgressName | None = None,
    mandatory: bool | None = None,
    required_coverage: CoverageName | None = None,
    strategy: StrategyName | None = None,
    allow_contracts: Sequence[str] | None = None,
    deadline_ms: int | None = None,
    min_recall: float | None = None,
    collapse: Literal["content", "origin"] | None = None,
) -> Node:
    """A retrieval obligation (a leaf): ``kind`` sought by ``text``, ``ids`` and/or ``entities``
    (with a graph ``pattern``), served by ``query_class``'s default strategy unless ``strategy``."""
    where = f"obligation {id!r}"
    query = _given(
        text=text,
        ids=_seq(ids),
        entities=_seq(entities),
        pattern=None if pattern is None else _given(**{**pattern, "relations": _seq(pattern.get("relations"))}),
    )
    data = _given(
        id=id,
        kind=kind,
        query=query,
        query_class=query_class,
        k=k,
        hard_filters=_filters(hard_filters, where),
        soft_filters=_filters(soft_filters, where),
        freshness=None if freshness is None else dict(freshness),
        egress=egress,
        mandatory=mandatory,
        required_coverage=required_coverage,
        strategy=strategy,
        allow_contracts=_seq(allow_contracts),
        deadline_ms=deadline_ms,
        min_recall=min_recall,
        collapse=collapse,
    )
    return Node(id, data)


def _ids(inputs: Sequence[Input]) -> tuple[list[str], tuple[Node, ...]]:
    return [i if isinstance(i, str) else i.id for i in inputs], tuple(i for i in inputs if isinstance(i, Node))


def _operator(id: str, op: OperatorName, named: Mapping[str, Input], /, **fields: Any) -> Node:
    refs = {key: (value if isinstance(value, str) else value.id) for key, value in named.items()}
    children = tuple(value for value in named.values() if isinstance(value, Node))
    return Node(id, _given(id=id, op=op, **refs, **fields), children, is_obligation=False)


def _stages(id: str, op: OperatorName, inputs: Sequence[Input], /, **fields: Any) -> Node:
    if not inputs:
        raise InputError(f"{op} needs at least one input", where=f"operator {id!r}")
    names, children = _ids(inputs)
    return Node(id, _given(id=id, op=op, inputs=names, **fields), children, is_obligation=False)


def union(id: str, *inputs: Input, k: int | None = None) -> Node:
    """Everything its inputs found, fused into one ranking; with ``k``, only the best ``k``."""
    return _stages(id, "union", inputs, k=k)


def cascade(id: str, *stages: Input, min_hits: int | None = None) -> Node:
    """Stages in order, the next only if the previous found fewer than ``min_hits`` current hits."""
    return _stages(id, "cascade", stages, min_hits=min_hits)


def fallback(id: str, *stages: Input) -> Node:
    """Stages in order, the next only on error, timeout or ineligibility."""
    return _stages(id, "fallback", stages)


def intersect(id: str, *inputs: Input) -> Node:
    """Only evidence every input found."""
    return _stages(id, "intersect", inputs)


def corroborate(
    id: str, *inputs: Input, min_independent: int | None = None, floors: Sequence[FloorSpec] | None = None
) -> Node:
    """Needs ``min_independent`` distinct current origins among its inputs' evidence (I13)."""
    return _stages(
        id,
        "corroborate",
        inputs,
        min_independent=min_independent,
        floors=None if floors is None else [_given(**f) for f in floors],
    )


def join(id: str, left: Input, right: Input, *, via: str, direction: Literal["out", "in"] | None = None) -> Node:
    """``left``'s evidence whose document has a ``via`` edge to a document in ``right``."""
    return _operator(id, "join", {"left": left, "right": right}, via=via, direction=direction)


def refine(
    id: str,
    input: Input,
    *,
    filters: Filters | None = None,
    order_by: Literal["date_desc", "date_asc"] | None = None,
) -> Node:
    """A residual filter or a reorder by date over one input."""
    return _operator(id, "refine", {"input": input}, filters=_filters(filters, f"operator {id!r}"), order_by=order_by)


def oppose(id: str, support: Input, refutation: Input) -> Node:
    """Support and refutation kept side by side; what both found is conflicting evidence."""
    return _operator(id, "oppose", {"support": support, "refutation": refutation})


def freshen(
    id: str,
    input: Input,
    *,
    as_of: str,
    max_age_days: int | None = None,
    mode: Literal["drop", "mark"] | None = None,
) -> Node:
    """Stale evidence as of ``as_of`` marked (ranked after current evidence) or dropped."""
    return _operator(id, "freshen", {"input": input}, as_of=as_of, max_age_days=max_age_days, mode=mode)


@dataclass(frozen=True)
class Plan:
    """A plan: its ``root`` (a node or its id) and every other node it uses that is not already
    given as some node's input, with its budget, generations and pinned contract ranges."""

    root: Input
    nodes: tuple[Node, ...]
    budget: BudgetSpec | None
    generations: GenerationsSpec | None
    contracts: Mapping[str, str] | None

    def __init__(
        self,
        root: Input,
        *nodes: Node,
        budget: BudgetSpec | None = None,
        generations: GenerationsSpec | None = None,
        contracts: Mapping[str, str] | None = None,
    ) -> None:
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "budget", budget)
        object.__setattr__(self, "generations", generations)
        object.__setattr__(self, "contracts", contracts)

    def _collected(self) -> list[Node]:
        """Every node once, depth first from the root then the nodes given, in that order."""
        found: dict[str, Node] = {}
        pending = [*self.nodes[::-1], *([self.root] if isinstance(self.root, Node) else [])]
        while pending:
            node = pending.pop()
            if not isinstance(node, Node):
                continue
            known = found.get(node.id)
            if known is not None:
                if known.data != node.data:
                    raise InputError(f"two different nodes have id {node.id!r}", where="plan")
                continue
            found[node.id] = node
            pending.extend(node.children[::-1])
        return list(found.values())

    def to_dict(self) -> dict[str, Any]:
        """The ``race.plan/1`` document, with only the fields given."""
        nodes = self._collected()
        data: dict[str, Any] = {
            "schema_version": "race.plan/1",
            "root": self.root if isinstance(self.root, str) else self.root.id,
            "obligations": [n.to_dict() for n in nodes if n.is_obligation],
        }
        operators = [n.to_dict() for n in nodes if not n.is_obligation]
        if operators:
            data["operators"] = operators
        for key, value in (("budget", self.budget), ("generations", self.generations), ("contracts", self.contracts)):
            if value is not None:
                data[key] = dict(value)
        return data

    def to_json(self, *, indent: int | None = 2) -> str:
        """The document as JSON text, ready for a plan file."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def build(self) -> LogicalPlan:
        """The validated, normalized ``LogicalPlan`` (as ``parse_plan`` gives for ``to_json()``);
        a bad plan is one ``PlanError`` naming the node."""
        from planner import plan_from_dict

        return plan_from_dict(self.to_dict(), where="plan")

    def fingerprint(self) -> str:
        """The plan's logical fingerprint, the same as its JSON file's."""
        from planner.logical import logical_fingerprint

        return logical_fingerprint(self.build())
