"""The receipt: normalized evidence and exactly what was and was not searched.

``normalized_bytes`` is the canonical JSON of everything but ``lineage``, ``retained``,
``operational`` and ``corpus`` (where the cited files are on this machine): it depends only
on the inputs, never on timing or completion order (I5), and replay reproduces it byte for
byte (I8). ``retained`` is left out with the lineage it
belongs to: its artifact digests include retrieval times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from race.analysis import Analysis
from rsc import (
    CanonicalFloat,
    EvidenceStatus,
    Gap,
    GapKind,
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

if TYPE_CHECKING:
    import pandas
    import pyarrow

RECEIPT_SCHEMA_VERSION = "race.receipt/1"


class CollapsedCopy(Record):
    """One collapsed copy: which evidence unit it was, where it was ranked, and its custody."""

    key: str
    """The copy's evidence key."""
    doc_id: str
    """Its document."""
    rank: int
    """Its position in the ranking that was collapsed (1 is first)."""
    status: EvidenceStatus
    """Its evidence status."""
    chunk_id: str
    """Its chunk."""
    source_path: str | None
    """Custody of its first hit, as the hit gives it (``null`` where its source has none)."""
    line_start: int | None
    """Its first line in the source file."""
    line_end: int | None
    """Its last line in the source file."""
    source_hash: str | None
    """``sha256:<hex>`` of its source file."""


class Collapsed(Record):
    """The copies an item stands for: those with its text (``content``, ``group`` the sha256
    of that text) or of its origin component (``origin``, ``group`` the origin's id)."""

    by: Literal["content", "origin"]
    """``content`` (identical text) or ``origin`` (one origin component)."""
    group: str
    """The sha256 of the text, or the origin's id."""
    copies: tuple[CollapsedCopy, ...]
    """Every other member of the group, in rank order."""


class Roles(Record):
    status: str | None
    """The field whose value ``superseded`` or ``retracted`` makes a document stale."""
    date: str | None
    """The field an age bound (``max_age_days``) and a date order read."""
    authority: str | None
    """The field that says how authoritative a source is."""
    supersedes: tuple[str, ...] = ()
    """Relations whose edge makes its target stale."""
    superseded_by: tuple[str, ...] = ()
    """Relations whose edge makes its source stale."""
    derived_from: tuple[str, ...] = ()
    """Relations that make one document a copy of another (origin components, I13)."""

    def supersession(self) -> tuple[tuple[str, str], ...]:
        """Each superseding relation with the direction, seen from the stale document, in which
        its superseder lies: ``in`` for ``supersedes``, ``out`` for ``superseded_by``."""
        return tuple(sorted([(r, "in") for r in self.supersedes] + [(r, "out") for r in self.superseded_by]))


class Lineage(Record):
    id: str
    """The run's lineage id: a live run that fetched or retained responses is its own lineage, named by the plan
    fingerprint and the responses' digests."""
    mode: Literal["live", "replay"]
    """``live`` for a run, ``replay`` for a replay of retained responses."""
    parent: str | None = None
    """A replay's lineage: the live run it reproduced."""


class ReceiptFingerprints(Record):
    plan: str
    """The plan fingerprint (I6), as in the explain."""
    physical: str
    """The fingerprint of the physical plan that ran."""
    contracts: str
    """The fingerprint of the contracts the plan could use."""
    backends: dict[str, str]
    """Each backend's generation the run read."""
    caller: str
    """The fingerprint of the caller's generations."""
    evidence: str = ""
    """The fingerprint of the normalized receipt (everything but lineage, retained and operational); replay reproduces
    it (I8)."""


class ObligationReceipt(Record):
    id: str
    """The obligation's id in the plan."""
    kind: ObligationKind
    """The obligation's kind."""
    status: ObligationStatus
    """``satisfied``, ``partial`` (found some, with shortfalls), ``unsatisfied`` or ``not_attempted`` (a cascade or
    fallback stage not needed, or a leg never run)."""
    required_coverage: SearchCoverage
    """The search coverage the plan required."""
    search_coverage: SearchCoverage
    """The search coverage the run reached; never better than the weakest leg."""
    support_closure: SupportClosure
    """Whether the support found is ``closed``, ``partial``, ``stale`` or ``resource_limited``."""
    model_calls: int
    """The embedding-model calls the obligation's legs made."""
    mandatory: bool
    """Whether the plan marked it mandatory: a mandatory obligation not satisfied makes ``race run`` exit 3."""
    served_by: tuple[str, ...] = ()
    """The contracts that served it, ``rsc_id@version``."""
    evidence_count: int = 0
    """How many evidence items it contributed."""
    gaps: tuple[Gap, ...] = ()
    """What is missing or uncertain in its answer."""


