"""The shared vocabulary: obligation kinds, query classes, coverage scales, statuses, gaps.

Every enum here is a closed set that crosses a boundary (plans, contracts, receipts), so the
values are the stable spellings of docs/invariants.md (vocabulary, stable output keys). Ordered
scales carry a rank so that coverage can be aggregated conservatively (a composite is never
better covered than its weakest required input).
"""

from __future__ import annotations

from enum import StrEnum


class ObligationKind(StrEnum):
    SEEK_SUPPORT = "seek_support"
    SEEK_REFUTATION = "seek_refutation"
    SEEK_EXCEPTION_OR_DEFEATER = "seek_exception_or_defeater"
    SEEK_FRESHER_STATE = "seek_fresher_state"
    SEEK_IDENTITY_COUNTEREXAMPLE = "seek_identity_counterexample"
    SEEK_INDEPENDENT_ORIGIN = "seek_independent_origin"


REFUTING_KINDS = frozenset(
    {
        ObligationKind.SEEK_REFUTATION,
        ObligationKind.SEEK_EXCEPTION_OR_DEFEATER,
        ObligationKind.SEEK_IDENTITY_COUNTEREXAMPLE,
    }
)


class QueryClass(StrEnum):
    IDENTIFIER = "identifier"
    LEXICAL = "lexical"
    SYMBOL_RELATION = "symbol_relation"
    DEPENDENCY = "dependency"
    CONCEPTUAL = "conceptual"
    BROAD_QUESTION = "broad_question"


class Strategy(StrEnum):
    """How a query class is served by default (docs/invariants.md#vocabulary)."""

    EXACT = "exact"
    LEXICAL = "lexical"
    STRUCTURAL = "structural"
    GRAPH = "graph"
    VECTOR = "vector"
    HYBRID = "hybrid"


DEFAULT_STRATEGY: dict[QueryClass, Strategy] = {
    QueryClass.IDENTIFIER: Strategy.EXACT,
    QueryClass.LEXICAL: Strategy.LEXICAL,
    QueryClass.SYMBOL_RELATION: Strategy.STRUCTURAL,
    QueryClass.DEPENDENCY: Strategy.GRAPH,
    QueryClass.CONCEPTUAL: Strategy.VECTOR,
    QueryClass.BROAD_QUESTION: Strategy.HYBRID,
}


class OperatorKind(StrEnum):
    UNION = "union"
    CASCADE = "cascade"
    FALLBACK = "fallback"
    INTERSECT = "intersect"
    JOIN = "join"
    REFINE = "refine"
    CORROBORATE = "corroborate"
    OPPOSE = "oppose"
    FRESHEN = "freshen"


class Egress(StrEnum):
    LOCAL = "local"
    REMOTE_OK = "remote_ok"


class ContractEgress(StrEnum):
    LOCAL = "local"
    REMOTE = "remote"


class FilterSupportClass(StrEnum):
    NATIVE_PREFILTER_EXACT = "native_prefilter_exact"
    NATIVE_FILTERED_ANN = "native_filtered_ann"
    POSTFILTER_ONLY = "postfilter_only"
    UNSUPPORTED = "unsupported"


class CoverageClaim(StrEnum):
    EXHAUSTIVE_TOPK = "exhaustive_topk"
    APPROXIMATE = "approximate"
    EXHAUSTIVE_SET = "exhaustive_set"


class SearchCoverage(StrEnum):
    EXHAUSTIVE_FOR_DECLARED_FRAGMENT = "exhaustive_for_declared_fragment"
    """Everything the contract declares it covers was searched, exactly."""
    BOUNDED_STRUCTURAL = "bounded_structural"
    """A graph traversal complete within its depth and node budget."""
    HEURISTIC = "heuristic"
    """An approximate search (ANN, a post-filter): good evidence may have been missed."""
    PARTIAL_BACKEND = "partial_backend"
    """Part of the backend was not searched (unindexed rows, an unavailable shard)."""
    UNKNOWN = "unknown"
    """Nothing can be said about what was searched (a failed leg)."""

    @property
    def rank(self) -> int:
        return _SEARCH_RANK[self]


_SEARCH_RANK = {
    SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT: 4,
    SearchCoverage.BOUNDED_STRUCTURAL: 3,
    SearchCoverage.HEURISTIC: 2,
    SearchCoverage.PARTIAL_BACKEND: 1,
    SearchCoverage.UNKNOWN: 0,
}


