"""What a physical node produces: an immutable ``Outcome`` of ranked ``Item``s.

Outcomes and items are frozen. An operator builds a new outcome from its inputs and never
changes them, so a node read by several parents is one value for every reader, whatever
order they run in (I5). Statuses, relations and provenance are sets and tuples that only a
new item can extend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from race.receipt import Collapsed, Fusion
from rsc import (
    EvidenceStatus,
    Gap,
    GapKind,
    GapSeverity,
    Hit,
    ObligationStatus,
    SearchCoverage,
    SupportClosure,
    canonical_float,
)

# Stronger statuses win when one evidence unit is reached along several paths.
STATUS_PRECEDENCE = (
    EvidenceStatus.STALE_EVIDENCE,
    EvidenceStatus.CONFLICTING_EVIDENCE,
    EvidenceStatus.CORROBORATED_FACT,
    EvidenceStatus.CANDIDATE_REFUTATION,
    EvidenceStatus.CANDIDATE_FACT,
    EvidenceStatus.DERIVED_RELATION,
    EvidenceStatus.RETRIEVED_OBSERVATION,
)
_RANKED = frozenset(STATUS_PRECEDENCE)
_NONE: frozenset[str] = frozenset()
_new = object.__new__
FAILURE_GAPS = frozenset({GapKind.TIMEOUT, GapKind.CANCELLED, GapKind.BACKEND_ERROR})


@dataclass(frozen=True)
class Item:
    """One evidence unit as a node sees it: its hits, the obligations that found it, and how
    its position was chosen."""

    key: str
    hits: tuple[Hit, ...] = ()
    obligations: frozenset[str] = frozenset()
    statuses: frozenset[EvidenceStatus] = frozenset()
    relations: frozenset[str] = frozenset()
    fusion: Fusion | None = None
    origin: str | None = None
    collapsed: Collapsed | None = None
    """The copies an obligation's ``collapse`` folded into this item (``race.run.collapse``)."""

    @staticmethod
    def found(
        key: str, hit: Hit, obligations: frozenset[str], statuses: frozenset[EvidenceStatus], fusion: Fusion
    ) -> Item:
        """``Item(key, (hit,), obligations, statuses, fusion=fusion)``, its fields set at once
        rather than one ``object.__setattr__`` each (a leg makes one per hit)."""
        item = _new(Item)
        item.__dict__.update(
            key=key,
            hits=(hit,),
            obligations=obligations,
            statuses=statuses,
            relations=_NONE,
            fusion=fusion,
            origin=None,
            collapsed=None,
        )
        return item

    @property
    def doc_id(self) -> str:
        return self.hits[0].doc_id if self.hits else self.key.split(":", 1)[-1]

    @property
    def stale(self) -> bool:
        return EvidenceStatus.STALE_EVIDENCE in self.statuses

    @property
    def status(self) -> EvidenceStatus:
        if len(self.statuses) == 1:
            (only,) = self.statuses
            if only in _RANKED:
                return only
        return next((s for s in STATUS_PRECEDENCE if s in self.statuses), EvidenceStatus.RETRIEVED_OBSERVATION)

    def merged(self, other: Item) -> Item:
        """This item and what ``other`` knows of the same unit; this item's provenance leads."""
        seen = {(h.custody.request, h.custody.rank) for h in self.hits}
        extra = tuple(h for h in other.hits if (h.custody.request, h.custody.rank) not in seen)
        return Item(
            key=self.key,
            hits=self.hits + extra,
            obligations=self.obligations | other.obligations,
            statuses=self.statuses | other.statuses,
            relations=self.relations | other.relations,
            fusion=self.fusion or other.fusion,
            origin=self.origin or other.origin,
            collapsed=_merged_copies(self.collapsed, other.collapsed),
        )

    @staticmethod
    def merged_all(views: Sequence[Item]) -> Item:
        """``views[0].merged(views[1]).merged(views[2])...`` in one pass: the same item, built
        once instead of once per view (a unit found by thousands of legs of a wide union)."""
        first = views[0]
        if len(views) == 1:
            return first
        hits = list(first.hits)
        seen = {(h.custody.request, h.custody.rank) for h in hits}
        obligations, statuses, relations = set(first.obligations), set(first.statuses), set(first.relations)
        fusion, origin, collapsed = first.fusion, first.origin, first.collapsed
        for other in views[1:]:
            extra = [h for h in other.hits if (h.custody.request, h.custody.rank) not in seen]
            seen.update((h.custody.request, h.custody.rank) for h in extra)
            hits += extra
            obligations |= other.obligations
            statuses |= other.statuses
            relations |= other.relations
            fusion = fusion or other.fusion
            origin = origin or other.origin
            collapsed = _merged_copies(collapsed, other.collapsed)
        return Item(
            key=first.key,
            hits=tuple(hits),
            obligations=frozenset(obligations),
            statuses=frozenset(statuses),
            relations=frozenset(relations),
            fusion=fusion,
            origin=origin,
            collapsed=collapsed,
        )

    def with_status(self, status: EvidenceStatus) -> Item:
        if status in self.statuses:
            return self
        # Built field by field: ``dataclasses.replace`` costs twice as much, once per hit.
        return Item(
            key=self.key,
            hits=self.hits,
            obligations=self.obligations,
            statuses=self.statuses | {status},
            relations=self.relations,
            fusion=self.fusion,
            origin=self.origin,
            collapsed=self.collapsed,
        )

    def replace(
        self,
        *,
        fusion: Fusion | None = None,
        origin: str | None = None,
        obligations: Iterable[str] = (),
        relations: Iterable[str] = (),
        statuses: Iterable[EvidenceStatus] = (),
    ) -> Item:
        return Item(
            key=self.key,
            hits=self.hits,
            obligations=self.obligations | frozenset(obligations),
            statuses=self.statuses | frozenset(statuses),
            relations=self.relations | frozenset(relations),
            fusion=fusion if fusion is not None else self.fusion,
            origin=origin if origin is not None else self.origin,
            collapsed=self.collapsed,
        )


