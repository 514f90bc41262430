"""The shared vocabulary: obligation kinds, query classes, coverage scales, statuses, gaps.

Every enum here is a closed set that crosses a boundary (plans, contracts, receipts), so
the values are the stable spellings of SPEC §2 and §6. Ordered scales carry a rank so
that coverage can be aggregated conservatively (a composite is never better covered than
its weakest required input).
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
    """How a query class is served by default (SPEC §2)."""

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
    BOUNDED_STRUCTURAL = "bounded_structural"
    HEURISTIC = "heuristic"
    PARTIAL_BACKEND = "partial_backend"
    UNKNOWN = "unknown"

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
    PARTIAL = "partial"
    STALE = "stale"
    RESOURCE_LIMITED = "resource_limited"

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
    PARTIAL = "partial"
    UNSATISFIED = "unsatisfied"
    NOT_ATTEMPTED = "not_attempted"


class EvidenceStatus(StrEnum):
    RETRIEVED_OBSERVATION = "retrieved_observation"
    DERIVED_RELATION = "derived_relation"
    CANDIDATE_FACT = "candidate_fact"
    CANDIDATE_REFUTATION = "candidate_refutation"
    CORROBORATED_FACT = "corroborated_fact"
    CONFLICTING_EVIDENCE = "conflicting_evidence"
    STALE_EVIDENCE = "stale_evidence"
    MISSING_EVIDENCE = "missing_evidence"


class GapKind(StrEnum):
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    BACKEND_ERROR = "backend_error"
    POSTFILTER_ONLY_FILTER = "postfilter_only_filter"
    UNSUPPORTED_FILTER = "unsupported_filter"
    NO_ELIGIBLE_BACKEND = "no_eligible_backend"
    EGRESS_DENIED = "egress_denied"
    STALE_EVIDENCE = "stale_evidence"
    UNINDEXED_ROWS_SKIPPED = "unindexed_rows_skipped"
    RESOURCE_LIMITED = "resource_limited"
    WEAK_SOURCE = "weak_source"
    EARLY_STOP = "early_stop"
    NOT_NEEDED = "not_needed"
    MISSING_EVIDENCE = "missing_evidence"
    SNAPSHOT_MOVED = "snapshot_moved"
    SHARD_UNAVAILABLE = "shard_unavailable"
    TRUNCATED_TEXT = "truncated_text"
    UNKNOWN_AGE = "unknown_age"
    UNCHECKED_SUPERSESSION = "unchecked_supersession"


class GapSeverity(StrEnum):
    """`shortfall` gaps keep an obligation from `satisfied`; `caveat` gaps qualify it."""

    SHORTFALL = "shortfall"
    CAVEAT = "caveat"


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