def weakest(*coverages: SearchCoverage) -> SearchCoverage:
    """The conservative aggregate: never better than the weakest input."""
    if not coverages:
        return SearchCoverage.UNKNOWN
    return min(coverages, key=lambda c: c.rank)


def strongest(*coverages: SearchCoverage) -> SearchCoverage:
    if not coverages:
        return SearchCoverage.UNKNOWN
    return max(coverages, key=lambda c: c.rank)


class SupportClosure(StrEnum):
    CLOSED = "closed"
    """The support found is complete for the search made."""
    PARTIAL = "partial"
    """Some support may be missing."""
    STALE = "stale"
    """Some of the support is stale."""
    RESOURCE_LIMITED = "resource_limited"
    """A bound cut the support short."""

    @property
    def rank(self) -> int:
        return _CLOSURE_RANK[self]


_CLOSURE_RANK = {
    SupportClosure.CLOSED: 3,
    SupportClosure.PARTIAL: 2,
    SupportClosure.STALE: 1,
    SupportClosure.RESOURCE_LIMITED: 0,
}


def weakest_closure(*closures: SupportClosure) -> SupportClosure:
    if not closures:
        return SupportClosure.PARTIAL
    return min(closures, key=lambda c: c.rank)


class ObligationStatus(StrEnum):
    SATISFIED = "satisfied"
    """Evidence found at the required coverage, with no shortfall gap."""
    PARTIAL = "partial"
    """Some evidence found, with shortfall gaps."""
    UNSATISFIED = "unsatisfied"
    """No evidence, or the obligation could not be served."""
    NOT_ATTEMPTED = "not_attempted"
    """Not run: a cascade or fallback stage not needed, or a leg never started."""


class EvidenceStatus(StrEnum):
    RETRIEVED_OBSERVATION = "retrieved_observation"
    """Retrieved, with no claim about what it supports."""
    DERIVED_RELATION = "derived_relation"
    """Reached through a graph relation (a join)."""
    CANDIDATE_FACT = "candidate_fact"
    """Found by a support obligation; not yet corroborated."""
    CANDIDATE_REFUTATION = "candidate_refutation"
    """Found by a refutation obligation; conflicting only where typed plan data or an ``oppose`` establishes it."""
    CORROBORATED_FACT = "corroborated_fact"
    """Supported by the independent origins a ``corroborate`` requires."""
    CONFLICTING_EVIDENCE = "conflicting_evidence"
    """A conflict established by an ``oppose`` that found the item on both sides, or by typed plan data."""
    STALE_EVIDENCE = "stale_evidence"
    """Superseded, retracted or too old, and kept marked by a ``freshen``."""
    MISSING_EVIDENCE = "missing_evidence"
    """Only as a gap: nothing was found."""


