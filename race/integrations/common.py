"""What the framework adapters share: how an engine is given, the plan a query runs, and an
evidence item as flat, JSON-ready metadata that carries the receipt's gaps and coverage.

Every document or node of one answer carries the same ``race_gaps`` and ``race_coverage``: a
framework passes documents on one by one, so none of them is ever read without what was not
searched. An answer with no documents has its gaps on the receipt the adapter returns beside it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from race.engine import Engine
from rsc import InputError, canonical_data, canonical_json

if TYPE_CHECKING:
    from planner.logical import LogicalPlan
    from race.receipt import EvidenceItem, Receipt
    from race.search import StrategyName, WhereInput


def open_engine(engine: Engine | str | os.PathLike[str]) -> tuple[Engine, Path | None]:
    """The engine, and the index path it was opened from when given as a path (what a
    serialized component is rebuilt from)."""
    if isinstance(engine, Engine):
        return engine, None
    if isinstance(engine, str | os.PathLike):
        path = Path(engine)
        return Engine.open(path), path
    raise InputError(f"a retriever needs an Engine or an index path, not {type(engine).__name__}", where="engine")


MAX_BUDGET_MS = 600_000
"""The longest deadline a plan's budget admits."""


def check_budget(deadline_ms: int | None, leg_timeout_ms: int | None) -> None:
    """A deadline given is a whole number of milliseconds a plan's budget admits."""
    for name, value in (("deadline_ms", deadline_ms), ("leg_timeout_ms", leg_timeout_ms)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BUDGET_MS
        ):
            raise InputError(f"{name} is a whole number of milliseconds from 1 to {MAX_BUDGET_MS}", where=name)


def search_plan(
    engine: Engine,
    text: str,
    *,
    k: int,
    where: WhereInput,
    strategy: StrategyName | None,
    index: str | None,
    deadline_ms: int | None,
    leg_timeout_ms: int | None,
) -> LogicalPlan:
    """``engine.plan_for_search(...)`` with the budget's deadlines set where given."""
    check_budget(deadline_ms, leg_timeout_ms)
    plan = engine.plan_for_search(text, k=k, where=where, strategy=strategy, index=index)
    budget = {
        name: value
        for name, value in (("deadline_ms", deadline_ms), ("leg_timeout_ms", leg_timeout_ms))
        if value is not None
    }
    if not budget:
        return plan
    data = plan.model_dump()
    data["budget"] = {**data["budget"], **budget}
    return type(plan).model_validate(data)


def receipt_metadata(receipt: Receipt) -> dict[str, Any]:
    """What every document of an answer carries about the whole answer."""
    return {
        "race_gaps": [canonical_data(g) for g in receipt.gaps],
        "race_coverage": canonical_data(receipt.coverage),
        "race_obligation_status": {ob.id: ob.status.value for ob in receipt.obligations},
        "race_evidence_fingerprint": receipt.fingerprints.evidence,
    }


def item_metadata(item: EvidenceItem, beside: Mapping[str, Any]) -> dict[str, Any]:
    """One evidence item as metadata: the corpus's own fields of its best (first) hit, that
    hit's custody, the item's rank, status, obligations and fusion, every hit's custody
    (``race_custody``, in the item's order) and ``beside`` (``receipt_metadata``)."""
    best = item.hits[0]
    meta: dict[str, Any] = json.loads(canonical_json(best.metadata))
    meta.update(
        doc_id=best.doc_id,
        chunk_id=best.chunk_id,
        title=best.title,
        source_path=best.custody.source_path,
        line_start=best.custody.line_start,
        line_end=best.custody.line_end,
        source_hash=best.custody.source_hash,
    )
    meta.update(
        race_key=item.key,
        race_rank=item.rank,
        race_status=item.status.value,
        race_obligations=list(item.obligations),
        race_fusion=item.fusion.method,
        race_fused_score=item.fusion.score,
        race_custody=[
            {
                "backend": hit.custody.backend,
                "rsc": hit.custody.rsc,
                "rank": hit.custody.rank,
                "score": hit.custody.score,
                "score_kind": hit.custody.score_kind.value,
                "index_generation": hit.custody.index_generation,
                "doc_id": hit.doc_id,
                "chunk_id": hit.chunk_id,
                "source_path": hit.custody.source_path,
                "line_start": hit.custody.line_start,
                "line_end": hit.custody.line_end,
                "source_hash": hit.custody.source_hash,
            }
            for hit in item.hits
        ],
    )
    meta.update(beside)
    return meta


def content_of(item: EvidenceItem) -> str:
    """The best (first) hit's text."""
    return item.hits[0].text


def score_of(item: EvidenceItem) -> float | None:
    """The fused score the item's position was chosen by; ``None`` where one input's own order
    chose it (``single``): native scores of different kinds are not comparable, the rank is."""
    return None if item.fusion.score is None else float(item.fusion.score)


# -- Haystack's filter syntax -----------------------------------------------------------------

_COMPARISONS = {"==": "eq", "!=": "ne", "in": "in", "not in": "not_in", ">=": "gte", "<=": "lte"}


def haystack_filters(filters: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Haystack 2 metadata filters (``{"field": "meta.x", "operator": "==", "value": ...}``,
    joined by ``{"operator": "AND", "conditions": [...]}`` or ``"OR"``) as RACE's hard filters;
    an ``OR`` of comparisons is one ``any_of`` group. What RACE cannot hold as a hard filter
    (``NOT``, ``>``, ``<``, an ``OR`` over an ``AND``) is refused, never dropped: a filter left out
    would widen the answer without saying so."""
    if not filters:
        return []
    if not isinstance(filters, Mapping) or "operator" not in filters:
        raise InputError("filters are Haystack filters: a dict with an 'operator'", where="filters")
    operator = filters["operator"]
    if operator in ("AND", "OR"):
        conditions = filters.get("conditions")
        if not isinstance(conditions, Sequence) or isinstance(conditions, str):
            raise InputError(f"an {operator} filter needs a list of conditions", where="filters")
        found = [f for condition in conditions for f in haystack_filters(condition)]
        if operator == "AND":
            return found
        if len(found) != len(conditions) or any(f["op"] == "any_of" for f in found):
            raise InputError("an OR filter joins comparisons, not AND groups", where="filters")
        members = [m for f in found for m in (f.get("any_of") or [f])]
        return [{"op": "any_of", "any_of": members}]
    if operator not in _COMPARISONS:
        raise InputError(
            f"filter operator {operator!r} cannot be a RACE hard filter (AND or OR of ==, !=, in, not in, >=, <=)",
            where="filters",
        )
    field = filters.get("field")
    if not isinstance(field, str) or not field:
        raise InputError("a filter condition needs a field", where="filters")
    name = field.removeprefix("meta.")
    value = filters.get("value")
    op = _COMPARISONS[operator]
    if op in ("eq", "ne"):
        return [{"field": name, "op": op, "value": value}]
    if op in ("in", "not_in"):
        if not isinstance(value, Sequence) or isinstance(value, str):
            raise InputError(f"field {name!r}: {operator!r} needs a list of values", where="filters")
        return [{"field": name, "op": op, "values": list(value)}]
    return [{"field": name, "op": "range", op: value}]
