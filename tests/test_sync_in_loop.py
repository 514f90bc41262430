"""The sync wrappers work where an event loop is already running (a notebook cell)."""

from __future__ import annotations

import pytest

from race.engine import Engine
from tests.conftest import FIXTURES

PLAN = FIXTURES / "plans" / "cascade_lexical.json"


def test_sync_wrappers_without_a_loop(engine: Engine) -> None:
    assert engine.plan_sync(PLAN).fingerprints.plan == engine.run_sync(PLAN).fingerprints.plan


@pytest.mark.anyio
async def test_sync_wrappers_inside_a_running_loop(engine: Engine) -> None:
    explain = engine.plan_sync(PLAN)
    receipt = engine.run_sync(PLAN)
    assert receipt.fingerprints.plan == explain.fingerprints.plan
    assert receipt.fingerprints == (await engine.run(PLAN)).fingerprints
