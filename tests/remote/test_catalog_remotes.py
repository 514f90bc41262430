"""Many remotes through a catalog: two ``race serve`` servers as two race-remote instances of one
engine, each its own adapter with its own deadline. A leg of the server that answers in time
is what that server answers directly; the leg of the server that does not is a timeout gap
naming its instance, and the other leg stands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from backends.remote import RemoteAdapter
from race.engine import Engine
from rsc import GapKind, Query, ScanRequest
from tests.remote.conftest import Server, start_all, stop_all


@pytest.fixture(scope="module")
def two_servers(index_dir: Path) -> Iterator[tuple[Server, Server]]:
    """A server that answers, and one that waits 5 s before every scan."""
    east, west = start_all(index_dir, [(), ("--fault-delay-ms", "5000")])
    yield east, west
    stop_all([east, west])


def _obligation(node: str, contract: str) -> dict[str, object]:
    return {
        "id": node,
        "kind": "seek_support",
        "query": {"text": "replication raft partition stall"},
        "query_class": "lexical",
        "k": 4,
        "mandatory": False,
        "egress": "remote_ok",
        "allow_contracts": [contract],
    }


def test_two_remote_instances_each_with_its_own_deadline(two_servers: tuple[Server, Server], tmp_path: Path) -> None:
    east, west = two_servers
    catalog = tmp_path / "remotes.toml"
    catalog.write_text(
        'schema_version = "race.catalog/1"\n'
        f'[instances.east]\nkind = "race-remote"\nlocation = "{east.url}"\ntimeout_s = 10.0\n'
        f'[instances.west]\nkind = "race-remote"\nlocation = "{west.url}"\ntimeout_s = 0.5\n'
    )
    engine = Engine.from_catalog(catalog)
    try:
        ids = sorted(c.rsc_id for c in engine.contracts())
        assert ids == ["east.remote.bm25", "east.remote.exact", "west.remote.bm25", "west.remote.exact"]
        assert {c.backend for c in engine.contracts()} == {"east", "west"}
        plan = {
            "schema_version": "race.plan/1",
            "root": "u",
            "obligations": [_obligation("e", "east.remote.bm25"), _obligation("w", "west.remote.bm25")],
            "operators": [{"id": "u", "op": "union", "inputs": ["e", "w"]}],
        }
        receipt = engine.run_sync(plan)
        hits = [h for item in receipt.evidence for h in item.hits]
        assert hits and {h.custody.backend for h in hits} == {"east"}
        timeouts = [g for g in receipt.gaps if g.kind is GapKind.TIMEOUT]
        assert [(g.obligation, g.backend) for g in timeouts] == [("w", "west")]
        # The east leg is what the east server answers to the same request, asked directly.
        direct = RemoteAdapter.connect(east.url, timeout=10.0)
        contract = next(c for c in direct.index_contracts() if c.rsc_id == "remote.bm25")
        request = ScanRequest(
            obligation="e",
            rsc_id=contract.rsc_id,
            rsc_version=contract.version,
            backend=contract.backend,
            mode=contract.mode,
            query=Query(text="replication raft partition stall"),
            k=4,
        )
        answer = anyio.run(direct.scan, request)
        anyio.run(direct.aclose)
        ranked = sorted(hits, key=lambda h: h.custody.rank)
        assert [(h.chunk_id, h.custody.score) for h in ranked] == [(h.chunk_id, h.custody.score) for h in answer.hits]
        assert all(h.custody.rsc == f"east.remote.bm25@{contract.version}" for h in ranked)
    finally:
        anyio.run(engine.aclose)
