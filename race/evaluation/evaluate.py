"""Retrieval quality: which strategy finds what, measured against graded judgments.

A query set (``{"id", "text", "category"?, "handle"?, "hard_filters"?}`` per JSONL line)
expands into one single-obligation plan per strategy — ``lexical`` (BM25), ``conceptual``
(dense vectors), ``hybrid`` (BM25 + vectors, RRF) and ``exact`` (identifier lookup, on the
query's ``handle`` where it names one, else its text). Labelled plans (``{"query",
"strategy", "plan"}`` per line) are evaluated as they are. Each receipt becomes a document
ranking (evidence in rank order, first hit of each document: MaxP), ``race.evaluation.streaming``
runs the query set, and ``race.evaluation.stats`` scores it with ir-measures.

Every relevant document a strategy missed at the cutoff is a work order that says where it
ranked in each leg of the strategies asked (a deep lexical or dense probe of the same query,
the exact lookup) and what lost it: ``gap`` (the obligation was not satisfied, or a shortfall gap),
``filter`` (a hard filter of the query excludes the document), ``truncation`` (the strategy
returned it, below the cutoff) or ``ranking`` (the strategy did not return it at all).

A run whose scored obligation did not search — a ``timeout``, ``cancelled`` or
``resource_limited`` shortfall gap — is not scored: it leaves that strategy's means (it is
neither a miss nor a hit) and is counted as not scored with its reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError

from race.evaluation.stats import WorkOrder
from rsc import Filter, GapKind, GapSeverity, InputError, Record

if TYPE_CHECKING:
    from race.receipt import Receipt

STRATEGIES: dict[str, str] = {
    "lexical": "lexical",
    "conceptual": "conceptual",
    "hybrid": "broad_question",
    "exact": "identifier",
}
"""Strategy -> the query class whose default strategy it is."""


class EvalQuery(Record):
    id: str
    text: str
    category: str = ""
    handle: str | None = None
    """The identifier an exact lookup should use (a CVE number, an error code, a config key)."""
    hard_filters: tuple[dict[str, Any], ...] = ()


class Judgment(Record):
    query: str
    doc: str
    grade: int = Field(ge=0)
    passages: tuple[dict[str, Any], ...] = ()


class LabelledPlan(Record):
    query: str
    strategy: str
    plan: dict[str, Any]


class Ranking(Record):
    """One strategy's answer to one query, as documents in rank order."""

    docs: tuple[str, ...]
    status: str
    shortfalls: tuple[str, ...] = ()
    metadata: dict[str, dict[str, Any]] = Field(default_factory=dict)
    not_scored: str | None = None
    """Why the run is no measure of the strategy (``kind: detail`` of the gap), or None."""


NOT_SEARCHED = frozenset({GapKind.TIMEOUT, GapKind.CANCELLED, GapKind.RESOURCE_LIMITED})
"""Shortfall gaps after which a ranking says what the deadline or a bound left, not what the
strategy finds: such a run is not scored."""


def _jsonl(path: Path) -> list[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise InputError(f"not JSON: {exc.msg}", where=f"{path}:{n}") from exc
    return rows


def _parse(model: type[Record], path: Path, n: int, row: Any) -> Any:
    try:
        return model.model_validate(row)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"field {'.'.join(map(str, err['loc']))}: {err['msg']}", where=f"{path}:{n}") from exc


def load_queries(path: Path) -> tuple[EvalQuery, ...]:
    queries = tuple(_parse(EvalQuery, path, n, row) for n, row in _jsonl(path))
    if len({q.id for q in queries}) != len(queries):
        raise InputError("query ids repeat", where=str(path))
    return queries


def load_plans(path: Path) -> tuple[LabelledPlan, ...]:
    return tuple(_parse(LabelledPlan, path, n, row) for n, row in _jsonl(path))


