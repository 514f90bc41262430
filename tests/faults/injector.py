"""Fault injection in front of a real adapter.

A ``FaultyAdapter`` wraps one opened adapter and, for the obligations it is told about
(matched on ``request.obligation``), injects one ``Fault`` into that obligation's scans:
slowness (an async delay, an async hang, a hang inside a worker thread, an answer held
back past the leg deadline), an adapter that does not cooperate with cancellation (a plain
thread hop that cannot be abandoned, a C call sleeping in such a thread, a client that
shields itself from cancellation and swallows it: ``UNCOOPERATIVE``), exceptions of any
type raised in the coroutine or in the worker thread, and malformed answers (a non-finite
or negative score, a hit outside the request's pushed filters, a duplicate key, custody that
does not name the request). Every
other call, and every other attribute, goes to the real adapter unchanged.

What was injected is recorded (``injected``), with the request it hit and, for a malformed
answer, the key of the damaged hit, so that a check can look for exactly that hit in the
receipt. A fault that cannot be applied to an answer (no hits to damage, no pushed filter
to violate) is recorded in ``not_applied`` and the answer goes through untouched.
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from backends import Adapter, blocking
from backends.base import request_fingerprint
from rsc import Contract, Filter, Hit, ScanRequest, ScanResult

HANG_S = 5.0
"""How long a hang lasts: far past any deadline the suite sets, short enough that an
executor that waits for it costs seconds, not a stuck run."""

Category = Literal["error", "timing", "malformed"]

_CATEGORY: dict[str, Category] = {
    "delay": "timing",
    "hang_async": "timing",
    "hang_thread": "timing",
    "late_answer": "timing",
    "hop_thread": "timing",
    "c_sleep": "timing",
    "ignore_cancel": "timing",
    "raise_task": "error",
    "raise_thread": "error",
    "nan_score": "malformed",
    "inf_score": "malformed",
    "negative_score": "malformed",
    "out_of_filter": "malformed",
    "duplicate_hits": "malformed",
    "truncated_custody": "malformed",
}

REASON_WORDS: dict[str, tuple[str, ...]] = {
    "nan_score": ("non-finite",),
    "inf_score": ("non-finite",),
    "negative_score": ("negative",),
    "out_of_filter": ("filter",),
    "duplicate_hits": ("duplicate",),
    "truncated_custody": ("custody", "request"),
}
"""For each malformed answer, the words one of which the drop gap's detail must use."""


@dataclass(frozen=True)
class Fault:
    """One fault. Build it with the functions below (``raise_task(KeyError("…"))``, …)."""

    kind: str
    seconds: float | None = None
    exc: Exception | None = None
    n: int | None = None
    inner: Fault | None = None

    @property
    def base(self) -> Fault:
        """The fault actually applied (``nth_call`` unwrapped)."""
        return self.inner.base if self.inner is not None else self

    @property
    def category(self) -> Category:
        return _CATEGORY[self.base.kind]

    @property
    def name(self) -> str:
        if self.kind == "nth_call":
            assert self.inner is not None
            return f"nth_call({self.n},{self.inner.name})"
        if self.exc is not None:
            return f"{self.kind}({type(self.exc).__name__})"
        if self.kind in ("delay", "late_answer") and self.seconds is not None:
            return f"{self.kind}({self.seconds:g}s)"
        return self.kind

    @property
    def message(self) -> str:
        """The text of the injected exception that a gap's detail must carry."""
        assert self.base.exc is not None
        exc = self.base.exc
        return str(exc.args[0]) if exc.args else str(exc)


def delay(seconds: float) -> Fault:
    """Sleep (asynchronously) ``seconds`` before asking the backend."""
    return Fault("delay", seconds=seconds)


def hang_async(seconds: float = HANG_S) -> Fault:
    """``anyio.sleep`` far past the deadline, then answer."""
    return Fault("hang_async", seconds=seconds)


def hang_thread(seconds: float = HANG_S) -> Fault:
    """``time.sleep`` inside ``backends.blocking`` (a worker thread) far past the deadline."""
    return Fault("hang_thread", seconds=seconds)


STUCK_S = 2.0
"""How long an uncooperative fault holds its call: past every deadline of the matrix, short
enough that the threads it holds are back within a few cases."""


def hop_thread(seconds: float = STUCK_S) -> Fault:
    """``time.sleep`` in a plain ``anyio.to_thread.run_sync`` hop (no ``abandon_on_cancel``):
    the coroutine cannot be cancelled until the thread returns."""
    return Fault("hop_thread", seconds=seconds)


def c_sleep(seconds: float = STUCK_S) -> Fault:
    """The C library's ``sleep`` called through ``ctypes`` in a plain thread hop: a C call
    holding its thread, which nothing in Python can interrupt."""
    return Fault("c_sleep", seconds=seconds)