def _merged_copies(first: Collapsed | None, second: Collapsed | None) -> Collapsed | None:
    """Every copy either view of one item collapsed, once, at its best rank; the first's grouping."""
    if first is None or second is None:
        return first or second
    best = {c.key: c for c in sorted((*first.copies, *second.copies), key=lambda c: (c.rank, c.key), reverse=True)}
    return first.model_copy(update={"copies": tuple(sorted(best.values(), key=lambda c: (c.rank, c.key)))})


@dataclass(frozen=True)
class Outcome:
    """A node's ranked items, its coverage and closure, and every gap below it.

    ``origins`` and ``opposition`` are what a corroborate or oppose node established; the
    runtime copies them into the operator's receipt. ``note`` is what an operator says of how it
    worked: a union's early-stop account, a corroborate's rule for counting origins."""

    node: str
    items: tuple[Item, ...]
    coverage: SearchCoverage
    closure: SupportClosure
    gaps: tuple[Gap, ...] = ()
    failed: bool = False
    origins: tuple[str, ...] | None = None
    opposition: SearchCoverage | None = None
    note: str | None = None

    @cached_property
    def by_key(self) -> Mapping[str, Item]:
        return {item.key: item for item in self.items}

    @property
    def ranking(self) -> tuple[str, ...]:
        return tuple(item.key for item in self.items)

    @property
    def current(self) -> tuple[Item, ...]:
        """The items that are not stale (I16)."""
        return tuple(item for item in self.items if not item.stale)

    def docs(self) -> frozenset[str]:
        return frozenset(item.doc_id for item in self.items)

    def replace(self, **changes: object) -> Outcome:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def failed_outcome(node: str, gaps: Sequence[Gap], coverage: SearchCoverage = SearchCoverage.UNKNOWN) -> Outcome:
    return Outcome(node, (), coverage, failure_closure(gaps), tuple(gaps), failed=True)


def gap(kind: GapKind, node: str, detail: str, backend: str | None = None, *, caveat: bool = False) -> Gap:
    return Gap(
        kind=kind,
        obligation=node,
        backend=backend,
        detail=detail,
        severity=GapSeverity.CAVEAT if caveat else GapSeverity.SHORTFALL,
    )


def failure_closure(gaps: Sequence[Gap]) -> SupportClosure:
    if any(g.kind is GapKind.RESOURCE_LIMITED for g in gaps):
        return SupportClosure.RESOURCE_LIMITED
    return SupportClosure.PARTIAL


def gap_key(g: Gap) -> tuple[object, ...]:
    """What tells two gaps apart: every field, the fraction as canonical JSON writes it. Equal
    keys are equal fingerprints, at a fraction of the cost (a wide plan has thousands of gaps)."""
    fraction = None if g.covered_fraction is None else canonical_float(g.covered_fraction)
    return (g.kind, g.obligation, g.backend, g.detail, g.severity, fraction)


def sorted_gaps(gaps: Iterable[Gap]) -> tuple[Gap, ...]:
    unique = {gap_key(g): g for g in gaps}
    # GapKind is a StrEnum: it sorts as its value.
    return tuple(sorted(unique.values(), key=lambda g: (g.obligation, g.kind, g.backend or "", g.detail)))


def shortfall(gaps: Iterable[Gap]) -> bool:
    return any(g.severity is GapSeverity.SHORTFALL for g in gaps)


def status_of(outcome: Outcome, gaps: Iterable[Gap], required: SearchCoverage | None = None) -> ObligationStatus:
    """An obligation's or operator's status: ``unsatisfied`` when it failed with nothing found,
    ``partial`` when short of its required coverage or with a shortfall gap, else ``satisfied``."""
    if outcome.failed and not outcome.items:
        return ObligationStatus.UNSATISFIED
    if (required is not None and outcome.coverage.rank < required.rank) or shortfall(gaps):
        return ObligationStatus.PARTIAL
    return ObligationStatus.SATISFIED
