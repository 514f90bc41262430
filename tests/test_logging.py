"""The package loggers on a real plan over the bundled index: ``planner`` says at DEBUG which
alternative each obligation got and why the others did not, with the plan fingerprint (nothing
at INFO or above on a normal plan); ``backends`` says at DEBUG what it opened, set up and
loaded and how long each took, and at WARNING a degraded read. No log text reaches a receipt."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import anyio
import pytest

import backends.models.embedding
import backends.models.folder
from backends.base import blocking
from race.engine import Engine
from tests.conftest import roomy_plan

PLAN = roomy_plan("showcase.json")


def _messages(caplog: pytest.LogCaptureFixture, prefix: str, level: int = logging.DEBUG) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(prefix) and r.levelno == level]


def test_the_planner_logs_each_obligations_choice_with_the_plan_fingerprint(
    session_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="planner")
    receipt = Engine(dict(session_engine.adapters)).run_sync(PLAN)  # a fresh plan cache: compiled
    chose = _messages(caplog, "planner.optimizer")
    obligations = sorted(o["id"] for o in PLAN["obligations"])
    assert sorted(m.split()[3] for m in chose) == obligations
    assert all(m.startswith(f"plan {receipt.fingerprints.plan}: obligation ") for m in chose)
    # Why the others were not chosen: their own reasons (egress, query class, cost).
    assert any("rejected" in m and "no other alternative" not in m for m in chose)
    assert [r for r in caplog.records if r.name.startswith("planner") and r.levelno >= logging.INFO] == []


def test_the_backends_log_opens_set_up_and_the_model_load_with_their_times(
    index_dir: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The weights are loaded once per process: this test's engine loads them again.
    monkeypatch.setattr(backends.models.embedding, "_MODELS", {})
    monkeypatch.setattr(backends.models.folder, "_LOADED", {})
    caplog.set_level(logging.DEBUG, logger="backends")
    with Engine.open(index_dir) as engine:
        receipt = engine.run_sync(PLAN)
    found = "\n".join(_messages(caplog, "backends"))
    assert "tantivy " in found and " opened in " in found
    assert "graph " in found and " read in " in found
    assert "lancedb " in found and "manifest read in" in found and "set-up for" in found
    (loaded,) = [m for m in _messages(caplog, "backends.models") if m.startswith("model ")]
    assert " loaded from " in loaded and " ms: 384 dims" in loaded, loaded
    assert any(str(m["name"]) in loaded for m in receipt.models), (loaded, receipt.models)
    assert _messages(caplog, "backends", logging.WARNING) == []  # a healthy plan reads nothing degraded


def test_a_degraded_read_is_a_backend_warning(session_engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="backends")
    receipt = Engine(dict(session_engine.adapters)).run_sync(roomy_plan("node_budget.json"))
    (gap,) = receipt.gaps
    (warned,) = _messages(caplog, "backends", logging.WARNING)
    assert f"{gap.backend} " in warned and "degraded read, resource_limited" in warned and gap.detail in warned


def test_receipts_are_the_same_with_every_logger_at_debug_and_with_logging_off(
    index_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Engine.open(index_dir) as engine:
        quiet = engine.run_sync(PLAN)
    assert caplog.records == []
    for package in ("race", "planner", "backends"):
        caplog.set_level(logging.DEBUG, logger=package)
    with Engine.open(index_dir) as engine:
        loud = engine.run_sync(PLAN)
    assert {r.name.split(".")[0] for r in caplog.records} == {"race", "planner", "backends"}
    assert loud.normalized_bytes() == quiet.normalized_bytes()
    assert loud.fingerprints == quiet.fingerprints


def test_a_call_left_behind_on_its_worker_thread_is_a_backend_warning(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()

    async def stop_waiting() -> None:
        with anyio.move_on_after(0.05):
            await blocking(release.wait, 30.0)

    try:
        anyio.run(stop_waiting)
    finally:
        release.set()
    (warned,) = _messages(caplog, "backends.base", logging.WARNING)
    assert "wait left behind on its worker thread" in warned, warned