def ignore_cancel(seconds: float = STUCK_S / 2) -> Fault:
    """A client that ignores cancellation: it waits in a shielded scope and swallows every
    cancellation that reaches it, then answers. (Half of ``STUCK_S``: a task that ignores
    cancellation also holds the end of the event loop it ran on, each case's own.)"""
    return Fault("ignore_cancel", seconds=seconds)


UNCOOPERATIVE: tuple[Fault, ...] = (hop_thread(), c_sleep(), ignore_cancel())


def _c_sleep(seconds: float) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.sleep(ctypes.c_uint(math.ceil(seconds)))


async def _stubborn_wait(seconds: float) -> None:
    end = anyio.current_time() + seconds
    while (left := end - anyio.current_time()) > 0:
        try:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(left)
        except anyio.get_cancelled_exc_class():
            continue  # a native cancellation that reached the task anyway: ignored too


def raise_task(exc: Exception) -> Fault:
    """Raise ``exc`` (a fresh copy each call) in the adapter's coroutine."""
    return Fault("raise_task", exc=exc)


def raise_thread(exc: Exception) -> Fault:
    """Raise ``exc`` inside a function run through ``backends.blocking``."""
    return Fault("raise_thread", exc=exc)


def late_answer(seconds: float) -> Fault:
    """Ask the backend at once but hand its (real) answer back only ``seconds`` after the call."""
    return Fault("late_answer", seconds=seconds)


def nan_score() -> Fault:
    return Fault("nan_score")


def inf_score() -> Fault:
    return Fault("inf_score")


def negative_score() -> Fault:
    return Fault("negative_score")


def out_of_filter() -> Fault:
    return Fault("out_of_filter")


def duplicate_hits() -> Fault:
    return Fault("duplicate_hits")


def truncated_custody() -> Fault:
    return Fault("truncated_custody")


def nth_call(n: int, fault: Fault) -> Fault:
    """``fault`` on the ``n``-th call (1-based) for the obligation only; the others answer normally."""
    if n < 1:
        raise ValueError("calls are counted from 1")
    return Fault("nth_call", n=n, inner=fault)


@dataclass
class Injection:
    """One fault as it was applied."""

    obligation: str
    call: int
    fault: str
    request: ScanRequest
    key: str | None = None
    """The key of the damaged (or duplicated) hit of a malformed answer."""
    bogus_request: str | None = None
    """``truncated_custody``: the custody ``request`` the damaged hit carries instead."""
    hits: int = 0
    """How many hits the real answer had (malformed answers and late answers)."""

    @property
    def fingerprint(self) -> str:
        return request_fingerprint(self.request)


def _raise_copy(exc: Exception) -> None:
    # A fresh copy per raise: one instance raised repeatedly would pile up tracebacks.
    raise copy.copy(exc)


_OUTSIDE: tuple[Any, ...] = ("fault-injected-value", "0000-01-01", "9999-12-31", -1, 10**12, True)


def _outside(flt: Filter, metadata: Mapping[str, Any]) -> Any | None:
    """A value of ``flt.field`` that fails ``flt``, or None."""
    for candidate in _OUTSIDE:
        if not flt.matches({**metadata, flt.field: candidate}):
            return candidate
    return None