def load_judgments(path: Path) -> tuple[Judgment, ...]:
    """Graded judgments from JSONL (``{"query", "doc", "grade"}``) or TREC qrels (``qid 0 doc grade``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    if text.lstrip().startswith("{"):
        return tuple(_parse(Judgment, path, n, row) for n, row in _jsonl(path))
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 4 or not parts[3].lstrip("-").isdigit():
            raise InputError("a TREC qrels line is 'query 0 doc grade'", where=f"{path}:{n}")
        out.append(Judgment(query=parts[0], doc=parts[2], grade=max(0, int(parts[3]))))
    return tuple(out)


def strategy_plan(query: EvalQuery, strategy: str, *, k: int) -> dict[str, Any]:
    """The single-obligation plan that asks ``query`` with ``strategy``."""
    if strategy not in STRATEGIES:
        raise InputError(f"unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)})", where="--strategies")
    text = query.handle if strategy == "exact" and query.handle else query.text
    obligation: dict[str, Any] = {
        "id": "q",
        "kind": "seek_support",
        "query": {"text": text},
        "query_class": STRATEGIES[strategy],
        "k": k,
        "required_coverage": "heuristic",
    }
    if query.hard_filters:
        obligation["hard_filters"] = list(query.hard_filters)
    return {
        "schema_version": "race.plan/1",
        "root": "q",
        "obligations": [obligation],
        "operators": [],
        "generations": {"identity": "race-eval/1", "source_dependence": "1", "freshness": "1", "authority": "1"},
    }


def ranking(receipt: Receipt, *, root: str | None = None) -> Ranking:
    """The receipt's evidence as documents in rank order; ``root`` names the obligation
    scored (where the plan's root is an operator, every obligation's gaps count)."""
    docs: list[str] = []
    metadata: dict[str, dict[str, Any]] = {}
    for item in sorted(receipt.evidence, key=lambda e: e.rank):
        hit = item.hits[0]
        if hit.doc_id not in metadata:
            docs.append(hit.doc_id)
            metadata[hit.doc_id] = dict(hit.metadata)
    shortfalls = sorted({g.kind.value for o in receipt.obligations for g in o.gaps if g.severity.value == "shortfall"})
    statuses = sorted({o.status.value for o in receipt.obligations})
    scored = [o for o in receipt.obligations if o.id == root] or list(receipt.obligations)
    stopped = [g for o in scored for g in o.gaps if g.kind in NOT_SEARCHED and g.severity is GapSeverity.SHORTFALL]
    return Ranking(
        docs=tuple(docs),
        status=",".join(statuses),
        shortfalls=tuple(shortfalls),
        metadata=metadata,
        not_scored=f"{stopped[0].kind.value}: {stopped[0].detail}" if stopped else None,
    )


def _passes(filters: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any]) -> bool:
    """Whether a document's metadata passes every hard filter, as the backends apply them."""
    return all(Filter.model_validate(f).matches(metadata) for f in filters)


Cause = Literal["gap", "filter", "truncation", "ranking"]


def work_orders(
    query: EvalQuery,
    strategy: str,
    answer: Ranking,
    legs: Mapping[str, Ranking],
    relevant: Mapping[str, int],
    *,
    cutoff: int,
) -> list[WorkOrder]:
    """The relevant documents ``strategy`` did not place in its top ``cutoff``, and why."""
    known: dict[str, dict[str, Any]] = {}
    for leg in legs.values():
        for doc, meta in leg.metadata.items():
            known.setdefault(doc, meta)
    orders = []
    for doc, grade in sorted(relevant.items(), key=lambda dg: (-dg[1], dg[0])):
        if grade <= 0 or doc in answer.docs[:cutoff]:
            continue
        ranks = {name: (leg.docs.index(doc) + 1 if doc in leg.docs else None) for name, leg in sorted(legs.items())}
        ranks[strategy] = answer.docs.index(doc) + 1 if doc in answer.docs else None
        cause: Cause
        if doc in answer.docs:
            cause, detail = "truncation", f"returned at rank {ranks[strategy]}, below the cutoff {cutoff}"
        elif query.hard_filters and doc in known and not _passes(query.hard_filters, known[doc]):
            cause, detail = "filter", "a hard filter of the query excludes the document"
        elif answer.shortfalls or "satisfied" not in answer.status.split(","):
            cause = "gap"
            detail = f"obligation {answer.status}; shortfall gaps: {', '.join(answer.shortfalls) or 'none'}"
        else:
            cause, detail = "ranking", f"not among the {len(answer.docs)} documents the strategy returned"
        orders.append(
            WorkOrder(query=query.id, strategy=strategy, doc=doc, grade=grade, cause=cause, ranks=ranks, detail=detail)
        )
    return orders
