"""The remote adapter against a live ``race serve``: the shared backend conformance suite
(tests/backends/) runs on it unchanged, and every remote answer equals the local tantivy
adapter's answer to the same request, custody relabelling aside."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

from backends import Adapter
from backends.remote import UPSTREAM, RemoteAdapter
from race.engine import Engine
from rsc import BackendUnavailable, ContractError, Filter, InputError, ScanRequest, ScanResult
from tests.backends import test_conformance as shared
from tests.remote.conftest import Server

# The shared suite's tests, collected here with this module's ``adapter`` fixture.
for _name in dir(shared):
    if _name.startswith("test_"):
        globals()[_name] = getattr(shared, _name)


@pytest.fixture
def adapter(server: Server) -> Adapter:
    return RemoteAdapter.connect(server.url)


def _relabelled_away(result: ScanResult) -> dict[str, Any]:
    relabelled = {"backend", "rsc", "request", "index_identity", "index_generation"}
    out = result.model_dump(mode="json", exclude={"generation"})
    for hit in out["hits"]:
        for name in relabelled:
            hit["custody"].pop(name)
    for gap in out["gaps"]:
        gap.pop("backend")
    return out


def test_remote_answers_equal_local_tantivy(server: Server, index_dir: Path) -> None:
    remote = RemoteAdapter.connect(server.url)
    local = Engine.open(index_dir).adapters["tantivy"]
    compared = 0
    for contract in remote.contracts():
        sample = shared.SAMPLES[contract.rsc_id]
        variants: list[tuple[Filter, ...]] = [()] + [(Filter.model_validate(f),) for f in sample.get("filters", [])]
        for k in (1, sample.get("k", 5), 40):
            for pushed in variants:
                request = ScanRequest(
                    obligation="conformance",
                    rsc_id=contract.rsc_id,
                    rsc_version=contract.version,
                    backend="remote",
                    mode=contract.mode,
                    query=shared.Query.model_validate(sample["query"]),
                    k=k,
                    pushed=pushed,
                )
                upstream_id = UPSTREAM[contract.rsc_id][0]
                same = request.model_copy(update={"rsc_id": upstream_id, "backend": "tantivy"})
                theirs = anyio.run(remote.scan, request)
                ours = anyio.run(local.scan, same)
                assert _relabelled_away(theirs) == _relabelled_away(ours), f"{contract.rsc_id} k={k} {pushed}"
                assert all(h.custody.backend == "remote" and h.custody.rsc == contract.ref for h in theirs.hits)
                assert all(h.custody.index_identity.startswith(f"remote:{upstream_id}@") for h in theirs.hits)
                compared += 1
    assert compared >= 12


def test_generation_is_the_servers_advertised_one(server: Server) -> None:
    remote = RemoteAdapter.connect(server.url)
    generation = remote.generation()
    assert generation.startswith("race-serve:xxh3_128:")
    assert anyio.run(remote.current_generation) == generation


def test_connect_fails_closed_when_the_server_cannot_back_a_contract(server: Server) -> None:
    from backends.remote.adapter import _fetch_info, check_served
    from backends.remote.pool import ClientPool

    served = _fetch_info(ClientPool(timeout=5.0), server.url).contracts
    declared = RemoteAdapter.contracts()
    assert set(check_served(declared, served, where="test")) == {"remote.bm25", "remote.exact"}
    too_new = tuple(c.model_copy(update={"version": "2.0.0"}) if c.rsc_id == "tantivy.bm25" else c for c in served)
    with pytest.raises(ContractError, match=r"does not serve tantivy.bm25 \^1.0.0"):
        check_served(declared, too_new, where="test")
    weaker = tuple(
        c.model_copy(update={"filters": {k: v for k, v in c.filters.items() if k != "date"}})
        if c.rsc_id == "tantivy.exact"
        else c
        for c in served
    )
    with pytest.raises(ContractError, match="filter date"):
        check_served(declared, weaker, where="test")
    only_exact = tuple(c for c in served if c.rsc_id != "tantivy.bm25")
    with pytest.raises(ContractError, match=r"tantivy\.bm25"):
        check_served(declared, only_exact, where="test")


def test_remote_is_connected_not_built_or_opened(tmp_path: Path, index_dir: Path) -> None:
    with pytest.raises(InputError, match=r"RemoteAdapter\.connect"):
        RemoteAdapter.open(tmp_path)
    with pytest.raises(InputError, match="race serve"):
        RemoteAdapter.build(None, tmp_path)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="one server"):
        Engine.open(index_dir, remotes=["http://127.0.0.1:1", "http://127.0.0.1:2"])


def test_an_unreachable_server_fails_to_connect() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(BackendUnavailable, match="cannot reach the server"):
        RemoteAdapter.connect(f"http://127.0.0.1:{port}", timeout=1.0)
    with pytest.raises(InputError, match="base URL"):
        RemoteAdapter.connect("ftp://127.0.0.1:1")
