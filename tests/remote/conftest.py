"""Fixtures for the remote backend: real ``race serve`` subprocesses on ephemeral loopback
ports, over the session's index of fixtures/corpus/docs, stopped (SIGTERM) at teardown."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from backends.remote import RemoteAdapter
from race.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
RACE = [sys.executable, "-m", "race.cli.main"]
# Generous: on a loaded machine a server spends many seconds importing, and as long exiting.
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0

# Fault servers shared by the fault tests: name -> extra `race serve` flags.
FAULTS: dict[str, tuple[str, ...]] = {
    "hang": ("--fault-delay-ms", "5000"),
    "slow": ("--fault-delay-ms", "120"),
    "status": ("--fault-status", "503"),
    "drop": ("--fault-drop",),
    "truncate": ("--fault-truncate",),
    "first": ("--fault-status", "500", "--fault-first", "1"),
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Server:
    """One running ``race serve`` process."""

    url: str
    process: subprocess.Popen[str]

    def stop(self, *, signalled: bool = False) -> int:
        """SIGTERM (unless already sent) and wait; the exit status (0 for a clean shutdown)."""
        if not signalled and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        finally:
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()


def launch(index_dir: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*RACE, "serve", "--index", str(index_dir), "--port", "0", *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_ready(process: subprocess.Popen[str]) -> Server:
    """The base URL the server prints on its first stdout line once the port is bound."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=START_TIMEOUT_S):
            process.kill()
            raise RuntimeError("race serve did not print its URL in time")
    line = process.stdout.readline().strip()
    if not line.startswith("http://127.0.0.1:"):
        process.kill()
        err = process.stderr.read() if process.stderr else ""
        raise RuntimeError(f"race serve did not start: {line!r} {err}")
    return Server(line, process)


def stop_all(servers: Sequence[Server]) -> None:
    """SIGTERM to every server first, then wait: their shutdowns overlap."""
    for one in servers:
        if one.process.poll() is None:
            one.process.send_signal(signal.SIGTERM)
    assert [one.stop(signalled=True) for one in servers] == [0] * len(servers)


def start_all(index_dir: Path, flag_sets: Sequence[Sequence[str]]) -> list[Server]:
    # Started together: each process spends most of its second importing, in parallel.
    processes = [launch(index_dir, *flags) for flags in flag_sets]
    return [wait_ready(p) for p in processes]


@pytest.fixture(scope="session")
def server(index_dir: Path) -> Iterator[Server]:
    """A fault-free server for the whole session."""
    (running,) = start_all(index_dir, [()])
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="session")
def fault_servers(index_dir: Path) -> Iterator[dict[str, Server]]:
    names = sorted(FAULTS)
    running = dict(zip(names, start_all(index_dir, [FAULTS[n] for n in names]), strict=True))
    yield running
    stop_all(list(running.values()))


def remote_engine(url: str, *, timeout: float = 5.0, **kwargs: Any) -> Engine:
    """An engine whose only backend is the remote server."""
    return Engine({"remote": RemoteAdapter.connect(url, timeout=timeout)}, **kwargs)


def run_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RACE, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def remote_plan(
    *,
    rsc: str = "remote.bm25",
    text: str = "replication raft partition stall",
    deadline_ms: int | None = None,
    k: int = 5,
    obligation: str = "leg",
    plan_deadline_ms: int | None = None,
) -> dict[str, Any]:
    """One remote_ok obligation that only ``rsc`` may serve."""
    ob: dict[str, Any] = {
        "id": obligation,
        "kind": "seek_support",
        "query": {"text": text},
        "query_class": "identifier" if rsc.endswith(".exact") else "lexical",
        "k": k,
        "egress": "remote_ok",
        "allow_contracts": [rsc],
    }
    if deadline_ms is not None:
        ob["deadline_ms"] = deadline_ms
    plan: dict[str, Any] = {"schema_version": "race.plan/1", "root": obligation, "obligations": [ob]}
    if plan_deadline_ms is not None:
        plan["budget"] = {"deadline_ms": plan_deadline_ms}
    return plan
