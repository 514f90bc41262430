"""Freshness: which evidence is stale, and what an outcome looks like with it marked (I16).

Evidence is stale when any of its hits says it was superseded or retracted (in any letter
case) in the field that plays the ``status`` role, when the field that plays ``date`` puts it
before a ``max_age_days`` bound, or when the graph has an edge of a relation that plays
``supersedes`` into it (or ``superseded_by`` out of it); roles are read from the index's
schema (``race.run.roles``), never from field or relation names. An undated document under an age
bound is kept with an ``unknown_age`` caveat. Stale evidence is kept and marked (or dropped
by a ``freshen`` in drop mode) and never counts toward a current requirement. Without the
graph, supersession by edge cannot be checked, and the outcome says so. Nothing here changes
its input: marking returns new items.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Protocol

from race.receipt import Roles
from race.run.legs import failure_detail
from race.run.outcome import Item, gap
from race.run.roles import DEFAULT_ROLES
from rsc import EvidenceStatus, Gap, GapKind

_STALE_STATUSES = frozenset({"superseded", "retracted"})


class Lineage(Protocol):
    """What the graph backend offers the runtime: source dependence and relations."""

    def origins(self, node_ids: Sequence[str]) -> dict[str, str]: ...

    def related(self, ids: Sequence[str], relation: str, direction: str) -> dict[str, tuple[str, ...]]: ...


def age_limit(as_of: str, max_age_days: int | None) -> str | None:
    if max_age_days is None:
        return None
    try:
        return (dt.date.fromisoformat(as_of) - dt.timedelta(days=max_age_days)).isoformat()
    except OverflowError:
        return dt.date.min.isoformat()


def stale_reasons(
    items: Sequence[Item],
    *,
    as_of: str,
    max_age_days: int | None,
    lineage: Lineage | None,
    node: str,
    roles: Roles = DEFAULT_ROLES,
) -> tuple[dict[str, str], tuple[Gap, ...]]:
    """Why each stale item (by key) is stale, and the gaps of checks that could not be made.

    Every hit of an item is read: one whose ``status`` role says the document is superseded
    or retracted (in any letter case), or whose ``date`` role dates it before the age limit,
    makes the item stale."""
    limit = age_limit(as_of, max_age_days)
    superseded, gaps = _superseded(items, lineage, node, roles)
    reasons: dict[str, str] = {}
    undated: set[str] = set()
    for item in items:
        metas = [h.metadata for h in item.hits]
        statuses = sorted({_status(m, roles.status) for m in metas} & _STALE_STATUSES)
        dates = sorted(_dates(metas, roles.date))
        why: str | None = None
        if statuses:
            why = f"{item.doc_id} is {statuses[0]}"
        elif limit is not None and dates and dates[0] < limit:
            why = f"{item.doc_id} dated {dates[0]} is older than {limit}"
        elif item.doc_id in superseded:
            why = f"{item.doc_id} is superseded by {', '.join(superseded[item.doc_id])}"
        elif limit is not None and not dates:
            undated.add(item.doc_id)
        if why is not None:
            reasons[item.key] = why
    if undated:
        names = sorted(undated)
        detail = (
            f"{len(names)} {'document has' if len(names) == 1 else 'documents have'} no date, so their age under "
            f"max_age_days is unknown: {', '.join(names)}"
        )
        gaps = (*gaps, gap(GapKind.UNKNOWN_AGE, node, detail, caveat=True))
    return reasons, gaps


def _status(metadata: Mapping[str, object], field: str | None) -> str:
    return str(metadata.get(field, "")).strip().lower() if field is not None else ""


def _dates(metas: Sequence[Mapping[str, object]], field: str | None) -> list[str]:
    # A datetime (``...T...Z``) compares with a date bound by its calendar day.
    if field is None:
        return []
    return [str(m[field])[:10] for m in metas if m.get(field) not in (None, "")]


def _superseded(
    items: Sequence[Item], lineage: Lineage | None, node: str, roles: Roles
) -> tuple[Mapping[str, tuple[str, ...]], tuple[Gap, ...]]:
    """Each document an edge of a superseding relation makes stale -> its superseders. A
    schema with no superseding relation has nothing to check."""
    relations = roles.supersession()
    if not items or not relations:
        return {}, ()
    if lineage is None:
        detail = "the graph backend is not open: supersession by edge could not be checked"
        return {}, (gap(GapKind.UNCHECKED_SUPERSESSION, node, detail, caveat=True),)
    docs = sorted({i.doc_id for i in items})
    by: dict[str, set[str]] = {}
    try:
        for relation, direction in relations:
            for doc, found in lineage.related(docs, relation, direction).items():
                by.setdefault(doc, set()).update(found)
    except Exception as exc:
        detail = f"supersession edges could not be read ({failure_detail(exc)})"
        return {}, (gap(GapKind.UNCHECKED_SUPERSESSION, node, detail, "graph"),)
    return {d: tuple(sorted(found)) for d, found in sorted(by.items()) if found}, ()


def marked(items: Sequence[Item], reasons: Mapping[str, str]) -> tuple[Item, ...]:
    """``items`` with the stale ones marked, in the same order."""
    return tuple(i.with_status(EvidenceStatus.STALE_EVIDENCE) if i.key in reasons else i for i in items)


def current_first(items: Sequence[Item]) -> tuple[Item, ...]:
    return tuple(i for i in items if not i.stale) + tuple(i for i in items if i.stale)