class OperatorReceipt(Record):
    id: str
    """The operator's id in the plan."""
    op: OperatorKind
    """The operator."""
    status: ObligationStatus
    """The operator's status, on the obligations' scale."""
    search_coverage: SearchCoverage
    """The search coverage of its answer; never better than its weakest required input."""
    support_closure: SupportClosure
    """The support closure of its answer."""
    opposition_coverage: SearchCoverage | None = None
    """``oppose``: the search coverage of the refutation side."""
    independent_origins: tuple[str, ...] | None = None
    """``corroborate``: the independent origins counted."""
    origin_rule: str | None = None
    """corroborate: which evidence brought the origins it counted (I13, I16)."""
    early_stop: str
    """Whether the operator stopped early (I9), and why or why not."""
    gaps: tuple[Gap, ...] = ()
    """What is missing or uncertain in its answer."""


class Fusion(Record):
    """How an item's position was chosen: selection provenance, never warrant (I11)."""

    method: Literal["rrf", "score_sum", "single"]
    """``rrf``, ``score_sum``, or ``single`` (one input: its own order)."""
    node: str = ""
    """The physical node that chose this position (an obligation, a hybrid leaf or an operator)."""
    k: int | None = None
    """``rrf``: the constant added to each rank."""
    ranks: dict[str, int] = Field(default_factory=dict)
    """The item's 1-based rank in each input, by ``<node>/<rsc>``."""
    similarities: dict[str, CanonicalFloat] = Field(default_factory=dict)
    """score_sum: each input's calibrated similarity of the item (the floor where it cannot
    hold it); ranks name the inputs whose sorted access reached it."""
    score: CanonicalFloat | None = None
    """The fused score the position was chosen by."""
    tie_break: Literal["key"] = "key"
    """Ties are broken by the evidence key."""
    inputs: tuple[Fusion, ...] = ()
    """The fusions the inputs had made of this item, in input order: every level is kept."""


class EvidenceItem(Record):
    key: str
    """The evidence unit's key (``chunk:<chunk_id>``, ...); one item per key."""
    rank: int
    """The item's position in the root's answer (1 is first)."""
    status: EvidenceStatus
    """What the evidence is: retrieved, a candidate fact or refutation, corroborated, conflicting, stale, ..."""
    obligations: tuple[str, ...]
    """The obligations whose legs found it."""
    origin: str | None = None
    """Its origin component in the source-dependence lineage, where the graph gives one."""
    relations: tuple[str, ...] = ()
    """The relations a ``join`` reached it through (``<relation> -> <target>``)."""
    hits: tuple[Hit, ...]
    """Every backend hit on it, each with its custody."""
    fusion: Fusion
    """How its position was chosen."""
    collapsed: Collapsed | None = Field(default=None, exclude_if=lambda v: v is None)
    """The copies the obligation's ``collapse`` folded into this item (absent when none)."""


class CoverageSummary(Record):
    search_coverage: SearchCoverage
    """The root's search coverage."""
    support_closure: SupportClosure
    """The root's support closure."""
    opposition_coverage: SearchCoverage | None = None
    """The refutation side's search coverage, where the plan opposes."""
    statuses: dict[str, int]
    """How many obligations ended in each status."""


