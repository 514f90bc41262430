"""Learned statistics: what runs measured, per contract, fed back to the cost model. Advisory only.

``race run --record-stats FILE`` (``Engine.open(..., record_stats=FILE)``) appends one
``race.observation/1`` line per scan that ran against its backend (a result-cache hit measures
the cache, not the backend): the table's rows and the filters' selectivity the plan assumed,
the candidates it expected, the hits, the time, the model calls. ``race plan --stats FILE`` and
``Engine.open(..., statistics=load_learned(FILE))`` plan with them. What a leg that calls the
embedding model took beyond the part of its estimate that follows its candidates is taken for its
model calls: the least, over the contracts, of each one's median per call becomes the cost of a
model call, for every contract that makes one (a query embedding costs the same whichever vector
contract asks for it; what one contract takes beyond that is its own). Each
observed contract's base latency becomes the median of what its scans took beyond their
candidates and model calls, and where its scans took less than their candidates were priced at,
its price per candidate is scaled down by the share they took (median); a contract never
observed keeps its prior. Like every statistic
they only choose among alternatives that keep each obligation's required coverage (I2); their
digest enters the statistics fingerprint and the physical-plan fingerprint.
"""

from __future__ import annotations

import json
import math
import statistics as stats_module
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError

from planner import Statistics
from race.analysis import Analysis
from rsc import (
    BackendStatistics,
    CanonicalFloat,
    InputError,
    Record,
    canonical_json,
    fingerprint,
    first_validation_error,
)

OBSERVATION_SCHEMA_VERSION = "race.observation/1"


class Observation(Record):
    """One scan of one run, as ``race run --record-stats`` appends it."""

    schema_version: Literal["race.observation/1"] = "race.observation/1"
    """Always ``race.observation/1``."""
    plan: str
    """The plan fingerprint of the run."""
    node: str
    """The obligation the scan served."""
    rsc: str
    """The contract scanned, ``rsc_id@version``."""
    backend: str
    """Its backend (the key of the backend statistics the base latency goes to)."""
    k: Annotated[int, Field(ge=1)]
    """The scan's k."""
    rows: Annotated[int, Field(ge=0)]
    """The rows the plan took the table to hold."""
    selectivity: Annotated[CanonicalFloat, Field(ge=0.0, le=1.0)]
    """The fraction of them the pushed filters were expected to keep."""
    candidates: Annotated[CanonicalFloat, Field(ge=0.0)]
    """The candidates the cost model expected."""
    candidate_ms: Annotated[CanonicalFloat, Field(ge=0.0)]
    """The part of the estimate that followed the candidates."""
    hits: Annotated[int, Field(ge=0)]
    """The hits the scan returned."""
    ms: Annotated[CanonicalFloat, Field(ge=0.0)]
    """The time the leg took, in milliseconds."""
    model_calls: Annotated[int, Field(ge=0)]
    """The model calls the leg made."""

    @property
    def rsc_id(self) -> str:
        return self.rsc.split("@", 1)[0]


class ContractSummary(Record):
    """``race stats show``: what the observations of one contract say."""

    rsc: str
    backend: str
    observations: int
    ms_median: CanonicalFloat
    ms_max: CanonicalFloat
    hits_median: CanonicalFloat
    candidates_median: CanonicalFloat
    model_calls_median: CanonicalFloat
    base_ms: CanonicalFloat
    """The base latency the cost model is given: the median time beyond candidates and model calls."""
    price_scale: CanonicalFloat = 1.0
    """What the contract's prior price per candidate is multiplied by: the median, over its scans,
    of the share of their candidates' estimated time they took (1 where they took all of it)."""


class LearnedStatistics(Record):
    """The observations of a statistics file, in file order, and their digest."""

    source: str
    """The file they were read from."""
    observations: tuple[Observation, ...]
    """Every line of the file."""

    @property
    def digest(self) -> str:
        return fingerprint(list(self.observations))

    def model_call_ms(self) -> float | None:
        """The time of one model call: per contract, the median time per call its legs took
        beyond their candidates; the least of these over the contracts (a query embedding costs
        the same whichever contract asks for it, and what one contract takes beyond it is its
        own: a slow scan is not a slow model)."""
        by_rsc: dict[str, list[float]] = {}
        for o in self.observations:
            if o.model_calls > 0:
                by_rsc.setdefault(o.rsc, []).append((o.ms - o.candidate_ms) / o.model_calls)
        if not by_rsc:
            return None
        return round(max(min(stats_module.median(v) for v in by_rsc.values()), 0.0), 3)

    def summary(self) -> tuple[ContractSummary, ...]:
        model_ms = self.model_call_ms() or 0.0
        by_rsc: dict[str, list[Observation]] = {}
        for obs in self.observations:
            by_rsc.setdefault(obs.rsc, []).append(obs)
        out = []
        for rsc, found in sorted(by_rsc.items()):
            parts = [_split(o, model_ms) for o in found]
            out.append(
                ContractSummary(
                    rsc=rsc,
                    backend=found[0].backend,
                    observations=len(found),
                    ms_median=round(stats_module.median(o.ms for o in found), 3),
                    ms_max=max(o.ms for o in found),
                    hits_median=stats_module.median(o.hits for o in found),
                    candidates_median=stats_module.median(o.candidates for o in found),
                    model_calls_median=stats_module.median(o.model_calls for o in found),
                    base_ms=round(stats_module.median(base for base, _ in parts), 3),
                    price_scale=round(stats_module.median(scale for _, scale in parts), 4),
                )
            )
        return tuple(out)

    def apply(self, stats: Statistics) -> Statistics:
        """``stats`` with each observed contract's base latency replaced by the learned one, its
        price per candidate scaled by the learned share, and the learned digest recorded (it then
        enters the physical-plan fingerprint)."""
        backends = dict(stats.backends)
        for item in self.summary():
            known = backends.get(item.backend) or BackendStatistics(backend=item.backend, rows=0)
            rsc_id = item.rsc.split("@", 1)[0]
            latency = {**known.latency_ms, rsc_id: item.base_ms}
            scales = {k: v for k, v in known.price_scale.items() if k != rsc_id}
            if item.price_scale != 1.0:
                scales[rsc_id] = item.price_scale
            backends[item.backend] = known.model_copy(
                update={"latency_ms": dict(sorted(latency.items())), "price_scale": dict(sorted(scales.items()))}
            )
        model_ms = self.model_call_ms()
        update: dict[str, object] = {"backends": dict(sorted(backends.items())), "learned": self.digest}
        if model_ms is not None:
            update["model_call_ms"] = model_ms
        return stats.model_copy(update=update)


