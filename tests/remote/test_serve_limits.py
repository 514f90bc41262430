"""``race serve`` bounds and failures: every one answered with the protocol's JSON error
(never a traceback, an HTML page or a hang), and a restart on the same port at once."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from backends.remote.protocol import PROTOCOL_VERSION
from tests.remote.conftest import Server, launch, run_cli, start_all, stop_all, wait_ready
from tests.remote.test_serve_load import scan_body

HEAD_TIMEOUT_S = 2.0
BOUNDED = (
    "--max-concurrency", "1", "--max-queue", "1", "--fault-delay-ms", "1500",
    "--header-timeout", str(HEAD_TIMEOUT_S), "--body-timeout", str(HEAD_TIMEOUT_S), "--idle-timeout", "1",
    "--max-connections", "6", "--max-headers", "20", "--max-header-bytes", "4096",
)  # fmt: skip


@pytest.fixture(scope="module")
def bounded(index_dir: Path) -> Iterator[Server]:
    """One slot, one queue place, slow scans, short timeouts, few connections."""
    (running,) = start_all(index_dir, [BOUNDED])
    yield running
    stop_all([running])


def _address(server: Server) -> tuple[str, int]:
    parts = urlsplit(server.url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def _raw(server: Server, data: bytes, *, wait_s: float = 15.0) -> bytes:
    """Send ``data`` on a new connection; everything the server sends until it closes."""
    with socket.create_connection(_address(server), timeout=wait_s) as sock:
        if data:
            sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _error_of(raw: bytes) -> tuple[int, str, dict[str, str]]:
    """Status, error kind and headers of a raw answer, checking it is the protocol's JSON."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert headers["content-type"] == "application/json"
    assert headers["x-race-protocol"] == PROTOCOL_VERSION
    assert int(headers["content-length"]) == len(body)
    doc = json.loads(body)
    assert doc["schema_version"] == PROTOCOL_VERSION and doc["error"]["message"]
    return status, doc["error"]["kind"], headers


def _json_error(response: httpx.Response) -> tuple[int, str]:
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-race-protocol"] == PROTOCOL_VERSION
    return response.status_code, response.json()["error"]["kind"]


def test_every_failure_is_a_protocol_json_error(server: Server) -> None:
    url = server.url
    huge = "9" * 5000
    cases = [
        (httpx.post(url + "/v1/contracts"), (405, "method_not_allowed")),
        (httpx.get(url + "/v1/scan"), (405, "method_not_allowed")),
        (httpx.delete(url + "/v1/scan"), (405, "method_not_allowed")),
        (httpx.get(url + "/v1/contracts/"), (404, "not_found")),
        (httpx.get(url + "/index.html"), (404, "not_found")),
        (httpx.post(url + "/v1/scan", content=scan_body("raft", 3), headers={"X-Race-Deadline-Ms": huge}),
         (400, "bad_request")),
        (httpx.post(url + "/v1/scan", content=scan_body("raft", 3), headers={"X-Race-Deadline-Ms": "-5"}),
         (400, "bad_request")),
        (httpx.post(url + "/v1/scan", content=b"x" * 1_048_577), (413, "too_large")),
        (httpx.post(url + "/v1/scan", content=b"[1, 2]"), (400, "bad_request")),
    ]  # fmt: skip
    for response, expected in cases:
        assert _json_error(response) == expected, response.request
    assert httpx.post(url + "/v1/contracts").headers["allow"] == "GET"
    # The same answer whatever happened before: the server is still serving.
    assert httpx.post(url + "/v1/scan", content=scan_body("raft", 3)).status_code == 200


def test_malformed_request_heads_are_json_errors(server: Server) -> None:
    huge = b"9" * 5000
    cases = [
        (b"POST /v1/scan HTTP/1.1\r\nHost: x\r\nContent-Length: " + huge + b"\r\n\r\n{}", (400, "bad_request")),
        (b"POST /v1/scan HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", (400, "bad_request")),
        (b"NOT HTTP AT ALL\r\n\r\n", (400, "bad_request")),
        (b"GET /v1/contracts HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n", (431, "headers_too_large")),
        (b"POST /v1/scan HTTP/1.1\r\nHost: x\r\n\r\n", (400, "bad_request")),  # no Content-Length
    ]
    for data, expected in cases:
        status, kind, headers = _error_of(_raw(server, data))
        assert (status, kind) == expected, data[:60]
        assert headers["connection"] == "close"


def test_a_head_or_body_that_never_completes_is_a_408(bounded: Server) -> None:
    for data in (b"", b"GET /v1/contracts HTTP/1.1\r\nHost: x\r\n"):
        assert _error_of(_raw(bounded, data))[:2] == (408, "request_timeout")
    partial = b'POST /v1/scan HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"obligation"'
    assert _error_of(_raw(bounded, partial))[:2] == (408, "request_timeout")


