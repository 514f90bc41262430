"""Retrieval Semantic Contracts: what one backend capability can honestly do.

An RSC is a versioned JSON document shipped beside its adapter. The planner sees a
backend only through these documents; the conformance suite checks that the adapter's
behaviour agrees with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from rsc.calibration import Calibration
from rsc.canonical import CanonicalFloat, read_json
from rsc.errors import ContractError
from rsc.records import Filter, Record
from rsc.version import Version, is_semver
from rsc.vocab import (
    ContractEgress,
    CoverageClaim,
    FilterOp,
    FilterSupportClass,
    ObligationKind,
    QueryClass,
    ScoreKind,
    SearchCoverage,
    calibratable,
)

RSC_SCHEMA_VERSION = "race.rsc/1"


class FilterSupport(Record):
    """How one metadata field can be filtered by this contract's backend (I4)."""

    support: FilterSupportClass
    """How the field is filtered: natively before ranking and exactly (``native_prefilter_exact``), inside an
    approximate index (``native_filtered_ann``), only after ranking (``postfilter_only``), or not at all
    (``unsupported``)."""
    ops: tuple[FilterOp, ...] = (FilterOp.EQ, FilterOp.IN)
    """The filter operations supported on the field."""
    profile: str | None = None
    """``native_filtered_ann``: the index configuration the recall was measured under."""
    recall: Annotated[CanonicalFloat, Field(gt=0.0, le=1.0)] | None = None
    """``native_filtered_ann``: the recall measured with the filter applied."""

    @model_validator(mode="after")
    def _ann_needs_recall(self) -> FilterSupport:
        if self.support is FilterSupportClass.NATIVE_FILTERED_ANN and (self.profile is None or self.recall is None):
            raise ValueError("native_filtered_ann needs 'profile' and a measured 'recall'")
        return self


class CoverageSpec(Record):
    claim: CoverageClaim
    """What an answer covers: the exact top k (``exhaustive_topk``), the whole matching set (``exhaustive_set``) or an
    approximation (``approximate``, with ``recall``)."""
    recall: Annotated[CanonicalFloat, Field(gt=0.0, le=1.0)] | None = None
    """``approximate``: the recall measured on the index."""
    reach: SearchCoverage | None = None
    """The best search coverage a scan can report, when it differs from what ``claim`` implies (e.g.
    ``bounded_structural``)."""

    @model_validator(mode="after")
    def _approx_needs_recall(self) -> CoverageSpec:
        if self.claim is CoverageClaim.APPROXIMATE and self.recall is None:
            raise ValueError("an approximate coverage claim needs its measured 'recall'")
        return self

    def best_reach(self) -> SearchCoverage:
        """The best search coverage a scan under this contract can report."""
        if self.reach is not None:
            return self.reach
        if self.claim is CoverageClaim.APPROXIMATE:
            return SearchCoverage.HEURISTIC
        return SearchCoverage.EXHAUSTIVE_FOR_DECLARED_FRAGMENT


class SnapshotSpec(Record):
    semantics: Literal["generation", "live"] = "generation"
    """``generation``: answers are read at one index generation; ``live``: reads see the latest state."""
    generation_fields: tuple[str, ...] = ()
    """What the backend's generation string is made of."""
    freshness: str = "as of the index generation"
    """What the answers are current as of, in words."""


class EarlyStopSpec(Record):
    """Access for Fagin's threshold algorithm (I9).

    ``sorted_access``: the backend returns the exact top-d of its score for any depth d.
    ``random_access``: the backend scores given evidence keys exactly (the request with a
    pushed identity filter), and a row's score does not depend on the other rows asked for.
    """

    sorted_access: bool = False
    """The backend returns the exact top d of its score for any depth d."""
    random_access: bool = False
    """The backend scores given evidence keys exactly, independently of the other keys asked for."""


AccessKind = Literal["exact", "ann", "graph", "remote"]
"""How a contract's candidates follow from its index: ``exact`` rows x selectivity, ``ann`` the
rows in the probed partitions, ``graph`` the nodes a walk is expected to reach (degree
statistics), ``remote`` one round trip per scan plus the server's candidates."""


