"""The leg runner: one backend request under the run's deadlines, limits and caches.

Every fault is contained here, at the leg edge. Whatever an adapter raises, of any type and
on any thread, becomes a gap on the obligation it served (I7); a leg that does not answer
by its timeout is a ``timeout`` gap and its late answer is discarded; the plan deadline bounds
every read (I17). Each adapter call runs as a task the leg can leave behind
(``race.run.detached``), so these bounds hold whatever the adapter does inside the call.
An answer is screened before anything reads it: malformed hits are dropped with a
``backend_error`` gap that counts them. The run's operational record (timings, calls,
cache and model-call counts) is kept beside the results, never in them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import anyio

from backends.base import UNKNOWN_GENERATION as UNKNOWN_GENERATION
from backends.base import Adapter, request_fingerprint
from planner import Generations, ScanNode
from race.run.answers import screen
from race.run.detached import CallPool
from race.run.outcome import FAILURE_GAPS, gap
from race.tracing import gap_kinds, span
from rsc import BackendTimeout, Contract, Gap, GapKind, ScanRequest, ScanResult, SnapshotMoved, fingerprint

_log = logging.getLogger(__name__)


class ScanCache(Protocol):
    """Where a leg reads and keeps scan results by request key (``race.state.cache.ResultCache``)."""

    def get(self, key: str) -> ScanResult | None: ...

    def put(self, key: str, result: ScanResult) -> None: ...


@dataclass
class LegRecord:
    ms: float
    cache: str
    hits: int
    outcome: str
    model_calls: int = 0


@dataclass(frozen=True)
class Answer:
    """A leg's result (``None`` when it failed) and the gaps the leg itself gives."""

    result: ScanResult | None
    gaps: tuple[Gap, ...]


@dataclass
class Operational:
    legs: dict[str, LegRecord] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    cache: dict[str, int] = field(default_factory=lambda: {"hit": 0, "miss": 0})
    model_calls_made: int = 0
    left_behind: dict[str, int] = field(default_factory=dict)
    """Per backend, the calls this run stopped waiting for while they still ran."""
    refused: int = 0
    """Legs not started for want of time or of room in the call pool: the receipt depends on timing."""


def failure_detail(exc: BaseException) -> str:
    """An exception as a gap names it: its type (the live one, for a replayed failure) and text."""
    kind = getattr(exc, "original_type", None) or type(exc).__name__
    text = str(exc).strip() or "no message"
    return f"{kind}: {text}"


