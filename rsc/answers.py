"""What an adapter answers: hits with full custody, the gaps it observed, and the scan result
that carries both. Frozen records, unknown fields rejected, as every record in ``rsc.records``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rsc.canonical import CanonicalFloat
from rsc.records import ExpectedRecall, MetadataValue, Record
from rsc.vocab import GapKind, GapSeverity, ScoreKind


class Custody(Record):
    """Where a hit came from, precisely enough to check it by hand. A source that lacks a custody
    field (an attached table with no path or line span) reports it as ``null``, and ``absent``
    says why, field by field; nothing is invented."""

    source_path: str | None
    """The source file, relative to the corpus root; ``null`` where the source has none (see ``absent``)."""
    line_start: int | None
    """The first line of the chunk in the source file (1-based)."""
    line_end: int | None
    """The last line of the chunk in the source file (inclusive)."""
    char_start: int | None = None
    """The chunk's first character offset in the source file, where known."""
    char_end: int | None = None
    """The offset just past the chunk's last character, where known."""
    source_hash: str | None
    """``sha256:<hex>`` of the source file's bytes as indexed; a citation holds while it matches."""
    chunk_id: str
    """The chunk's id (``<doc_id>#<n>``)."""
    corpus_revision: str
    """The revision of the corpus the index was built from."""
    index_identity: str
    """Which index answered (backend and corpus revision)."""
    index_generation: str
    """The index generation the hit was read at."""
    backend: str
    """The backend that returned the hit."""
    rsc: str
    """The contract the hit was served under, ``rsc_id@version``."""
    request: str
    """The fingerprint of the translated request that returned it."""
    filters_pushed: tuple[str, ...] = ()
    """The filters the backend applied natively, as text."""
    filters_residual: tuple[str, ...] = ()
    """The filters the runtime applied afterwards, as text."""
    rank: Annotated[int, Field(ge=1)]
    """The hit's rank in its backend's answer (1 is first)."""
    score: CanonicalFloat
    """The backend's native score (see ``score_kind``); not a warrant (I11)."""
    score_kind: ScoreKind
    """What ``score`` measures (``bm25``, ``cosine_distance``, ``hops``, ...) and so which way is better."""
    access: Literal["sorted", "random"] = "sorted"
    """``random``: the hit answers a random access (the request named its rows by identity), so
    ``rank`` orders that answer only, not the input's ranking; the score is exact all the same."""
    expected_recall: ExpectedRecall | None = None
    """The recall its contract promised for the request, on hits of an approximate scan."""
    absent: dict[str, str] = Field(default_factory=dict, exclude_if=lambda value: not value)
    """Each custody field that is ``null`` because the source does not have it, with the reason;
    written only when there is one, so custody of a full source reads as it always did."""

    @model_validator(mode="after")
    def _absent_is_null(self) -> Custody:
        null = {f for f in _NULLABLE_CUSTODY if getattr(self, f) is None}
        if null != set(self.absent):
            raise ValueError(f"custody fields {sorted(null)} are null but 'absent' explains {sorted(self.absent)}")
        return self


_NULLABLE_CUSTODY = ("source_path", "line_start", "line_end", "source_hash")


class Hit(Record):
    """One backend's answer about one evidence unit. Score is not warrant (I11)."""

    key: str
    """The evidence unit's key (``chunk:<chunk_id>``, ``doc:<doc_id>``, ``node:<id>``); hits with one key are one unit.
    """
    doc_id: str
    """The document the hit belongs to."""
    chunk_id: str
    """The chunk the hit is."""
    title: str = ""
    """The document's title."""
    text: str = ""
    """The chunk's text."""
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    """The document's metadata (date, doc_type, ...) as the corpus schema types it."""
    custody: Custody
    """Where the hit came from."""


class Gap(Record):
    kind: GapKind
    """What is missing or uncertain; the reference lists when each kind occurs."""
    obligation: str
    """The obligation (or operator) the gap belongs to."""
    backend: str | None = None
    """The backend involved, if one is."""
    detail: str
    """One line saying what happened, naming the contract, filter or bound."""
    severity: GapSeverity = GapSeverity.SHORTFALL
    """``shortfall`` keeps the obligation from ``satisfied``; ``caveat`` only qualifies it."""
    covered_fraction: Annotated[CanonicalFloat, Field(ge=0.0, le=1.0)] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="shard_unavailable: the fraction of the sharded instance's documents (chunks) the answer "
        "searched, documents in the shards that answered / documents in the instance; absent on other gaps.",
    )
    """Left out of a gap's JSON when unset, so gaps without it keep their bytes and fingerprints."""


class ScanResult(Record):
    hits: tuple[Hit, ...] = ()
    gaps: tuple[Gap, ...] = ()
    model_calls: Annotated[int, Field(ge=0)] = 0
    generation: str
    total_matches: int | None = None
    exhausted: bool = False