class CostHints(Record):
    """Priors for the cost model, replaced by measured statistics when there are any (I2)."""

    base_latency_ms: Annotated[CanonicalFloat, Field(ge=0.0)] = 1.0
    """The prior for a call's fixed latency (for ``remote``, a round trip's), in milliseconds."""
    per_candidate_us: Annotated[CanonicalFloat, Field(ge=0.0)] = 1.0
    """The prior for each candidate's cost (row scanned, vector compared, node reached), in microseconds."""
    kind: AccessKind | None = Field(default=None, exclude_if=lambda value: value is None)
    """How candidates are counted; absent, it follows the coverage claim and the backend."""
    per_hit_us: Annotated[CanonicalFloat, Field(ge=0.0)] = Field(default=0.0, exclude_if=lambda value: not value)
    """The prior for each hit returned (a graph hit carries custody and a node read), in microseconds."""
    max_hops: Annotated[int, Field(ge=0, le=8)] | None = Field(default=None, exclude_if=lambda value: value is None)
    """For ``graph``: the hops a walk of this contract takes at most (0 a lookup, 1 neighbours);
    absent, the query pattern's depth."""
    source: str = Field(default="", exclude_if=lambda value: not value)
    """Where the priors were measured (benchmark, machine load, date), or empty for hand-set ones."""


class Contract(Record):
    schema_version: Literal["race.rsc/1"]
    """Always ``race.rsc/1``."""
    rsc_id: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")]
    """The contract's id, ``<backend>.<capability>`` (e.g. ``tantivy.bm25``)."""
    version: str
    """The contract's semver version; a plan may pin a range."""
    backend: Annotated[str, Field(min_length=1)]
    """The backend the contract describes."""
    mode: Annotated[str, Field(min_length=1)]
    """The backend's access mode the contract is served by."""
    translator_version: str
    """The version of the code that translates obligations for this contract; part of the plan's fingerprint."""
    description: str = ""
    """What the capability does, in words."""
    query_classes: tuple[QueryClass, ...]
    """The query classes the contract may serve."""
    obligation_kinds: tuple[ObligationKind, ...] = tuple(ObligationKind)
    """The obligation kinds the contract may serve."""
    query_parts: tuple[Literal["text", "ids", "entities", "vector"], ...]
    """Which parts of a query the backend reads (``text``, ``ids``, ``entities``, a caller's ``vector``)."""
    ordering: Literal["score_desc", "distance_asc", "hops_asc", "key_asc"]
    """The order hits come in: by score, by distance, by hops or by key."""
    score_kind: ScoreKind
    """What the native scores measure."""
    score_calibration: Annotated[str, Field(min_length=1)] | None = None
    """Contracts that name the same calibration score on one scale, whatever the query, so
    their scores may be added (I11); without one, scores fuse only by rank (RRF)."""
    coverage: CoverageSpec
    """What an answer covers."""
    filters: dict[str, FilterSupport]
    """Per metadata field, how it can be filtered (I4); a field not named cannot be filtered."""
    identity_domain: str
    """What a hit identifies (``chunk``, ``document``, ``node``)."""
    source_domain: str
    """Where the answers come from, in words."""
    provenance_fields: tuple[str, ...] = ()
    """The custody fields every hit carries."""
    threat_claims: tuple[str, ...] = ()
    """What the backend guarantees against adversarial input, in words."""
    egress: ContractEgress
    """Whether calls stay on this machine (``local``) or leave it (``remote``)."""
    model_calls: Annotated[int, Field(ge=0)]
    """The embedding-model calls a scan makes."""
    snapshot: SnapshotSpec
    """How answers relate to index generations."""
    early_stop: EarlyStopSpec
    """The access a threshold-algorithm early stop needs (I9)."""
    cost: CostHints = CostHints()
    """Priors for the cost model, replaced by measured statistics where there are some (I2)."""
    calibration: Calibration | None = None
    """Approximate contracts: recall measured on the index this contract describes."""

    @field_validator("version", "translator_version")
    @classmethod
    def _semver(cls, value: str) -> str:
        if not is_semver(value):
            raise ValueError(f"{value!r} is not a semantic version MAJOR.MINOR.PATCH")
        return value

    @model_validator(mode="after")
    def _calibration_needs_similarity(self) -> Contract:
        if self.score_calibration is not None and not calibratable(self.score_kind):
            raise ValueError(f"score_calibration: score kind {self.score_kind.value!r} has no calibrated similarity")
        return self

    @property
    def ref(self) -> str:
        return f"{self.rsc_id}@{self.version}"

    @property
    def semver(self) -> Version:
        return Version.parse(self.version)

    def filter_support(self, field: str) -> FilterSupport:
        return self.filters.get(field, FilterSupport(support=FilterSupportClass.UNSUPPORTED, ops=()))

    def filter_supports(self, flt: Filter) -> tuple[FilterSupport, ...]:
        """The support of each field ``flt`` filters on; a field whose ops lack the filter's
        operator (or, inside an ``any_of`` group, lack ``any_of``) counts as unsupported."""
        group = flt.op is FilterOp.ANY_OF
        found = []
        for leaf in flt.leaves():
            support = self.filter_support(leaf.field)
            if leaf.op not in support.ops or (group and FilterOp.ANY_OF not in support.ops):
                support = FilterSupport(support=FilterSupportClass.UNSUPPORTED, ops=())
            found.append(support)
        return tuple(found)

    def applies(self, flt: Filter) -> bool:
        """Whether the backend can apply ``flt`` at all (natively or after ranking)."""
        return all(s.support is not FilterSupportClass.UNSUPPORTED for s in self.filter_supports(flt))

    def prefilters_exactly(self, flt: Filter) -> bool:
        """Whether the backend applies ``flt`` exactly, before ranking."""
        return all(s.support is FilterSupportClass.NATIVE_PREFILTER_EXACT for s in self.filter_supports(flt))