def test_header_count_and_size_bounds(bounded: Server) -> None:
    many = b"".join(b"X-H%d: 1\r\n" % i for i in range(30))
    assert _error_of(_raw(bounded, b"GET /v1/contracts HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n"))[:2] == (
        431,
        "headers_too_large",
    )
    big = b"X-Big: " + b"a" * 5000 + b"\r\n"
    assert _error_of(_raw(bounded, b"GET /v1/contracts HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n"))[:2] == (
        431,
        "headers_too_large",
    )


def test_an_idle_kept_alive_connection_is_closed(bounded: Server) -> None:
    with socket.create_connection(_address(bounded), timeout=15.0) as sock:
        sock.sendall(b"GET /v1/contracts HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):  # the answer, then the close after the idle timeout
            received += chunk
    assert received.startswith(b"HTTP/1.1 200 ")


@pytest.mark.anyio
async def test_over_the_queue_bound_is_503_with_retry_after(bounded: Server) -> None:
    """One slot, one queue place, each scan held 1.5 s: of 5 sent at once, the slot and the
    queue are answered, the rest are refused at once (never left hanging)."""
    answers: list[httpx.Response] = []
    limits = httpx.Limits(max_connections=5)
    async with httpx.AsyncClient(timeout=30.0, limits=limits, trust_env=False) as client:

        async def one() -> None:
            answers.append(await client.post(bounded.url + "/v1/scan", content=scan_body("raft", 3)))

        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(one)
    ok = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    assert len(ok) >= 2 and refused, [a.status_code for a in answers]
    for answer in refused:
        assert _json_error(answer) == (503, "overloaded")
        assert answer.headers["retry-after"] == "1"


def test_a_slow_upload_holds_no_slot(bounded: Server) -> None:
    """Two uploads still sending their bodies would fill the one slot and the one queue place
    if they held them; they do not, so a contracts read beside them is answered."""
    head = b"POST /v1/scan HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"
    slow = [socket.create_connection(_address(bounded), timeout=15.0) for _ in range(2)]
    try:
        for sock in slow:
            sock.sendall(head)
        time.sleep(0.2)  # ordering only: the server has read both heads before the read below
        assert httpx.get(bounded.url + "/v1/contracts").status_code == 200
        for sock in slow:  # and each upload still ends as a 408 of its own
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
            assert _error_of(received)[:2] == (408, "request_timeout")
    finally:
        for sock in slow:
            sock.close()


def test_over_the_connection_bound_is_503(bounded: Server) -> None:
    held = [socket.create_connection(_address(bounded), timeout=15.0) for _ in range(6)]
    try:
        status, kind, headers = _error_of(_raw(bounded, b""))
        assert (status, kind) == (503, "overloaded") and headers["retry-after"] == "1"
    finally:
        for sock in held:
            sock.close()


def test_restart_on_the_same_port_at_once(index_dir: Path) -> None:
    first = wait_ready(launch(index_dir))
    host, port = urlsplit(first.url).hostname, urlsplit(first.url).port
    # Connections the server closed itself: their server side waits in TIME_WAIT.
    for _ in range(3):
        assert httpx.get(first.url + "/v1/contracts", headers={"Connection": "close"}).status_code == 200
    # The port is held while the first server runs.
    held = run_cli("serve", "--index", str(index_dir), "--port", str(port), timeout=120)
    assert held.returncode == 2 and held.stderr.count("\n") == 1 and "--port" in held.stderr
    assert first.stop() == 0
    second = wait_ready(launch(index_dir, "--port", str(port)))  # at once, on the same port
    try:
        assert second.url == f"http://{host}:{port}"
        assert httpx.get(second.url + "/v1/contracts").status_code == 200
    finally:
        assert second.stop() == 0


def test_port_out_of_range_is_one_line_exit_2(index_dir: Path) -> None:
    done = run_cli("serve", "--index", str(index_dir), "--port", "99999", timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "--port" in done.stderr


@pytest.mark.anyio
async def test_accepted_connections_have_nagle_off() -> None:
    """Every connection the server accepts has TCP_NODELAY set: h11 writes a response's head and
    body apart, and with Nagle's algorithm on, the second write of every kept-alive request
    waited for the client's delayed ACK (measured 44 ms a request on this machine, 1.6 ms
    without)."""
    import asyncio

    from race.serving.http import listen

    sock = listen("127.0.0.1", 0, 8)
    accepted: list[socket.socket] = []

    class Accept(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.append(transport.get_extra_info("socket"))

    server = await asyncio.get_running_loop().create_server(Accept, sock=sock)
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        with anyio.fail_after(5):
            while not accepted:
                await anyio.sleep(0.01)
        assert accepted[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