@dataclass(eq=False)
class FaultyAdapter(Adapter):
    """A real adapter with one fault per chosen obligation injected in front of it."""

    inner: Adapter
    faults: dict[str, Fault] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    requests: list[ScanRequest] = field(default_factory=list)
    injected: list[Injection] = field(default_factory=list)
    not_applied: list[str] = field(default_factory=list)

    backend = "faulty"

    def __post_init__(self) -> None:
        self.backend = self.inner.backend  # type: ignore[misc]

    # -- delegation ------------------------------------------------------------------------

    def contracts(self) -> tuple[Contract, ...]:  # type: ignore[override]
        return self.inner.contracts()

    def index_contracts(self) -> tuple[Contract, ...]:
        # The contracts generated for the wrapped index (its schema's fields), not the shipped ones.
        return self.inner.index_contracts()

    @property
    def corpus_schema(self) -> Any:  # type: ignore[override]
        # Plan filters are checked, and roles read, against the wrapped index's schema.
        return self.inner.corpus_schema

    @classmethod
    def build(cls, corpus: Any, index_dir: Path, progress: Any = None) -> str:
        raise NotImplementedError("a faulty adapter wraps an opened one")

    @classmethod
    def open(cls, index_dir: Path) -> FaultyAdapter:
        raise NotImplementedError("a faulty adapter wraps an opened one")

    @property
    def identity(self) -> str:
        return self.inner.identity

    def generation(self) -> str:
        return self.inner.generation()

    async def current_generation(self) -> str:
        return await self.inner.current_generation()

    def statistics(self) -> Any:
        return self.inner.statistics()

    def models(self) -> tuple[dict[str, str | int], ...]:
        return self.inner.models()

    async def aclose(self) -> None:
        # The wrapped adapter belongs to whoever opened it.
        return None

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this wrapper lacks (origins, related, fetch, …).
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- scans -----------------------------------------------------------------------------

    def _fault_for(self, obligation: str, call: int) -> Fault | None:
        fault = self.faults.get(obligation)
        while fault is not None and fault.kind == "nth_call":
            fault = fault.inner if call == fault.n else None
        return fault

    async def scan(self, request: ScanRequest) -> ScanResult:
        call = self.calls[request.obligation] = self.calls.get(request.obligation, 0) + 1
        self.requests.append(request)
        fault = self._fault_for(request.obligation, call)
        if fault is None:
            return await self.inner.scan(request)
        if fault.category == "malformed":
            return self._malformed(fault, request, call, await self.inner.scan(request))
        injection = Injection(request.obligation, call, fault.name, request)
        self.injected.append(injection)
        if fault.kind == "raise_task":
            assert fault.exc is not None
            _raise_copy(fault.exc)
        if fault.kind == "raise_thread":
            assert fault.exc is not None
            await blocking(_raise_copy, fault.exc)
            raise AssertionError("unreachable: the worker thread raised")
        assert fault.seconds is not None
        if fault.kind in ("delay", "hang_async"):
            await anyio.sleep(fault.seconds)
            return await self.inner.scan(request)
        if fault.kind == "hang_thread":
            await blocking(time.sleep, fault.seconds)
            return await self.inner.scan(request)
        if fault.kind == "hop_thread":
            await anyio.to_thread.run_sync(time.sleep, fault.seconds)
            return await self.inner.scan(request)
        if fault.kind == "c_sleep":
            await anyio.to_thread.run_sync(_c_sleep, fault.seconds)
            return await self.inner.scan(request)
        if fault.kind == "ignore_cancel":
            await _stubborn_wait(fault.seconds)
            return await self.inner.scan(request)
        if fault.kind == "late_answer":
            started = anyio.current_time()
            answer = await self.inner.scan(request)
            injection.hits = len(answer.hits)
            await anyio.sleep(max(0.0, started + fault.seconds - anyio.current_time()))
            return answer
        raise AssertionError(f"unknown fault {fault.kind!r}")

    def _malformed(self, fault: Fault, request: ScanRequest, call: int, answer: ScanResult) -> ScanResult:
        hits = list(answer.hits)
        if not hits:
            self.not_applied.append(f"{request.obligation} call {call}: {fault.name}: the answer has no hits")
            return answer
        first = hits[0]
        injection = Injection(request.obligation, call, fault.name, request, key=first.key, hits=len(hits))
        if fault.kind in ("nan_score", "inf_score", "negative_score"):
            score = {
                "nan_score": math.nan,
                "inf_score": math.inf,
                "negative_score": -abs(first.custody.score) - 1.0,
            }[fault.kind]
            hits[0] = _with_custody(first, score=score)
        elif fault.kind == "out_of_filter":
            damaged = self._outside_filter(first, request)
            if damaged is None:
                self.not_applied.append(
                    f"{request.obligation} call {call}: {fault.name}: no pushed filter on a metadata field to violate"
                )
                return answer
            hits[0] = damaged
        elif fault.kind == "duplicate_hits":
            hits.append(_with_custody(first, rank=len(hits) + 1))
        elif fault.kind == "truncated_custody":
            bogus = request_fingerprint(request)[:-8]
            injection.bogus_request = bogus
            hits[0] = _with_custody(first, request=bogus)
        else:  # pragma: no cover - _CATEGORY lists every malformed kind
            raise AssertionError(f"unknown fault {fault.kind!r}")
        self.injected.append(injection)
        return answer.model_copy(update={"hits": tuple(hits)})

    @staticmethod
    def _outside_filter(hit: Hit, request: ScanRequest) -> Hit | None:
        """The hit with its metadata changed so that it fails one of the request's pushed
        filters (one on a field the hit's metadata carries and currently passes)."""
        for flt in request.pushed:
            if flt.field not in hit.metadata or not flt.matches(hit.metadata):
                continue
            value = _outside(flt, hit.metadata)
            if value is not None:
                return hit.model_copy(update={"metadata": {**hit.metadata, flt.field: value}})
        return None


def _with_custody(hit: Hit, **changes: Any) -> Hit:
    """A copy of a frozen hit with some custody fields changed (``model_copy`` does not
    validate, which is what lets a malformed value through, as a broken backend would)."""
    return hit.model_copy(update={"custody": hit.custody.model_copy(update=changes)})


def faulty_adapters(
    adapters: Mapping[str, Adapter], *, backend: str | None = None, faults: Mapping[str, Fault] | None = None
) -> dict[str, FaultyAdapter]:
    """Every adapter wrapped (so every call is counted); ``faults`` only on ``backend``."""
    return {
        name: FaultyAdapter(adapter, dict(faults or {}) if name == backend else {})
        for name, adapter in sorted(adapters.items())
    }