class GapKind(StrEnum):
    TIMEOUT = "timeout"
    """A leg did not answer within its own deadline (``leg_timeout_ms`` or the scan's ``deadline_ms``), or the backend
    reported a timeout; absence of hits is not absence of evidence."""
    CANCELLED = "cancelled"
    """A leg was still running when the plan's deadline (``budget.deadline_ms``) passed and was cancelled."""
    BACKEND_ERROR = "backend_error"
    """A backend call failed (refused, dropped, garbled, or an error such as an embedding model other than the index's);
    a join whose graph could not be read; a fallback with no stage answering."""
    POSTFILTER_ONLY_FILTER = "postfilter_only_filter"
    """A hard filter the contract can apply only after ranking: fewer than k of the top candidates may survive it (the
    detail says how many did); also a ``refine`` filter applied after its input."""
    UNSUPPORTED_FILTER = "unsupported_filter"
    """No eligible contract can apply one of the obligation's hard filters at all; the obligation is unsatisfied."""
    NO_ELIGIBLE_BACKEND = "no_eligible_backend"
    """No contract may serve the obligation: none serves its query class or query parts, none is within the pinned
    version range, or none reaches the required coverage."""
    EGRESS_DENIED = "egress_denied"
    """The only contracts that could serve an obligation with ``egress: local`` would send it off this machine."""
    STALE_EVIDENCE = "stale_evidence"
    """A ``freshen`` dropped or marked evidence that is superseded, retracted or older than ``max_age_days``."""
    UNINDEXED_ROWS_SKIPPED = "unindexed_rows_skipped"
    """An ANN search skipped rows added since its index was built; coverage ``partial_backend``."""
    RESOURCE_LIMITED = "resource_limited"
    """A bound cut the answer: an exact lookup or graph match larger than k, a graph node budget met, a collapse that
    read its row limit, or the plan deadline passed before the leg started."""
    WEAK_SOURCE = "weak_source"
    """Source dependence could not be read (the graph is not open or failed), so ``corroborate`` counted each document
    as its own origin or ``collapse: origin`` collapsed nothing; or ``corroborate`` left origins out (stale, below
    its relevance floor)."""
    EARLY_STOP = "early_stop"
    """A union stopped reading its inputs early under the threshold algorithm (I9); the detail says how deep sorted
    access read. Same top k as a full read."""
    NOT_NEEDED = "not_needed"
    """A cascade or fallback stage was not run because an earlier stage was sufficient or answered; the obligation is
    ``not_attempted``."""
    MISSING_EVIDENCE = "missing_evidence"
    """An obligation found no (current) evidence within its search, or a cascade found no sufficient stage, or an
    ``oppose`` found nothing on one side; omitted is not false."""
    SNAPSHOT_MOVED = "snapshot_moved"
    """A backend could not be read at the snapshot the plan was made at (the index moved on under the run); the leg is
    refused."""
    SHARD_UNAVAILABLE = "shard_unavailable"
    """A shard of a sharded instance failed, timed out or could not be read; ``covered_fraction`` says how much of the
    instance the answer searched."""
    TRUNCATED_TEXT = "truncated_text"
    """A document's text was longer than the embedding model reads: the tokens past its limit were never embedded, so a
    vector search cannot find what they say."""
    UNKNOWN_AGE = "unknown_age"
    """Under a ``max_age_days`` bound, a document has no date, so its age cannot be checked."""
    UNCHECKED_SUPERSESSION = "unchecked_supersession"
    """Supersession by graph edge could not be checked (the graph is not open or could not be read)."""
    WEAK_CONSISTENCY = "weak_consistency"
    """A backend was read below strong consistency (a Milvus collection at ``Bounded``, ``Session`` or ``Eventually``):
    writes it acknowledged shortly before the scan may not be seen. A caveat: the answer is of the rows the server had
    applied, and the contract's ``snapshot.freshness`` states the level."""


class GapSeverity(StrEnum):
    """`shortfall` gaps keep an obligation from `satisfied`; `caveat` gaps qualify it."""

    SHORTFALL = "shortfall"
    """The gap keeps its obligation from ``satisfied``."""
    CAVEAT = "caveat"
    """The gap qualifies an answer without making it fall short."""


class ScoreKind(StrEnum):
    BM25 = "bm25"
    COSINE_DISTANCE = "cosine_distance"
    L2_DISTANCE = "l2_distance"
    HOPS = "hops"
    EXACT_MATCH = "exact_match"
    RRF = "rrf"
    NONE = "none"


# Native scores that can be calibrated into a similarity where larger is better, with the
# worst similarity the kind admits (what a leg contributes for a row it does not hold).
_SIMILARITY_FLOOR: dict[ScoreKind, float] = {ScoreKind.COSINE_DISTANCE: -1.0}


def calibratable(kind: ScoreKind) -> bool:
    return kind in _SIMILARITY_FLOOR


def similarity_floor(kind: ScoreKind) -> float:
    return _SIMILARITY_FLOOR[kind]


def similarity(kind: ScoreKind, score: float) -> float:
    """A calibrated native score as a similarity in [floor, 1]: cosine similarity = 1 - distance."""
    if kind is ScoreKind.COSINE_DISTANCE:
        return 1.0 - score
    raise ValueError(f"score kind {kind.value!r} has no calibrated similarity")


class FilterOp(StrEnum):
    EQ = "eq"
    IN = "in"
    RANGE = "range"
    NE = "ne"
    NOT_IN = "not_in"
    PREFIX = "prefix"
    EXISTS = "exists"
    ANY_OF = "any_of"
    """An OR group of single-field filters; in a field's ``ops``: the field may be filtered inside one."""
