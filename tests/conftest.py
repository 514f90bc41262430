"""Shared fixtures: one index of the bundled corpus per test session, and adapters that
inject delays or faults around a real backend."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from backends import Adapter
from race.engine import Engine
from race.indexing.bundled import BUNDLED_CORPUS
from race.indexing.indexing import build_index
from rsc import BackendUnavailable, Contract, ScanRequest, ScanResult

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"

# The commands the tests run read the bundled corpus unless they name an index: they ask for it
# by name, as a user does (tests/test_no_implicit_index.py runs them without it).
os.environ.setdefault("RACE_INDEX", "bundled")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("index") / "fixture-index"
    build_index(BUNDLED_CORPUS, out)
    return out


@pytest.fixture(scope="session")
def session_engine(index_dir: Path) -> Engine:
    return Engine.open(index_dir)


@pytest.fixture(scope="session")
def corpus2_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One index of the second fixture corpus (fixtures/corpus2, another schema) per session."""
    out = tmp_path_factory.mktemp("corpus2") / "index"
    build_index(FIXTURES / "corpus2", out)
    return out


@pytest.fixture(scope="session")
def corpus2_engine(corpus2_index: Path) -> Engine:
    return Engine.open(corpus2_index)


@pytest.fixture
def engine(index_dir: Path) -> Engine:
    """A fresh engine (empty caches) over the session index."""
    return Engine.open(index_dir)


def load_plan(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "plans" / name).read_text())
    return data


ROOMY_BUDGET = {"deadline_ms": 300_000, "leg_timeout_ms": 120_000}
"""Deadlines far above any fixture plan's need, for tests whose subject is not timing."""


def roomy_plan(plan: Path | str) -> dict[str, Any]:
    """A fixture plan (a path, or a name under fixtures/plans) with ``ROOMY_BUDGET``: for a test
    that compares what runs return, where on a busy machine a leg's timeout would enter one
    receipt and not the other."""
    path = plan if isinstance(plan, Path) else FIXTURES / "plans" / plan
    data: dict[str, Any] = json.loads(path.read_text())
    data["budget"] = {**data.get("budget", {}), **ROOMY_BUDGET}
    return data


class WrappedAdapter(Adapter):
    """A real adapter with per-obligation delays or failures injected in front of it."""

    backend = "wrapped"

    def __init__(
        self,
        inner: Adapter,
        *,
        delays: Mapping[str, float] | None = None,
        failures: Mapping[str, Exception] | None = None,
    ) -> None:
        self.inner = inner
        self.backend = inner.backend  # type: ignore[misc]
        self.delays = dict(delays or {})
        self.failures = dict(failures or {})
        self.calls: list[str] = []

    def contracts(self) -> tuple[Contract, ...]:  # type: ignore[override]
        return self.inner.contracts()

    @classmethod
    def build(cls, corpus: Any, index_dir: Path, progress: Any = None) -> str:
        raise NotImplementedError

    @classmethod
    def open(cls, index_dir: Path) -> WrappedAdapter:
        raise NotImplementedError

    @property
    def identity(self) -> str:
        return self.inner.identity

    def generation(self) -> str:
        return self.inner.generation()

    def statistics(self) -> Any:
        return self.inner.statistics()

    def models(self) -> tuple[dict[str, str | int], ...]:
        return self.inner.models()

    async def scan(self, request: ScanRequest) -> ScanResult:
        self.calls.append(request.obligation)
        delay = self.delays.get(request.obligation, 0.0)
        if delay:
            await anyio.sleep(delay)
        if request.obligation in self.failures:
            raise self.failures[request.obligation]
        return await self.inner.scan(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def wrapped_engine(base: Engine, **wrap: Any) -> tuple[Engine, dict[str, WrappedAdapter]]:
    wrapped = {name: WrappedAdapter(adapter, **wrap) for name, adapter in base.adapters.items()}
    return Engine(wrapped), wrapped


def remove_live_tree(path: Path) -> None:
    """Remove ``path`` while an open index may still touch it.

    A tantivy reader takes its meta lock by creating ``.tantivy-meta.lock`` beside
    ``meta.json`` whenever it reloads, so a plain ``rmtree`` can find a directory it has just
    emptied holding that file again. The tree is first renamed out of the way (atomic: every
    reader sees it gone at once), then removed, with retries for a lock file that lands late.
    """
    grave = path.with_name(f"{path.name}.removed")
    path.rename(grave)
    for _ in range(50):
        try:
            shutil.rmtree(grave)
            return
        except OSError:
            time.sleep(0.02)
    shutil.rmtree(grave)


def unavailable(message: str = "injected failure") -> Exception:
    return BackendUnavailable(message, where="test")


@pytest.fixture
def tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path
