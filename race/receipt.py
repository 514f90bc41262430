"""The receipt: normalized evidence and exactly what was and was not searched.

``normalized_bytes`` is the canonical JSON of everything but ``lineage``, ``retained`` and
``operational``: it depends only on the inputs, never on timing or completion order (I5),
and replay reproduces it byte for byte (I8). ``retained`` is left out with the lineage it
belongs to: its artifact digests include retrieval times.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rsc import (
    CanonicalFloat,
    EvidenceStatus,
    Gap,
    Hit,
    ObligationKind,
    ObligationStatus,
    OperatorKind,
    Record,
    SearchCoverage,
    SupportClosure,
    canonical_data,
    dumps_canonical,
    fingerprint_bytes,
)

RECEIPT_SCHEMA_VERSION = "race.receipt/1"


class Lineage(Record):
    id: str
    mode: Literal["live", "replay"]
    parent: str | None = None


class ReceiptFingerprints(Record):
    plan: str
    physical: str
    contracts: str
    backends: dict[str, str]
    caller: str
    evidence: str = ""


class ObligationReceipt(Record):
    id: str
    kind: ObligationKind
    status: ObligationStatus
    required_coverage: SearchCoverage
    search_coverage: SearchCoverage
    support_closure: SupportClosure
    model_calls: int
    mandatory: bool
    served_by: tuple[str, ...] = ()
    evidence_count: int = 0
    gaps: tuple[Gap, ...] = ()


class OperatorReceipt(Record):
    id: str
    op: OperatorKind
    status: ObligationStatus
    search_coverage: SearchCoverage
    support_closure: SupportClosure
    opposition_coverage: SearchCoverage | None = None
    independent_origins: tuple[str, ...] | None = None
    origin_rule: str | None = None
    """corroborate: which evidence brought the origins it counted (I13, I16)."""
    early_stop: str
    gaps: tuple[Gap, ...] = ()


class Fusion(Record):
    """How an item's position was chosen: selection provenance, never warrant (I11)."""

    method: Literal["rrf", "score_sum", "single"]
    node: str = ""
    """The physical node that chose this position (an obligation, a hybrid leaf or an operator)."""
    k: int | None = None
    ranks: dict[str, int] = Field(default_factory=dict)
    similarities: dict[str, CanonicalFloat] = Field(default_factory=dict)
    """score_sum: each input's calibrated similarity of the item (the floor where it cannot
    hold it); ranks name the inputs whose sorted access reached it."""
    score: CanonicalFloat | None = None
    tie_break: Literal["key"] = "key"
    inputs: tuple[Fusion, ...] = ()
    """The fusions the inputs had made of this item, in input order: every level is kept."""


class EvidenceItem(Record):
    key: str
    rank: int
    status: EvidenceStatus
    obligations: tuple[str, ...]
    origin: str | None = None
    relations: tuple[str, ...] = ()
    hits: tuple[Hit, ...]
    fusion: Fusion


class CoverageSummary(Record):
    search_coverage: SearchCoverage
    support_closure: SupportClosure
    opposition_coverage: SearchCoverage | None = None
    statuses: dict[str, int]


class Operational(Record):
    """Timing, call and cache counts: excluded from the normalized bytes and their fingerprint."""

    wall_ms: CanonicalFloat = 0.0
    plan_cache: Literal["hit", "miss", "none"] = "none"
    receipt_cache: Literal["hit", "miss", "none"] = "none"
    legs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    calls: dict[str, int] = Field(default_factory=dict)
    result_cache: dict[str, int] = Field(default_factory=dict)
    model_calls_made: int = 0
    replayed_artifacts: int = 0


class Receipt(Record):
    schema_version: str = RECEIPT_SCHEMA_VERSION
    lineage: Lineage
    fingerprints: ReceiptFingerprints
    models: tuple[dict[str, str | int], ...] = ()
    obligations: tuple[ObligationReceipt, ...]
    operators: tuple[OperatorReceipt, ...] = ()
    evidence: tuple[EvidenceItem, ...]
    coverage: CoverageSummary
    gaps: tuple[Gap, ...]
    retained: tuple[str, ...] = ()
    operational: Operational = Operational()

    def normalized(self) -> dict[str, Any]:
        data: dict[str, Any] = canonical_data(self, exclude=_NOT_NORMALIZED)
        return data

    def normalized_bytes(self) -> bytes:
        return dumps_canonical(self.normalized())

    def with_evidence_fingerprint(self) -> Receipt:
        body = self.normalized()
        body["fingerprints"].pop("evidence", None)
        fps = self.fingerprints.model_copy(update={"evidence": fingerprint_bytes(dumps_canonical(body))})
        return self.model_copy(update={"fingerprints": fps})


_NOT_NORMALIZED = {"lineage", "retained", "operational"}


def receipt_json_schema() -> dict[str, Any]:
    return Receipt.model_json_schema()