class LegRunner:
    def __init__(
        self,
        *,
        adapters: Mapping[str, Adapter],
        generations: Mapping[str, str],
        caller: Generations,
        contracts: Mapping[str, Contract],
        deadline: float,
        deadline_ms: int,
        concurrency: int,
        cache: ScanCache | None,
        pool: CallPool | None = None,
    ) -> None:
        self.adapters = adapters
        self.generations = generations
        self.caller = caller
        self.contracts = contracts
        self.deadline = deadline
        self.deadline_ms = deadline_ms
        self.cache = cache
        self.operational = Operational()
        self.pool = pool if pool is not None else CallPool()
        self._concurrency = concurrency
        self._limiters: dict[str, anyio.CapacityLimiter] = {}
        """Each backend's, made when its first leg starts: most runs read one or two backends."""
        self._answered: dict[str, ScanResult] = {}
        self.running: dict[str, tuple[str, ScanNode]] = {}
        """The legs in flight, by label: what a run cut short was still waiting for."""
        self.failures: dict[str, list[Gap]] = {}
        """The gaps of the legs that failed, by obligation: what a run cut short still names."""
        self._waits: dict[str, anyio.CancelScope] = {}
        """The scope each running leg waits in, by label: a deadline moved earlier reaches them."""
        self._cut_early: set[str] = set()

    def move_deadline(self, deadline: float) -> None:
        """Legs stop starting at ``deadline`` from now on, and the running ones stop waiting
        then too (``race.run.lateness``): their gap is ``cancelled`` at the plan deadline."""
        self.deadline = deadline
        at = anyio.current_time() + (deadline - time.monotonic())
        for label, scope in sorted(self._waits.items()):
            if at < scope.deadline:
                scope.deadline = at
                self._cut_early.add(label)

    def remaining_ms(self) -> float:
        return (self.deadline - time.monotonic()) * 1000.0

    async def fetch(self, scan: ScanNode, obligation: str, label: str) -> Answer:
        """``_fetch`` in a ``race.leg`` span, logged at DEBUG (a failed call at WARNING)."""
        request = scan.request
        contract = f"{request.rsc_id}@{request.rsc_version}"
        about = {"obligation": obligation, "backend": request.backend, "contract": contract, "mode": request.mode}
        with span("race.leg", label=label, **about) as leg:
            answer = await self._fetch(scan, obligation, label)
            record = self.operational.legs.get(label)
            gaps = (*answer.gaps, *(answer.result.gaps if answer.result is not None else ()))
            failed = [g for g in gaps if g.kind in FAILURE_GAPS]
            if leg.recording:
                model_calls = answer.result.model_calls if answer.result is not None else 0
                if record is not None:
                    leg.set(ms=record.ms, cache=record.cache, hits=record.hits, outcome=record.outcome)
                leg.set(gap_kinds=gap_kinds(gaps), model_calls=model_calls)
                if failed:
                    leg.fail(failed[0].detail)
        outcome = record.outcome if record is not None else "shared"
        if any(g.kind is GapKind.BACKEND_ERROR for g in failed):
            _log.warning("leg %s %s %s: %s (%s)", label, request.backend, contract, outcome, failed[0].detail)
        if _log.isEnabledFor(logging.DEBUG):
            figures = f"{record.ms} ms, {record.hits} hits, cache {record.cache}" if record is not None else "answered"
            kinds = gap_kinds(gaps)
            _log.debug("leg %s %s %s: %s, %s, gaps %s", label, request.backend, contract, outcome, figures, kinds)
        return answer

    async def _fetch(self, scan: ScanNode, obligation: str, label: str) -> Answer:
        """``scan``'s request through the result cache, the backend's concurrency limit and the
        leg and plan deadlines; a request already answered in this run is not sent again."""
        request = scan.request
        backend = request.backend
        planned = tuple(scan.planned_gaps)
        adapter = self.adapters.get(backend)
        record = self.operational.legs
        if adapter is None:
            record[label] = LegRecord(0.0, "none", 0, "backend_error")
            why = f"backend {backend!r} is not open in this engine"
            return Answer(None, (*planned, gap(GapKind.BACKEND_ERROR, obligation, why, backend)))
        # Past the deadline nothing more is read, not even the cache: a node not reached costs
        # the run only its gap, so that a plan of any size ends in time (I17).
        remaining = self.remaining_ms()
        if remaining <= 0:
            why = f"plan deadline {self.deadline_ms} ms passed before the leg started"
            return self._refused(label, obligation, backend, planned, why)
        # The snapshot the adapters are pinned to for this run: what the plan was made with.
        generation = self.generations.get(backend, UNKNOWN_GENERATION)
        contract = self.contracts.get(scan.rsc)
        # Everything the answer depends on: the translated request (query, filters, k, mode,
        # backend; by its fingerprint, remembered for the request), the contract and its
        # translator, the pinned snapshot, the caller's generations.
        key = fingerprint(
            {
                "request": request_fingerprint(request),
                "contract": scan.rsc,
                "translator": contract.translator_version if contract is not None else "",
                "generation": generation,
                "caller": self.caller,
            }
        )
        if key in self._answered:
            return Answer(self._answered[key], planned)
        cacheable = self.cache is not None and contract is not None and generation != UNKNOWN_GENERATION
        started = time.monotonic()
        result = self.cache.get(key) if cacheable and self.cache is not None else None
        if result is not None:
            self.operational.cache["hit"] += 1
            self._answered[key] = result
            record[label] = LegRecord(round((time.monotonic() - started) * 1000.0, 3), "hit", len(result.hits), "ok")
            return Answer(result, planned)
        if self.pool.full(backend):
            why = (
                f"not started: {self.pool.capacity} earlier calls to {backend} that runs stopped waiting "
                "for are still running (the call pool is full)"
            )
            return self._refused(label, obligation, backend, planned, why)
        self.operational.calls[backend] = self.operational.calls.get(backend, 0) + 1
        # Kept when the run is cut short here: the cut names the legs it was still waiting for.
        self.running[label] = (obligation, scan)
        result, failure = await self._call(adapter, scan, obligation, label, remaining)
        del self.running[label]
        elapsed = round((time.monotonic() - started) * 1000.0, 3)
        if result is None:
            assert failure is not None
            record[label] = LegRecord(elapsed, "miss", 0, failure.kind.value)
            self.failures.setdefault(obligation, []).append(failure)
            return Answer(None, (*planned, failure))
        self.operational.model_calls_made += result.model_calls
        result, malformed = screen(request, result, contract.score_kind if contract is not None else None)
        gaps = planned if malformed is None else (*planned, malformed)
        clean = malformed is None and not any(g.kind in FAILURE_GAPS for g in result.gaps)
        if cacheable and self.cache is not None and clean:
            self.cache.put(key, result)
            self.operational.cache["miss"] += 1
        self._answered[key] = result
        outcome = "ok" if malformed is None else "malformed"
        record[label] = LegRecord(elapsed, "miss", len(result.hits), outcome, result.model_calls)
        return Answer(result, gaps)

    def _refused(self, label: str, obligation: str, backend: str, planned: tuple[Gap, ...], why: str) -> Answer:
        self.operational.legs[label] = LegRecord(0.0, "none", 0, "resource_limited")
        self.operational.refused += 1
        return Answer(None, (*planned, gap(GapKind.RESOURCE_LIMITED, obligation, why, backend)))

    async def _call(
        self, adapter: Adapter, scan: ScanNode, obligation: str, label: str, remaining_ms: float
    ) -> tuple[ScanResult | None, Gap | None]:
        """One adapter call; every way it can fail is a gap."""
        backend = scan.request.backend
        plan_bound = remaining_ms < scan.deadline_ms
        timeout_ms = min(float(scan.deadline_ms), remaining_ms)
        try:
            with anyio.move_on_after(timeout_ms / 1000.0) as scope:
                self._waits[label] = scope
                try:
                    return await self._limited(backend, adapter, scan.request), None
                finally:
                    del self._waits[label]
        except TimeoutError as exc:
            # A replayed deadline carries the live run's verdict; replay never re-measures time.
            if hasattr(exc, "plan_bound"):
                return None, self._deadline_gap(scan, obligation, bool(exc.plan_bound))
            return None, gap(GapKind.TIMEOUT, obligation, f"{scan.rsc}: {failure_detail(exc)}", backend)
        except BackendTimeout as exc:
            return None, gap(GapKind.TIMEOUT, obligation, f"{scan.rsc}: {exc}", backend)
        except SnapshotMoved as exc:
            # The leg is refused: its backend cannot be read at the snapshot the plan was made with.
            return None, gap(GapKind.SNAPSHOT_MOVED, obligation, f"{scan.rsc}: {exc}", backend)
        except Exception as exc:
            return None, gap(GapKind.BACKEND_ERROR, obligation, f"{scan.rsc}: {failure_detail(exc)}", backend)
        assert scope.cancelled_caught
        return None, self._deadline_gap(scan, obligation, plan_bound or label in self._cut_early)

    def deadline_gap(self, scan: ScanNode, obligation: str) -> Gap:
        """The gap of a leg still in flight when the run was cut short at the plan deadline."""
        return self._deadline_gap(scan, obligation, plan_bound=True)

    def _deadline_gap(self, scan: ScanNode, obligation: str, plan_bound: bool) -> Gap:
        if plan_bound:
            why = f"cancelled at the plan deadline ({self.deadline_ms} ms)"
        else:
            why = f"no answer within the leg deadline of {scan.deadline_ms} ms"
        kind = GapKind.CANCELLED if plan_bound else GapKind.TIMEOUT
        detail = f"{scan.rsc}: {why}; absence of hits is not absence of evidence"
        return gap(kind, obligation, detail, scan.request.backend)

    async def _limited(self, backend: str, adapter: Adapter, request: ScanRequest) -> ScanResult:
        """``adapter.scan`` within the backend's concurrency limit, as a call the leg can leave
        behind. A free slot is taken without a trip through the event loop; a full limiter waits
        (and can be cancelled) as usual. A call left behind gives its slot back at once."""
        limiter = self._limiters.get(backend)
        if limiter is None:
            limiter = self._limiters[backend] = anyio.CapacityLimiter(self._concurrency)
        try:
            limiter.acquire_nowait()
        except anyio.WouldBlock:
            await limiter.acquire()
        try:
            # A scan that is one blocking call runs on its worker thread with no task of its own.
            call = adapter.scan_call(request)
            if call is not None:
                result = await self.pool.call_blocking(backend, call, self.operational.left_behind)
            else:
                result = await self.pool.call(backend, partial(adapter.scan, request), self.operational.left_behind)
        finally:
            limiter.release()
        if not isinstance(result, ScanResult):
            raise TypeError(f"adapter {backend!r} answered {type(result).__name__}, not a ScanResult")
        return result
