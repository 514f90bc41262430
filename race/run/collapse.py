"""An obligation's ``collapse`` option: one item per identical text or per origin component.

``content`` groups items by the sha256 of their text; ``origin`` by the origin component of
their document in the graph's source-dependence lineage (the one ``corroborate`` counts, I13).
Each group keeps its best-ranked item (ties by key) at that item's place; the others are
listed in it as collapsed copies with their rank, status and custody, never dropped.

An obligation asks for ``k`` items, and with copies the first ``k`` rows may hold far fewer
groups: its legs are read again, four times deeper each round (at most ``MAX_DEPTH`` rows),
until ``k`` groups are found or every leg is exhausted; the items of the first ``k`` groups
are kept. Without the graph, ``origin`` cannot be computed: nothing is collapsed, the first
``k`` items are kept as found and a caveat says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence

from planner import Obligation, ScanNode
from planner.operators import Collapse
from race.receipt import Collapsed, CollapsedCopy
from race.run.context import RunContext
from race.run.legs import Answer, failure_detail
from race.run.outcome import Item, Outcome, gap
from rsc import Gap, GapKind

MAX_DEPTH = 1000
"""The deepest a collapsing obligation reads each leg (rows), whatever its ``k``."""
_GROWTH = 4

Build = Callable[[Sequence[Answer]], Outcome]


def content_group(item: Item) -> str:
    text = item.hits[0].text if item.hits else item.key
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def groups_of(outcome: Outcome, mode: Collapse, ctx: RunContext, node: str) -> tuple[dict[str, str] | None, Gap | None]:
    """Each item's group (by key), or ``None`` and the caveat saying why none could be formed."""
    if mode == "content":
        return {item.key: content_group(item) for item in outcome.items}, None
    if ctx.lineage is None:
        why = (
            "collapse: origin needs the graph's source dependence, and the graph backend is not open: "
            "no copies were collapsed"
        )
        return None, gap(GapKind.WEAK_SOURCE, node, why, caveat=True)
    if not outcome.items:
        return {}, None
    try:
        origins = ctx.lineage.origins(sorted(outcome.docs()))
    except Exception as exc:
        why = f"collapse: origin could not read source dependence ({failure_detail(exc)}): no copies were collapsed"
        return None, gap(GapKind.WEAK_SOURCE, node, why, "graph", caveat=True)
    return {item.key: origins.get(item.doc_id, item.doc_id) for item in outcome.items}, None


async def read_collapsed(
    ob: Obligation, legs: Sequence[ScanNode], answers: Sequence[Answer], build: Build, ctx: RunContext
) -> tuple[Outcome, dict[str, str] | None, Sequence[Answer]]:
    """The items of the first ``ob.k`` groups, read as deep as it takes; their groups (``None``
    where none could be formed); and the answers they came from."""
    assert ob.collapse is not None
    depth = ob.k
    extra: list[Gap] = []
    while True:
        raw = build(answers)
        groups, unformed = groups_of(raw, ob.collapse, ctx, ob.id)
        if groups is None:
            assert unformed is not None
            return raw.replace(items=raw.items[: ob.k], gaps=(*raw.gaps, unformed)), None, answers
        order = list(dict.fromkeys(groups[i.key] for i in raw.items))
        exhausted = all(f.result is not None and (f.result.exhausted or len(f.result.hits) < depth) for f in answers)
        if len(order) >= ob.k or exhausted or depth >= MAX_DEPTH:
            break
        depth = min(depth * _GROWTH, MAX_DEPTH)
        reads = [(_deeper(leg, depth), ob.id, f"{ob.id}/{leg.rsc}@{depth}") for leg in legs]
        deeper = await ctx.fetch_all(reads)
        if any(found.result is None for found in deeper):
            extra += [g for found in deeper for g in found.gaps]
            break
        answers = deeper
    if len(order) < ob.k and not exhausted:
        why = (
            f"collapse: {ob.collapse} read {depth} rows per leg and found {len(order)} distinct of k={ob.k}; "
            "deeper rows were not read"
        )
        extra.append(gap(GapKind.RESOURCE_LIMITED, ob.id, why, caveat=True))
    keep = set(order[: ob.k])
    items = tuple(i for i in raw.items if groups[i.key] in keep)
    return raw.replace(items=items, gaps=(*raw.gaps, *extra)), groups, answers


def _deeper(scan: ScanNode, depth: int) -> ScanNode:
    return scan.model_copy(update={"request": scan.request.model_copy(update={"k": depth})})


def collapse(outcome: Outcome, mode: Collapse, groups: Mapping[str, str]) -> Outcome:
    """``outcome`` with one item per group, each kept item listing its group's other items."""
    members: dict[str, list[tuple[int, Item]]] = {}
    for rank, item in enumerate(outcome.items, start=1):
        members.setdefault(groups.get(item.key, item.key), []).append((rank, item))
    kept: list[tuple[int, Item]] = []
    for group, found in members.items():
        found.sort(key=lambda p: (p[0], p[1].key))
        rank, head = found[0]
        if mode == "origin":
            head = dataclasses.replace(head, origin=group)
        if len(found) > 1:
            prior = head.collapsed.copies if head.collapsed else ()
            copies = [c for r, i in found[1:] for c in _copies_of(r, i) if c.key != head.key]
            listed = Collapsed(by=mode, group=group, copies=_sorted((*prior, *copies)))
            head = dataclasses.replace(head, collapsed=listed)
        kept.append((rank, head))
    kept.sort(key=lambda p: (p[0], p[1].key))
    return outcome.replace(items=tuple(item for _, item in kept))


def _copies_of(rank: int, item: Item) -> tuple[CollapsedCopy, ...]:
    """``item`` as a copy, and the copies it had itself collapsed."""
    custody = item.hits[0].custody if item.hits else None
    own = CollapsedCopy(
        key=item.key,
        doc_id=item.doc_id,
        rank=rank,
        status=item.status,
        chunk_id=item.hits[0].chunk_id if item.hits else "",
        source_path=custody.source_path if custody else None,
        line_start=custody.line_start if custody else None,
        line_end=custody.line_end if custody else None,
        source_hash=custody.source_hash if custody else None,
    )
    return (own, *(item.collapsed.copies if item.collapsed else ()))


def _sorted(copies: Iterable[CollapsedCopy]) -> tuple[CollapsedCopy, ...]:
    unique = {c.key: c for c in sorted(copies, key=lambda c: (c.rank, c.key), reverse=True)}
    return tuple(sorted(unique.values(), key=lambda c: (c.rank, c.key)))