class Operational(Record):
    """Timing, call and cache counts: excluded from the normalized bytes and their fingerprint."""

    wall_ms: CanonicalFloat = 0.0
    """The run's wall time, in milliseconds: the time the plan's deadline budgets."""
    setup_ms: CanonicalFloat = 0.0
    """Set-up done before the run's clock started (imports, opens, model weights, matrices)."""
    plan_cache: Literal["hit", "miss", "none"] = "none"
    """Whether the plan came from the plan cache."""
    receipt_cache: Literal["hit", "miss", "none"] = "none"
    """Whether the whole receipt came from the receipt cache."""
    legs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Each leg's time, cache use, hit count and outcome."""
    calls: dict[str, int] = Field(default_factory=dict)
    """Backend calls made, per backend."""
    result_cache: dict[str, int] = Field(default_factory=dict)
    """Leg result cache hits and misses."""
    model_calls_made: int = 0
    """Embedding-model calls actually made (cached query vectors are not counted)."""
    replayed_artifacts: int = 0
    """Retained responses a replay read."""
    phases: dict[str, CanonicalFloat] = Field(default_factory=dict, exclude_if=lambda v: not v)
    """Where the run's time went, in milliseconds: ``setup`` (before the clock), ``plan``
    (generations and plan), ``pins``, ``legs`` (the legs and operators), ``fusion``, ``receipt``."""
    analysis: Analysis | None = Field(default=None, exclude_if=lambda v: v is None)
    """``run(..., analyze=True)``: the chosen plan's estimates beside the run's actuals."""
    left_behind: dict[str, int] = Field(default_factory=dict)
    """Per backend, the calls this run stopped waiting for (a leg past its timeout or the plan
    deadline) while they still ran: left behind, their answers dropped (``race.run.detached``)."""
    still_running: dict[str, int] = Field(default_factory=dict)
    """Per backend, the calls this engine's runs left behind that were still running when this
    run ended; a backend with ``CallPool.capacity`` of them gets no new call until one ends."""


class Receipt(Record):
    schema_version: str = RECEIPT_SCHEMA_VERSION
    """Always ``race.receipt/1``."""
    lineage: Lineage
    """Which run this is, live or replayed."""
    fingerprints: ReceiptFingerprints
    """What the run was made from."""
    models: tuple[dict[str, str | int], ...] = ()
    """The embedding models of the backends (name, dims, weights sha256)."""
    obligations: tuple[ObligationReceipt, ...]
    """Every obligation's outcome, in plan order."""
    operators: tuple[OperatorReceipt, ...] = ()
    """Every operator's outcome, in plan order."""
    evidence: tuple[EvidenceItem, ...]
    """The root's answer: evidence items in rank order."""
    coverage: CoverageSummary
    """The root's coverage and the count of obligation statuses."""
    gaps: tuple[Gap, ...]
    """Every gap of every obligation and operator."""
    retained: tuple[str, ...] = ()
    """The digests of the responses retained for replay (``--retain``)."""
    operational: Operational = Operational()
    """Timing, call and cache counts; not part of the normalized receipt."""
    corpus: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The absolute path of the corpus the index was built from (its folder, or its JSONL file):
    where the cited files live, read by ``race verify`` and ``race context``. Not part of the
    normalized receipt: it says where the files are, not what was found."""
    roles: Roles | None = Field(default=None, exclude_if=lambda v: v is None)
    """The fields and relations staleness and origins read, where the index's schema gives RACE's
    roles to others than the bundled corpus's (``race.roles``); replay reads them from here."""

    def unmet_mandatory(self) -> tuple[str, ...]:
        """The mandatory obligations this run left unsatisfied, as ``id (status)``. A stage a
        cascade or fallback did not need (not attempted, its only gaps ``not_needed``) is not one."""

        def not_needed(ob: ObligationReceipt) -> bool:
            return ob.status is ObligationStatus.NOT_ATTEMPTED and all(g.kind is GapKind.NOT_NEEDED for g in ob.gaps)

        return tuple(
            f"{ob.id} ({ob.status.value})"
            for ob in self.obligations
            if ob.mandatory and ob.status is not ObligationStatus.SATISFIED and not (ob.gaps and not_needed(ob))
        )

    def to_records(self) -> list[dict[str, Any]]:
        """One dict per hit: the item's rank, status and fused score beside the hit's custody,
        native score and backend rank (``race.rows``). The gaps are in ``self.gaps``."""
        from race.rows import records

        return records(self)

    def to_arrow(self) -> pyarrow.Table:
        """The hits as an Arrow table; its schema metadata carries the gaps and coverage."""
        from race.rows import arrow

        return arrow(self)

    def to_pandas(self) -> pandas.DataFrame:
        """The hits as a pandas DataFrame (pandas is optional); ``attrs`` carries the gaps."""
        from race.rows import pandas_frame

        return pandas_frame(self)

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


_NOT_NORMALIZED = {"lineage", "retained", "operational", "corpus"}


def receipt_json_schema() -> dict[str, Any]:
    return Receipt.model_json_schema()