def parse_contract(data: bytes | str, *, where: str) -> Contract:
    """Parse and validate one RSC document; any defect is a ``ContractError`` naming the place."""
    raw = read_json(data, where=where, error=ContractError)
    if not isinstance(raw, dict):
        raise ContractError("an RSC document must be a JSON object", where=where)
    if raw.get("schema_version") != RSC_SCHEMA_VERSION:
        from rsc.suggest import schema_version_error

        raise ContractError(schema_version_error(raw, RSC_SCHEMA_VERSION) or "", where=where)
    try:
        return Contract.model_validate(raw)
    except ValidationError as exc:
        raise ContractError(first_validation_error(exc, Contract), where=where) from exc


def load_contract(path: Path) -> Contract:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ContractError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    return parse_contract(data, where=str(path))


def first_validation_error(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line for the first pydantic error: the field path and what is wrong with it; given
    the ``model`` validated, an unknown field names the closest known one (did you mean)."""
    errors = exc.errors()
    # An unknown field usually explains the other errors (a misspelt key is also "missing").
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = ".".join(str(part) for part in err["loc"]) or "$"
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = "unknown field"
        if model is not None and err["loc"]:
            from rsc.suggest import did_you_mean, known_fields

            message += did_you_mean(str(err["loc"][-1]), known_fields(model, err["loc"][:-1]))
    elif err["type"] == "missing":
        message = "required field is missing"
    return f"field '{loc}': {message}"


def calibrated(contract: Contract, calibration: Calibration) -> Contract:
    """``contract`` with the recall measured on this index in place of the shipped figure.

    The contract's own recall becomes the unfiltered bound; each ``native_filtered_ann``
    field's recall the lowest bound measured for it (or for any filter, where the field was
    not measured on its own). A field whose filtered recall measured zero can promise
    nothing better than a postfilter, and says so."""
    updates: dict[str, object] = {"calibration": calibration}
    if calibration.unfiltered is not None and calibration.unfiltered.lower_bound > 0:
        updates["coverage"] = contract.coverage.model_copy(update={"recall": calibration.unfiltered.lower_bound})
    overall = min((b.lower_bound for b in calibration.buckets), default=None)
    filters = {}
    for name, support in contract.filters.items():
        if support.support is not FilterSupportClass.NATIVE_FILTERED_ANN:
            filters[name] = support
            continue
        bound = calibration.field_floor(name)
        bound = overall if bound is None else bound if overall is None else min(bound, overall)
        if bound is None:
            filters[name] = support
        elif bound <= 0:
            filters[name] = support.model_copy(
                update={"support": FilterSupportClass.POSTFILTER_ONLY, "recall": None, "profile": None}
            )
        else:
            filters[name] = support.model_copy(update={"recall": bound})
    updates["filters"] = filters
    return contract.model_copy(update=updates)