def _split(obs: Observation, model_ms: float) -> tuple[float, float]:
    """(base latency, price scale) that account for one scan's time beyond its model calls
    exactly: what exceeds the candidates' estimated time is base latency; a scan that took less
    than its candidates were priced at had no base to speak of and scales their price down."""
    spent = max(obs.ms - obs.model_calls * model_ms, 0.0)
    if spent >= obs.candidate_ms or obs.candidate_ms <= 0.0:
        return spent - obs.candidate_ms if obs.candidate_ms > 0.0 else spent, 1.0
    return 0.0, spent / obs.candidate_ms


def observations_of(analysis: Analysis) -> list[Observation]:
    """The scans of an analyzed run that ran against their backend, in plan order."""
    out = []
    for node in analysis.nodes:
        if node.kind != "scan" or node.cache != "miss" or node.outcome != "ok":
            continue
        if node.actual_ms is None or node.candidate_ms is None:
            continue
        if node.table_rows is None or node.selectivity is None or node.estimated_candidates is None:
            continue
        out.append(
            Observation(
                plan=analysis.plan,
                node=node.node,
                rsc=node.name,
                backend=node.backend,
                k=max(int(node.k or 1), 1),
                rows=node.table_rows,
                selectivity=node.selectivity,
                candidates=node.estimated_candidates,
                candidate_ms=node.candidate_ms,
                hits=node.actual_rows or 0,
                ms=node.actual_ms,
                model_calls=node.model_calls_made or 0,
            )
        )
    return out


def append_observations(path: Path, observations: Sequence[Observation]) -> int:
    """Append one canonical JSON line per observation; returns how many."""
    if not observations:
        return 0
    text = "".join(canonical_json(o).decode("utf-8") + "\n" for o in observations)
    try:
        with path.open("a", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise InputError(f"cannot append statistics: {exc.strerror}", where=str(path)) from exc
    return len(observations)


def record_observations(path: Path | None, analysis: Analysis | None) -> int:
    """Append the observations of an analyzed run to ``path`` (nothing when either is missing)."""
    if path is None or analysis is None:
        return 0
    return append_observations(path, observations_of(analysis))


def is_learned(data: bytes) -> bool:
    """Whether a statistics file holds observations (JSON lines), not one ``race.stats/1`` document."""
    first = data.lstrip().split(b"\n", 1)[0]
    return b'"race.observation/1"' in first


def parse_learned(data: bytes, *, where: str) -> LearnedStatistics:
    """The observations of a statistics file; a bad line is bad input naming ``file:line``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}", where=where) from None
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        place = f"{where}:{number}"
        try:
            record = json.loads(line, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise InputError(f"not a JSON object: {exc}", where=place) from None
        if not isinstance(record, dict):
            raise InputError(f"not a JSON object but {type(record).__name__}", where=place)
        try:
            obs = Observation.model_validate(record)
        except ValidationError as exc:
            raise InputError(first_validation_error(exc), where=place) from None
        if not all(math.isfinite(v) for v in (obs.ms, obs.candidates, obs.candidate_ms, obs.selectivity)):
            raise InputError("a figure is not a finite number", where=place)
        found.append(obs)
    if not found:
        raise InputError("no observations (an empty statistics file)", where=where)
    return LearnedStatistics(source=where, observations=tuple(found))


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


PlanStatistics = Statistics | LearnedStatistics
"""What an engine may be given to plan with: statistics that replace the index's own, or learned
statistics applied over them."""


def load_statistics(path: Path) -> PlanStatistics:
    """A statistics file: one ``race.stats/1`` document, or ``race.observation/1`` lines."""
    from race.indexing.instances import load_statistics as load_document

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    return parse_learned(data, where=str(path)) if is_learned(data) else load_document(path)


def load_learned(path: Path) -> LearnedStatistics:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    return parse_learned(data, where=str(path))


def summary_text(learned: LearnedStatistics, summaries: Iterable[ContractSummary]) -> str:
    lines = [
        f"statistics  {learned.source}: {len(learned.observations)} observations, digest {learned.digest}",
        f"model call  {_or_prior(learned.model_call_ms())}",
        "",
        f"{'contract':<34} {'n':>4} {'ms med':>9} {'ms max':>9} {'hits':>5} {'cand':>9} {'model':>5} {'base ms':>9}"
        f" {'price x':>7}",
    ]
    for s in summaries:
        lines.append(
            f"{s.rsc:<34} {s.observations:>4} {s.ms_median:>9g} {s.ms_max:>9g} {s.hits_median:>5g}"
            f" {s.candidates_median:>9g} {s.model_calls_median:>5g} {s.base_ms:>9g} {s.price_scale:>7g}"
        )
    return "\n".join(lines) + "\n"


def _or_prior(model_ms: float | None) -> str:
    return f"{model_ms:g} ms (median per call)" if model_ms is not None else "not observed (the prior stands)"
