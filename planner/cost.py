"""The cost model: expected latency from operational statistics, held apart from evidence.

Statistics only choose among alternatives (I2): nothing here can change what a scan is
allowed to claim. Selectivity comes from the backends' value counts; where a value is not
counted the estimate is conservative and the explain says it was a guess.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Annotated

from pydantic import Field

from planner.access import candidates_of, kind_of
from rsc import BackendStatistics, CanonicalFloat, Contract, CoverageClaim, Filter, FilterOp, Query, Record, fingerprint

DEFAULT_ROWS = 1_000
UNKNOWN_SELECTIVITY = 0.5


class Statistics(Record):
    """Per-backend statistics and the cost of one model call."""

    schema_version: str = "race.stats/1"
    backends: dict[str, BackendStatistics] = Field(default_factory=dict)
    model_call_ms: Annotated[CanonicalFloat, Field(ge=0.0)] = 6.0
    learned: str = Field(default="", exclude_if=lambda v: not v)
    """The digest of the learned statistics applied (``race.state.learned``), if any: it then
    enters the physical-plan fingerprint."""

    @property
    def fingerprint(self) -> str:
        return fingerprint(self)


class Estimate(Record):
    """How a scan's expected cost was reached; explain prints it beside the alternative.

    ``basis`` says where the row count and the selectivity came from, ``access`` how the
    candidates follow from them, ``latency`` where the base latency came from.
    """

    rows: int
    """The rows the backend holds (from its statistics, or the prior)."""
    selectivity: CanonicalFloat
    """The fraction of rows the pushed filters are expected to keep."""
    candidates: CanonicalFloat
    """The candidates the scan is expected to touch."""
    cost_ms: CanonicalFloat
    """The expected cost, in milliseconds."""
    basis: str
    """Where the row count and the selectivity came from (measured statistics or contract priors)."""
    access: str = ""
    """How the candidates follow from the rows and the selectivity."""
    latency: str = ""
    """Where the base latency came from."""


def selectivity(stats: BackendStatistics | None, filters: Sequence[Filter]) -> tuple[float, str]:
    """Fraction of rows passing every filter (independence assumed) and how it was known."""
    result, basis = 1.0, []
    for flt in filters:
        if flt.op is FilterOp.ANY_OF:
            # An OR of independent members: a row fails the group only by failing every member.
            missed, parts = 1.0, []
            for leaf in flt.any_of:
                fraction, why = _one_selectivity(stats, leaf)
                missed *= 1.0 - fraction
                parts.append(why)
            result *= 1.0 - missed
            basis.append("any of (" + "; ".join(parts) + ")")
            continue
        fraction, why = _one_selectivity(stats, flt)
        result *= fraction
        basis.append(why)
    return result, "; ".join(basis) or "no filter"


def _one_selectivity(stats: BackendStatistics | None, flt: Filter) -> tuple[float, str]:
    counts = stats.value_counts.get(flt.field) if stats else None
    rows = stats.rows if stats else 0
    if counts and rows and flt.op in (FilterOp.EQ, FilterOp.IN):
        values = [flt.value] if flt.op is FilterOp.EQ else list(flt.values)
        matched = sum(counts.get(str(v), 0) for v in values)
        return matched / rows, f"{flt.field}: {matched}/{rows} rows"
    if counts and rows:
        # The counted values are a complete histogram of the field (rows without it are not
        # counted): the filter keeps exactly the values it matches, compared as it compares them.
        like = flt.gte if flt.gte is not None else flt.lte if flt.op is FilterOp.RANGE else flt.value
        if flt.op is FilterOp.NOT_IN:
            like = flt.values[0]
        matched = sum(n for value, n in counts.items() if flt.matches({flt.field: _typed(value, like)}))
        suffix = " in range" if flt.op is FilterOp.RANGE else f" ({flt.op.value})"
        return matched / rows, f"{flt.field}: {matched}/{rows} rows{suffix}"
    return UNKNOWN_SELECTIVITY, f"{flt.field}: no counts, assumed {UNKNOWN_SELECTIVITY}"


def _typed(counted: str, like: object) -> str | int | float:
    """A counted value (counts are keyed by text) as the type of the bound it is compared to."""
    if isinstance(like, bool) or not isinstance(like, int | float):
        return counted
    try:
        number = float(counted)
    except ValueError:
        return counted
    return int(number) if isinstance(like, int) and number.is_integer() else number


def known_selectivity(stats: BackendStatistics | None, filters: Sequence[Filter]) -> float | None:
    """The fraction of rows the filters keep where every filter's value counts are known, else
    ``None``: a promise keyed by selectivity is never made on a guess."""
    fraction, basis = selectivity(stats, filters)
    return None if "assumed" in basis else fraction


def base_latency(contract: Contract, stats: Statistics) -> tuple[float, float | None]:
    """A scan's base latency (the part of its cost that follows neither its candidates nor its
    model calls), and the measured one it came from, if any (else the contract's prior)."""
    backend_stats = stats.backends.get(contract.backend)
    measured = backend_stats.latency_ms.get(contract.rsc_id) if backend_stats else None
    return (measured if measured is not None else contract.cost.base_latency_ms), measured


def estimate_scan(
    contract: Contract,
    *,
    k: int,
    pushed: Sequence[Filter],
    stats: Statistics,
    residual: Sequence[Filter] = (),
    query: Query | None = None,
) -> Estimate:
    """A scan's expected cost: its candidates counted by its access kind (``planner.access``),
    priced by the contract's priors (the per-candidate price scaled by learned statistics)."""
    backend_stats = stats.backends.get(contract.backend)
    rows = backend_stats.rows if backend_stats and backend_stats.rows else DEFAULT_ROWS
    sel, basis = selectivity(backend_stats, pushed)
    if not (backend_stats and backend_stats.rows):
        basis = f"no row count, assumed {DEFAULT_ROWS} rows; {basis}"
    found = candidates_of(contract, rows=rows, sel=sel, k=k, stats=backend_stats, query=query)
    candidates, access = found.candidates, found.how
    if residual:
        # A filter applied after the top-k keeps only a fraction of what the scan reads: to
        # expect k survivors it must read k / that fraction, or come back short.
        kept, kept_basis = selectivity(backend_stats, residual)
        candidates = min(float(rows), candidates / max(kept, 1e-3))
        basis = f"{basis}; postfilter keeps {kept:g} ({kept_basis})"
        access = f"{access}, / postfilter selectivity for k survivors"
    base, measured = base_latency(contract, stats)
    latency = f"base latency {base:g} ms ({'measured' if measured is not None else 'contract prior'})"
    if found.round_trips != 1:
        latency = f"{found.round_trips} round trips x {latency}"
    scale = price_scale(contract, stats)
    if scale != 1.0:
        latency += f"; price per candidate x {scale:g} (learned)"
    cost = (
        found.round_trips * base
        + candidates * contract.cost.per_candidate_us * scale / 1000.0
        + found.hits * contract.cost.per_hit_us / 1000.0
        + contract.model_calls * stats.model_call_ms
    )
    return Estimate(
        rows=rows,
        selectivity=sel,
        candidates=round(candidates, 3),
        cost_ms=round(cost, 6),
        basis=basis,
        access=access,
        latency=latency,
    )


def price_scale(contract: Contract, stats: Statistics) -> float:
    """What learned statistics multiply the contract's prior price per candidate by (1 unlearned)."""
    backend_stats = stats.backends.get(contract.backend)
    return backend_stats.price_scale.get(contract.rsc_id, 1.0) if backend_stats else 1.0


class CostModel:
    """``estimate_scan`` for one compile: each (contract, k, pushed filters) is estimated once.

    Contracts are told apart by ``ref``, unique among the contracts one plan may use. An exact
    scan's estimate does not depend on ``k``, so exact contracts share one entry for every ``k``.
    A caller that already holds one object per distinct pushed-filter tuple (a translation)
    may pass it as ``key`` to spare hashing the filters.
    """

    def __init__(self, stats: Statistics) -> None:
        self.stats = stats
        self._estimates: dict[tuple[str, int, Hashable, Query | None], Estimate] = {}

    def estimate(
        self,
        contract: Contract,
        *,
        k: int,
        pushed: tuple[Filter, ...],
        residual: tuple[Filter, ...] = (),
        ref: str = "",
        key: Hashable = None,
        query: Query | None = None,
    ) -> Estimate:
        walk = kind_of(contract) == "graph"
        by_k = contract.coverage.claim is CoverageClaim.APPROXIMATE or bool(residual) or walk
        entry = (
            ref or contract.ref,
            k if by_k else 0,
            (pushed, residual) if key is None else key,
            query if walk else None,
        )
        found = self._estimates.get(entry)
        if found is None:
            found = self._estimates[entry] = estimate_scan(
                contract, k=k, pushed=pushed, residual=residual, stats=self.stats, query=query
            )
        return found
