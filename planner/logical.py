"""The logical plan: typed retrieval obligations (leaves) joined by typed operators.

A plan is input, never derived (I1). ``parse_plan`` turns JSON bytes into a validated
``LogicalPlan`` or raises one ``PlanError`` that names the place; ``normalize`` gives the
canonical form whose fingerprint identifies the plan whatever the key order of its file.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from planner.operators import (
    COMMUTATIVE,
    LogicalOperator,
    NodeId,
    Obligation,
    Operator,
    RefineOp,
    _Inputs,
)
from planner.validate import check_graph
from rsc import (
    BoundExceeded,
    Filter,
    PlanError,
    Record,
    canonical_data,
    dumps_canonical,
    fingerprint,
    fingerprint_bytes,
    first_validation_error,
)
from rsc.canonical import read_json
from rsc.suggest import schema_version_error

PLAN_SCHEMA_VERSION = "race.plan/1"
MAX_NODES_CEILING = 4096


class Budget(Record):
    deadline_ms: Annotated[int, Field(ge=1, le=600_000)] = 10_000
    """The whole plan's deadline, in milliseconds; legs still running then are cancelled (``cancelled`` gaps)."""
    leg_timeout_ms: Annotated[int, Field(ge=1, le=600_000)] = 5_000
    """Each leg's own deadline, in milliseconds (``timeout`` gap when it passes)."""
    max_nodes: Annotated[int, Field(ge=1, le=MAX_NODES_CEILING)] = 256
    """The most obligations and operators the plan may have; a larger plan is refused as bad input."""
    max_alternatives_per_group: Annotated[int, Field(ge=1, le=64)] = 8
    """The most physical alternatives the optimizer keeps for one memo group; the rest are pruned and explained."""
    max_memo_alternatives: Annotated[int, Field(ge=1, le=100_000)] = 4096
    """The most alternatives in the whole memo."""
    max_concurrency_per_backend: Annotated[int, Field(ge=1, le=256)] = 8
    """The most legs one backend serves at once."""


class Generations(Record):
    """The caller's generations; each one enters every plan and cache fingerprint (I6)."""

    identity: str = "0"
    """The caller's generation of entity identity (what ids mean)."""
    source_dependence: str = "0"
    """The caller's generation of source-dependence lineage (which sources derive from which)."""
    freshness: str = "0"
    """The caller's generation of freshness facts (what supersedes what)."""
    authority: str = "0"
    """The caller's generation of source authority."""


class LogicalPlan(Record):
    schema_version: Literal["race.plan/1"]
    """Always ``race.plan/1``."""
    obligations: Annotated[tuple[Obligation, ...], Field(min_length=1)]
    """The retrieval obligations: the plan's leaves."""
    operators: tuple[Operator, ...] = ()
    """The operators that compose obligations and other operators."""
    root: NodeId
    """The id of the node whose answer is the plan's answer."""
    budget: Budget = Budget()
    """The plan's deadlines and size bounds."""
    generations: Generations = Generations()
    """The caller's generations; each enters every plan and cache fingerprint (I6)."""
    contracts: dict[str, str] = Field(default_factory=dict)
    """Version ranges pinned per contract id (npm semantics, e.g. ``{"tantivy.bm25": "^1.0"}``); no version in range
    fails closed."""

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

    @cached_property
    def _by_id(self) -> tuple[dict[str, Obligation], dict[str, LogicalOperator]]:
        # A node is looked up once per node a run reaches: by id, not by a scan of the plan.
        return {o.id: o for o in self.obligations}, {o.id: o for o in self.operators}

    def obligation(self, node_id: str) -> Obligation | None:
        return self._by_id[0].get(node_id)

    def operator(self, node_id: str) -> LogicalOperator | None:
        return self._by_id[1].get(node_id)


PlanInput = LogicalPlan | Mapping[str, Any] | str | bytes | os.PathLike[str]
"""A plan as a caller gives one: parsed, as its JSON object, a path to its file (``str`` or
``PathLike``), or its JSON text as ``bytes``."""


def parse_plan(data: bytes | str, *, where: str = "plan") -> LogicalPlan:
    """Parse, validate and normalize a plan document; one ``PlanError`` names the place."""
    return plan_from_dict(read_json(data, where=where, error=PlanError), where=where)


def plan_from_input(plan: PlanInput, *, where: str = "plan") -> LogicalPlan:
    """A plan as a caller gives one (``PlanInput``), parsed: a path's file is read, a ``str``
    holding JSON text is refused (it names a file), bytes are JSON text, a mapping its object."""
    if isinstance(plan, LogicalPlan):
        return plan
    if isinstance(plan, str | os.PathLike):
        path = Path(plan)
        if isinstance(plan, str) and plan.lstrip().startswith("{"):
            raise PlanError("a str names a plan file; give JSON text as bytes (text.encode())", where=where)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise PlanError(f"cannot read: {exc.strerror}", where=str(path)) from exc
        return parse_plan(data, where=str(path))
    if isinstance(plan, bytes):
        return parse_plan(plan, where=where)
    return plan_from_dict(dict(plan), where=where)


def plan_from_dict(raw: object, *, where: str = "plan") -> LogicalPlan:
    if not isinstance(raw, dict):
        raise PlanError("a plan must be a JSON object", where=where)
    if "$schema" in raw:
        # An editor's pointer to the published schema (docs/schemas/plan.schema.json): accepted and
        # ignored, so it never enters the plan or its fingerprint.
        if not isinstance(raw["$schema"], str):
            raise PlanError(f"field '$schema' must be a string (a schema URI), got {raw['$schema']!r}", where=where)
        raw = {k: v for k, v in raw.items() if k != "$schema"}
    wrong = schema_version_error(raw, PLAN_SCHEMA_VERSION)
    if wrong is not None:
        raise PlanError(wrong, where=where)
    size = len(raw.get("obligations") or []) + len(raw.get("operators") or [])
    if size > MAX_NODES_CEILING:
        raise BoundExceeded(f"plan has {size} nodes; at most {MAX_NODES_CEILING} are accepted", where=where)
    try:
        plan = LogicalPlan.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["type"] == "value_error" and "; budget.max_" in str(err["msg"]):
            raise BoundExceeded(str(err["msg"]).removeprefix("Value error, "), where=where) from exc
        raise PlanError(_located(first_validation_error(exc, LogicalPlan), raw), where=where) from exc
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
