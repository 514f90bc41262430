"""Spans around what a run does: plan, set-up, pins, each leg, each fusion and the run itself.

``span(name, **attributes)`` opens an OpenTelemetry span from ``trace.get_tracer("race")``
when the library is installed (extra ``[otel]``) and the application has set a tracer
provider; otherwise it yields a span that does nothing, and OpenTelemetry is never imported.
Attributes are named ``race.<key>``; lists become tuples of strings. Nothing here enters a
receipt: spans only read what the run records.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from race.receipt import Receipt

TRACER_NAME = "race"

_available: bool | None = None


class Span:
    """A span that records nothing: what ``span`` yields when tracing is off. It is its own
    context manager, so that a span nobody listens to costs no generator."""

    recording = False

    def set(self, **attributes: Any) -> None:
        """Set attributes on the span (after the fact: hits, gap kinds, model calls)."""

    def fail(self, description: str) -> None:
        """Mark the span as failed (a leg's ``backend_error``, a pin that failed)."""

    def __enter__(self) -> Span:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_OFF = Span()


class _Live(Span):
    recording = True

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, **attributes: Any) -> None:
        for key, value in attributes.items():
            if value is not None:
                self._span.set_attribute(f"race.{key}", _value(value))

    def fail(self, description: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_status(Status(StatusCode.ERROR, description))


def _value(value: Any) -> Any:
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Iterable):
        return tuple(str(v) for v in value)
    return str(value)


_trace: Any = None
"""``opentelemetry.trace`` once found, else ``None`` (never imported when not installed)."""
_off_providers: tuple[type, ...] = ()


def prepare() -> None:
    """Find OpenTelemetry once (importing it where installed: tens of milliseconds). Set-up: an
    engine calls it when it is made, so that no span's first use imports on the event loop."""
    global _available, _trace, _off_providers
    if _available is None:
        _available = importlib.util.find_spec("opentelemetry") is not None
        if _available:
            from opentelemetry import trace
            from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

            _trace, _off_providers = trace, (ProxyTracerProvider, NoOpTracerProvider)


def _tracer() -> Any:
    """The ``race`` tracer, or ``None`` when OpenTelemetry is absent or has no provider set
    (asked on every span: an application may set its provider after RACE is imported)."""
    if _available is None:
        prepare()
    if _trace is None:
        return None
    provider = _trace.get_tracer_provider()
    if isinstance(provider, _off_providers):
        return None
    return provider.get_tracer(TRACER_NAME)


def span(name: str, **attributes: Any) -> AbstractContextManager[Span]:
    """A span named ``name`` around the block, current for whatever the block starts."""
    tracer = _tracer()
    if tracer is None:
        return _OFF
    return _live(tracer, name, attributes)


@contextmanager
def _live(tracer: Any, name: str, attributes: dict[str, Any]) -> Iterator[Span]:
    with tracer.start_as_current_span(name) as live:
        out = _Live(live)
        out.set(**attributes)
        yield out


def gap_kinds(gaps: Iterable[Any]) -> list[str]:
    """The distinct kinds of ``gaps``, sorted."""
    return sorted({g.kind.value for g in gaps})


def run_attributes(receipt: Receipt) -> dict[str, Any]:
    """What the ``race.run`` span says about a finished run."""
    operational = receipt.operational
    return {
        "statuses": [f"{status}={n}" for status, n in sorted(receipt.coverage.statuses.items()) if n],
        "gap_kinds": gap_kinds(receipt.gaps),
        "wall_ms": operational.wall_ms,
        "setup_ms": operational.setup_ms,
        "legs": len(operational.legs),
        "model_calls": operational.model_calls_made,
        "plan_cache": operational.plan_cache,
        "receipt_cache": operational.receipt_cache,
    }
