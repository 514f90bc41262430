"""How an engine reads its backends' generations for each plan and run (race.facts): a local
index's generation (a ``stat`` of files the adapter holds open) inline, with no task of its own;
any other read as its own bounded task, so that one that never answers is ``unknown`` for its
own backend alone. And the hand-off of ``*_sync`` calls to the engine's loop (race.portal)."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

from backends import Adapter
from backends.base import RefusedSnapshot
from backends.named import NamedInstance
from race.engine import Engine
from race.portal import LoopThread
from race.run.legs import UNKNOWN_GENERATION
from tests.conftest import roomy_plan


class NeverAnswers(NamedInstance):
    """A backend whose generation read never returns (a remote that stopped answering)."""

    @property
    def reads_generation_inline(self) -> bool:
        return False

    async def current_generation(self) -> str:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def test_local_generations_are_read_inline(session_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    assert all(a.reads_generation_inline for a in session_engine.adapters.values())
    engine = Engine(dict(session_engine.adapters))

    async def no_task(*args: Any) -> Any:
        raise AssertionError("a local generation read became a task")

    monkeypatch.setattr(engine.call_pool, "settle", no_task)
    found = anyio.run(engine.current_generations)
    assert found == session_engine.generations()
    assert UNKNOWN_GENERATION not in found.values()


def test_local_indexes_are_pinned_inline(session_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from race.state.snapshots import pin_snapshots

    local = {name: a for name, a in session_engine.adapters.items() if name in ("tantivy", "graph")}
    assert local and all(a.pins_inline for a in local.values())
    generations = session_engine.generations()

    async def no_task(*args: Any) -> Any:
        raise AssertionError("a local pin became a task")

    monkeypatch.setattr(session_engine.call_pool, "settle", no_task)

    async def pin(deadline: float) -> dict[str, Adapter]:
        return await pin_snapshots(
            local, generations, read=set(local), deadline=deadline, pool=session_engine.call_pool
        )

    pinned = anyio.run(pin, time.monotonic() + 10.0)
    assert set(pinned) == set(local)
    assert all(p is not local[n] and p.generation() == generations[n] for n, p in pinned.items())
    # With no time left nothing is pinned, as a task given no time would not be.
    late = anyio.run(pin, time.monotonic() - 1.0)
    assert all(isinstance(p, RefusedSnapshot) for p in late.values())


def test_a_read_that_never_answers_is_unknown_for_its_own_backend_only(session_engine: Engine) -> None:
    adapters: dict[str, Adapter] = dict(session_engine.adapters)
    adapters["stuck"] = NeverAnswers(adapters["tantivy"], "stuck")
    engine = Engine(adapters)

    async def read() -> dict[str, str]:
        return await engine.current_generations(bound=0.05)

    found = anyio.run(read)
    assert found["stuck"] == UNKNOWN_GENERATION
    assert {n: g for n, g in found.items() if n != "stuck"} == session_engine.generations()
    assert list(found) == sorted(found)  # in the adapters' order, whichever way each was read


def test_a_sync_run_after_a_failed_one_is_answered_on_the_same_loop(session_engine: Engine) -> None:
    portal = LoopThread("race-test")

    async def fails() -> None:
        raise ValueError("from the loop")

    async def name() -> str:
        return threading.current_thread().name

    try:
        with pytest.raises(ValueError, match="from the loop"):
            portal.call(fails)
        assert portal.call(name) == "race-test"
        engine = Engine(dict(session_engine.adapters))
        plan = roomy_plan("cascade_lexical.json")
        first = engine.run_sync(plan)
        assert engine.run_sync(plan).fingerprints == first.fingerprints
    finally:
        portal.stop()
