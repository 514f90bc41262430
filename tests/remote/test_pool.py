"""The remote adapter's clients: one pooled ``httpx.AsyncClient`` per instance, reused by every
scan (one TCP connection for many sequential scans, counted from /proc/net/tcp), closed by
``aclose``; the timeout, pool size and egress class are per instance."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from backends.remote import RemoteAdapter
from rsc import BackendTimeout, ContractEgress, InputError, ScanRequest
from tests.remote.conftest import Server

pytestmark = pytest.mark.anyio

SCANS = 20
ESTABLISHED = "01"


def _port(server: Server) -> int:
    port = urlsplit(server.url).port
    assert port is not None
    return port


def client_sockets(port: int) -> dict[int, tuple[str, int]]:
    """This machine's TCP sockets whose far end is 127.0.0.1:``port``: local port -> (state, inode)."""
    found = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
        if remote == f"0100007F:{port:04X}":
            found[int(local.split(":")[1], 16)] = (state, inode)
    return found


def own_inodes() -> set[int]:
    """Socket inodes of this process's open file descriptors."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def own_open_connections(port: int) -> set[int]:
    mine = own_inodes()
    return {p for p, (state, inode) in client_sockets(port).items() if state == ESTABLISHED and inode in mine}


def remote_request(text: str = "replication raft", k: int = 3) -> ScanRequest:
    return ScanRequest(
        obligation="pool",
        rsc_id="remote.bm25",
        rsc_version="1.0.0",
        backend="remote",
        mode="bm25",
        query={"text": text},
        k=k,
    )


async def test_scans_reuse_one_client_and_one_connection(server: Server) -> None:
    port = _port(server)
    remote = RemoteAdapter.connect(server.url)
    before = set(client_sockets(port))
    first = await remote.scan(remote_request())
    answers = [await remote.scan(remote_request()) for _ in range(SCANS - 1)]
    assert all(a.hits == first.hits for a in answers) and first.hits
    made = set(client_sockets(port)) - before
    assert len(made) == 1, f"{SCANS} scans opened {len(made)} connections"
    assert remote.pool.opened == 1 and remote.pool.open_clients == 1
    assert made <= own_open_connections(port)
    # A pinned copy (what a run uses) shares the instance's client.
    held = remote.pinned(await remote.current_generation())
    await held.scan(remote_request())
    assert remote.pool.opened == 1 and set(client_sockets(port)) - before == made

    await remote.aclose()
    assert remote.pool.open_clients == 0
    assert not (made & own_open_connections(port)), "aclose left the pooled connection open"
    # Closed is not broken: the next scan opens a new client.
    again = await remote.scan(remote_request())
    assert again.hits == first.hits and remote.pool.opened == 2
    await remote.aclose()


async def test_instances_have_their_own_clients_timeouts_and_egress(
    server: Server, fault_servers: dict[str, Server]
) -> None:
    default = RemoteAdapter.connect(server.url)
    local = RemoteAdapter.connect(server.url, egress=ContractEgress.LOCAL, timeout=2.5, max_connections=2)
    assert {c.egress for c in default.index_contracts()} == {ContractEgress.REMOTE}
    assert {c.egress for c in local.index_contracts()} == {ContractEgress.LOCAL}
    assert [c.rsc_id for c in local.index_contracts()] == [c.rsc_id for c in default.index_contracts()]
    assert (default.pool.timeout, local.pool.timeout) == (5.0, 2.5)
    await default.scan(remote_request())
    await local.scan(remote_request())
    assert default.pool.client() is not local.pool.client()

    impatient = RemoteAdapter.connect(fault_servers["hang"].url, timeout=0.2)
    with pytest.raises(BackendTimeout, match=r"client timeout of 0\.2 s"):
        await impatient.scan(remote_request())
    for adapter in (default, local, impatient):
        await adapter.aclose()
        assert adapter.pool.open_clients == 0


def test_a_client_per_event_loop_and_none_kept_past_its_loop(server: Server) -> None:
    """``run_sync`` runs each call on a fresh loop: a client each, the ended loops' dropped."""
    import anyio

    remote = RemoteAdapter.connect(server.url)
    hits = [anyio.run(remote.scan, remote_request()).hits for _ in range(3)]
    assert hits[0] and hits == [hits[0]] * 3
    assert remote.pool.opened == 3 and remote.pool.open_clients == 0


@pytest.mark.parametrize(("options", "words"), [({"timeout": 0.0}, "timeout"), ({"max_connections": 0}, "max_conn")])
def test_bad_instance_options_are_refused(server: Server, options: dict[str, float], words: str) -> None:
    with pytest.raises(InputError, match=words):
        RemoteAdapter.connect(server.url, **options)  # type: ignore[arg-type]


async def test_httpcore_reads_the_event_loop_from_an_installed_sniffio() -> None:
    """httpcore asks sniffio which event loop runs each async request (8 times a remote run);
    with sniffio missing, each ask was a failed import, a path search of ~33 us on this machine
    against ~1 us. The package is a declared dependency, so the import succeeds and is kept."""
    import sys

    from httpcore._synchronization import current_async_library

    assert current_async_library() == "asyncio"
    assert "sniffio" in sys.modules
