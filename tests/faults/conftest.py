"""Fixtures of the fault suite: one runner over the session indexes' adapters, and the live
``race serve`` of tests/remote for the remote legs (imported: that conftest's fixtures are
not visible from here)."""

from __future__ import annotations

import pytest

from race.engine import Engine
from tests.faults.matrix import Runner
from tests.remote.conftest import Server, server

__all__ = ["Server", "runner", "server"]


@pytest.fixture(scope="session")
def runner(session_engine: Engine, corpus2_engine: Engine) -> Runner:
    """Every case of the matrix runs once per session, on fresh engines over these adapters
    (the bundled corpus's, and the second corpus's for the plans under fixtures/plans/corpus2/)."""
    return Runner(session_engine.adapters, corpora={"corpus2": corpus2_engine.adapters})
