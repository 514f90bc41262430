"""Retrieval Semantic Contracts: what one backend capability can honestly do.

An RSC is a versioned JSON document shipped beside its adapter. The planner sees a
backend only through these documents; the conformance suite checks that the adapter's
behaviour agrees with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from rsc.calibration import Calibration
from rsc.canonical import CanonicalFloat, read_json
from rsc.errors import ContractError
from rsc.records import Record
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
    ops: tuple[FilterOp, ...] = (FilterOp.EQ, FilterOp.IN)
    profile: str | None = None
    recall: Annotated[CanonicalFloat, Field(gt=0.0, le=1.0)] | None = None

    @model_validator(mode="after")
    def _ann_needs_recall(self) -> FilterSupport:
        if self.support is FilterSupportClass.NATIVE_FILTERED_ANN and (self.profile is None or self.recall is None):
            raise ValueError("native_filtered_ann needs 'profile' and a measured 'recall'")
        return self


class CoverageSpec(Record):
    claim: CoverageClaim
    recall: Annotated[CanonicalFloat, Field(gt=0.0, le=1.0)] | None = None
    reach: SearchCoverage | None = None

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
    generation_fields: tuple[str, ...] = ()
    freshness: str = "as of the index generation"


class EarlyStopSpec(Record):
    """Access for Fagin's threshold algorithm (I9).

    ``sorted_access``: the backend returns the exact top-d of its score for any depth d.
    ``random_access``: the backend scores given evidence keys exactly (the request with a
    pushed identity filter), and a row's score does not depend on the other rows asked for.
    """

    sorted_access: bool = False
    random_access: bool = False


class CostHints(Record):
    """Priors for the cost model, replaced by measured statistics when there are any (I2)."""

    base_latency_ms: Annotated[CanonicalFloat, Field(ge=0.0)] = 1.0
    per_candidate_us: Annotated[CanonicalFloat, Field(ge=0.0)] = 1.0


class Contract(Record):
    schema_version: Literal["race.rsc/1"]
    rsc_id: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")]
    version: str
    backend: Annotated[str, Field(min_length=1)]
    mode: Annotated[str, Field(min_length=1)]
    translator_version: str
    description: str = ""
    query_classes: tuple[QueryClass, ...]
    obligation_kinds: tuple[ObligationKind, ...] = tuple(ObligationKind)
    query_parts: tuple[Literal["text", "ids", "entities"], ...]
    ordering: Literal["score_desc", "distance_asc", "hops_asc", "key_asc"]
    score_kind: ScoreKind
    score_calibration: Annotated[str, Field(min_length=1)] | None = None
    """Contracts that name the same calibration score on one scale, whatever the query, so
    their scores may be added (I11); without one, scores fuse only by rank (RRF)."""
    coverage: CoverageSpec
    filters: dict[str, FilterSupport]
    identity_domain: str
    source_domain: str
    provenance_fields: tuple[str, ...] = ()
    threat_claims: tuple[str, ...] = ()
    egress: ContractEgress
    model_calls: Annotated[int, Field(ge=0)]
    snapshot: SnapshotSpec
    early_stop: EarlyStopSpec
    cost: CostHints = CostHints()
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


def parse_contract(data: bytes | str, *, where: str) -> Contract:
    """Parse and validate one RSC document; any defect is a ``ContractError`` naming the place."""
    raw = read_json(data, where=where, error=ContractError)
    if not isinstance(raw, dict):
        raise ContractError("an RSC document must be a JSON object", where=where)
    if raw.get("schema_version") != RSC_SCHEMA_VERSION:
        raise ContractError(
            f"schema_version must be {RSC_SCHEMA_VERSION!r}, got {raw.get('schema_version')!r}", where=where
        )
    try:
        return Contract.model_validate(raw)
    except ValidationError as exc:
        raise ContractError(first_validation_error(exc), where=where) from exc


def load_contract(path: Path) -> Contract:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ContractError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    return parse_contract(data, where=str(path))


def first_validation_error(exc: ValidationError) -> str:
    """One line for the first pydantic error: the field path and what is wrong with it."""
    errors = exc.errors()
    # An unknown field usually explains the other errors (a misspelt key is also "missing").
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = ".".join(str(part) for part in err["loc"]) or "$"
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = "unknown field"
    elif err["type"] == "missing":
        message = "required field is missing"
    return f"field '{loc}': {message}"
