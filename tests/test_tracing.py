"""Spans and log records of a run (race.tracing), with the OpenTelemetry SDK's in-memory
exporter: one ``race.leg`` span per leg the receipt records, each a child of ``race.run`` and
saying what the receipt says; a failed leg's span carries ``backend_error`` and an error
status; and nothing from tracing or logging enters the normalized receipt."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import race.tracing
from race.engine import Engine
from tests.conftest import roomy_plan
from tests.faults.injector import FaultyAdapter, raise_task

PLAN = roomy_plan("showcase.json")


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The in-memory exporter behind the process's tracer provider (set once per process)."""
    out = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    assert isinstance(trace.get_tracer_provider(), TracerProvider)
    provider.add_span_processor(SimpleSpanProcessor(out))
    yield out
    out.shutdown()  # later tests' spans are dropped, not kept


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    exporter.clear()
    yield exporter
    exporter.clear()


def _named(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_one_leg_span_per_leg_with_what_the_receipt_says(index_dir: Path, spans: InMemorySpanExporter) -> None:
    with Engine.open(index_dir) as engine:
        receipt = engine.run_sync(PLAN)
    finished = spans.get_finished_spans()
    (run,) = _named(finished, "race.run")
    legs = _named(finished, "race.leg")
    recorded = receipt.operational.legs
    assert len(legs) == len(recorded) > 1
    assert sorted(_attrs(s)["race.label"] for s in legs) == sorted(recorded)
    for leg in legs:
        attrs = _attrs(leg)
        assert leg.parent is not None and leg.parent.span_id == run.context.span_id
        record = recorded[attrs["race.label"]]
        assert {k: attrs[f"race.{k}"] for k in ("ms", "cache", "hits", "outcome", "model_calls")} == record
        obligation, contract = attrs["race.label"].split("/")
        assert (attrs["race.obligation"], attrs["race.contract"]) == (obligation, contract)
        ob = next(o for o in receipt.obligations if o.id == obligation)
        assert set(attrs["race.gap_kinds"]) <= {g.kind.value for g in ob.gaps}
        assert leg.status.status_code is StatusCode.UNSET
    assert sum(_attrs(s)["race.model_calls"] for s in legs) == receipt.operational.model_calls_made
    attrs = _attrs(run)
    assert attrs["race.legs"] == len(recorded)
    assert attrs["race.wall_ms"] == receipt.operational.wall_ms
    assert attrs["race.setup_ms"] == receipt.operational.setup_ms
    assert list(attrs["race.gap_kinds"]) == sorted({g.kind.value for g in receipt.gaps})
    statuses = receipt.coverage.statuses
    assert list(attrs["race.statuses"]) == [f"{s}={n}" for s, n in sorted(statuses.items()) if n]
    # Plan, set-up, pins and fusion are spans of the run too.
    for name in ("race.plan", "race.setup", "race.pin", "race.fusion"):
        found = _named(finished, name)
        assert found, name
        assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in found)
    plan = _named(finished, "race.plan")[-1]
    assert _attrs(plan)["race.fingerprint"] == receipt.fingerprints.plan
    fused = {_attrs(s)["race.node"]: _attrs(s) for s in _named(finished, "race.fusion")}
    assert fused[PLAN["root"]]["race.items"] == len(receipt.evidence)


def test_a_failed_leg_span_carries_backend_error_and_an_error_status(
    session_engine: Engine, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    adapters = dict(session_engine.adapters)
    adapters["tantivy"] = FaultyAdapter(adapters["tantivy"], {"cve-id": raise_task(RuntimeError("boom"))})
    caplog.set_level(logging.DEBUG, logger="race")
    # Not closed: the adapters are the session engine's.
    receipt = Engine(adapters).run_sync(PLAN)
    assert receipt.operational.legs["cve-id/tantivy.exact@1.1.0"]["outcome"] == "backend_error"
    legs = {_attrs(s)["race.label"]: s for s in _named(spans.get_finished_spans(), "race.leg")}
    assert sorted(legs) == sorted(receipt.operational.legs)
    failed = legs["cve-id/tantivy.exact@1.1.0"]
    assert "backend_error" in _attrs(failed)["race.gap_kinds"]
    assert failed.status.status_code is StatusCode.ERROR
    assert "boom" in (failed.status.description or "")
    healthy = [s for label, s in legs.items() if label != "cve-id/tantivy.exact@1.1.0"]
    assert all(s.status.status_code is StatusCode.UNSET for s in healthy)
    (run,) = _named(spans.get_finished_spans(), "race.run")
    assert "backend_error" in _attrs(run)["race.gap_kinds"]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in warnings] == ["race.run.legs"]
    assert "cve-id/tantivy.exact@1.1.0" in warnings[0].getMessage()


def test_normalized_receipt_is_the_same_with_tracing_on_and_off(
    index_dir: Path, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Engine.open(index_dir) as engine:
        traced = engine.run_sync(PLAN)
    assert _named(spans.get_finished_spans(), "race.leg")
    spans.clear()
    # As without OpenTelemetry installed: every span is the one that records nothing.
    monkeypatch.setattr(race.tracing, "_available", False)
    monkeypatch.setattr(race.tracing, "_trace", None)
    with Engine.open(index_dir) as engine:
        plain = engine.run_sync(PLAN)
    assert spans.get_finished_spans() == ()
    assert traced.normalized_bytes() == plain.normalized_bytes()
    with race.tracing.span("race.anything", a=1) as off:
        off.set(b=2)
        assert not off.recording


def test_a_healthy_run_logs_one_debug_record_per_leg_and_no_warning(
    index_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="race")
    with Engine.open(index_dir) as engine:
        receipt = engine.run_sync(PLAN)
    legs = [r for r in caplog.records if r.name == "race.run.legs"]
    assert len(legs) == len(receipt.operational.legs)
    assert all(r.levelno == logging.DEBUG for r in legs)
    assert sorted(r.getMessage().split()[1] for r in legs) == sorted(receipt.operational.legs)
    assert any(r.name == "race.planning" and "compiled" in r.getMessage() for r in caplog.records)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    # No query text at INFO or above (it is user data).
    texts = [o["query"]["text"] for o in PLAN["obligations"] if "text" in o["query"]]
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not any(t in m for t in texts for m in loud)


def test_the_package_loggers_print_nothing_by_default() -> None:
    import backends
    import planner

    for package in ("race", "planner", "backends"):
        handlers = logging.getLogger(package).handlers
        assert any(isinstance(h, logging.NullHandler) for h in handlers), package
    assert backends and planner
