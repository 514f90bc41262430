"""``race serve``: one local index's contracts over the remote protocol, on loopback only.

The server runs the engine's own adapters for the index (through one anyio blocking
portal shared by the request threads) and speaks ``race.remote/1`` (see
``docs/remote-protocol.md`` and ``backends.remote.protocol``):

* ``GET /v1/contracts`` -> identity, current generation, the RSCs served, statistics;
* ``POST /v1/scan`` with a ``ScanRequest`` for one served contract -> a ``ScanResponse``.

Fault injection exists for tests and is off unless asked for: a delay, a fixed error
status, a truncated body or a dropped connection, on every scan or only the first N.
Faults touch ``POST /v1/scan`` only, so a client can still connect and read generations.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal
from pydantic import ValidationError

from backends import Adapter
from backends.remote.protocol import (
    CONTRACTS_PATH,
    DEADLINE_HEADER,
    ERROR_STATUS,
    GENERATION_HEADER,
    MAX_BODY_BYTES,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    SCAN_PATH,
    error_body,
)
from rsc import BackendError, BackendTimeout, InputError, RaceError, ScanRequest, fingerprint, first_validation_error


@dataclass(frozen=True)
class Faults:
    """Injected faults for tests. All off by default; ``first`` = 0 means every scan request."""

    delay_ms: int = 0
    status: int | None = None
    truncate: bool = False
    drop: bool = False
    first: int = 0

    def describe(self) -> str:
        parts = [f"delay {self.delay_ms} ms"] if self.delay_ms else []
        parts += [f"status {self.status}"] if self.status is not None else []
        parts += ["truncate"] if self.truncate else []
        parts += ["drop"] if self.drop else []
        if parts and self.first:
            parts.append(f"first {self.first} scan requests only")
        return ", ".join(parts) or "none"


def loopback_host(host: str) -> str:
    """The host to bind, or an ``InputError``: the server never listens beyond IPv4 loopback."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise InputError(f"{host!r} is not an IP address; race serve binds 127.0.0.1 only", where="--host") from exc
    if address.version != 4 or not address.is_loopback:
        raise InputError(f"refusing to serve on {host}: race serve binds IPv4 loopback only", where="--host")
    return host


class IndexService:
    """The engine side of the server: the index's adapters, called through one portal."""

    def __init__(self, adapters: Mapping[str, Adapter], portal: BlockingPortal) -> None:
        if not adapters:
            raise InputError("the index has no backends to serve")
        self.adapters = dict(sorted(adapters.items()))
        self.portal = portal
        self._served = {c.ref: name for name, a in self.adapters.items() for c in a.index_contracts()}
        self._lock = threading.Lock()

    @property
    def identity(self) -> str:
        return "race-serve:" + "+".join(a.identity for a in self.adapters.values())

    def generation(self) -> str:
        with self._lock:
            generations = {name: a.generation() for name, a in self.adapters.items()}
        return "race-serve:" + fingerprint(generations)

    def contracts_document(self) -> dict[str, Any]:
        contracts = sorted((c for a in self.adapters.values() for c in a.index_contracts()), key=lambda c: c.ref)
        return {
            "schema_version": PROTOCOL_VERSION,
            "identity": self.identity,
            "generation": self.generation(),
            "contracts": [c.model_dump(mode="json") for c in contracts],
            "statistics": [a.statistics().model_dump(mode="json") for a in self.adapters.values()],
        }

    def scan(self, body: bytes, deadline_ms: int | None) -> tuple[int, dict[str, Any]]:
        try:
            request = ScanRequest.model_validate_json(body)
        except ValidationError as exc:
            return _error("bad_request", f"not a ScanRequest: {first_validation_error(exc)}")
        ref = f"{request.rsc_id}@{request.rsc_version}"
        backend = self._served.get(ref)
        if backend is None or backend != request.backend:
            return _error("unknown_contract", f"this server serves no contract {ref} on backend {request.backend!r}")
        adapter = self.adapters[backend]
        try:
            result = self.portal.call(_scan, adapter, request, deadline_ms)
        except TimeoutError:
            return _error("timeout", f"{ref}: no answer within the client's deadline of {deadline_ms} ms")
        except BackendTimeout as exc:
            return _error("timeout", str(exc))
        except BackendError as exc:
            return _error("backend_error", str(exc))
        except RaceError as exc:
            return _error("backend_error", str(exc))
        return 200, {
            "schema_version": PROTOCOL_VERSION,
            "generation": self.generation(),
            "backend": backend,
            "contract": ref,
            "request": fingerprint(request),
            "result": result.model_dump(mode="json"),
        }


async def _scan(adapter: Adapter, request: ScanRequest, deadline_ms: int | None) -> Any:
    if deadline_ms is None:
        return await adapter.scan(request)
    with anyio.fail_after(deadline_ms / 1000.0):
        return await adapter.scan(request)


def _error(kind: str, message: str) -> tuple[int, dict[str, Any]]:
    return ERROR_STATUS[kind], error_body(kind, message)


class RaceHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # Bind exactly the loopback address asked for; never reuse a port another server holds.
    allow_reuse_address = False

    def __init__(self, address: tuple[str, int], service: IndexService, faults: Faults) -> None:
        super().__init__(address, _Handler)
        self.service = service
        self.faults = faults
        self.stopping = threading.Event()
        self._count_lock = threading.Lock()
        self._scans = 0

    def next_scan_faulted(self) -> bool:
        with self._count_lock:
            self._scans += 1
            return not self.faults.first or self._scans <= self.faults.first

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (deadline passed) closes its socket: not a server error.
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: RaceHTTPServer
    protocol_version = "HTTP/1.0"
    server_version = "race-serve/1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        if self.path != CONTRACTS_PATH:
            self._send(*_error("not_found", f"no resource {self.path}; try {CONTRACTS_PATH}"))
            return
        self._send(200, self.server.service.contracts_document())

    def do_POST(self) -> None:
        if self.path != SCAN_PATH:
            self._send(*_error("not_found", f"no resource {self.path}; POST {SCAN_PATH}"))
            return
        length = self.headers.get("content-length", "")
        if not length.isdigit():
            self._send(*_error("bad_request", "a Content-Length header is required"))
            return
        if int(length) > MAX_BODY_BYTES:
            self._send(*_error("too_large", f"request body over {MAX_BODY_BYTES} bytes"))
            return
        body = self.rfile.read(int(length))
        deadline = self.headers.get(DEADLINE_HEADER, "")
        deadline_ms = int(deadline) if deadline.isdigit() else None
        faults = self.server.faults if self.server.next_scan_faulted() else Faults()
        if faults.delay_ms and self.server.stopping.wait(faults.delay_ms / 1000.0):
            return
        if faults.drop:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if faults.status is not None:
            self._send(faults.status, error_body("injected_fault", f"injected HTTP {faults.status} (--fault-status)"))
            return
        status, payload = self.server.service.scan(body, deadline_ms)
        self._send(status, payload, truncate=faults.truncate)

    def _send(self, status: int, payload: dict[str, Any], *, truncate: bool = False) -> None:
        data = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header(PROTOCOL_HEADER, PROTOCOL_VERSION)
        generation = payload.get("generation")
        if isinstance(generation, str):
            self.send_header(GENERATION_HEADER, generation)
        self.end_headers()
        # A truncated body keeps the full Content-Length, so the client sees the cut.
        self.wfile.write(data[: len(data) // 2] if truncate else data)
        if truncate:
            self.close_connection = True


@contextmanager
def running_server(
    index_dir: Path, *, host: str = "127.0.0.1", port: int = 0, faults: Faults = Faults()
) -> Iterator[RaceHTTPServer]:
    """A started server for ``index_dir`` (serving on a thread); stopped when the block ends."""
    from race.engine import Engine

    bind = loopback_host(host)
    adapters = Engine.open(index_dir).adapters
    with start_blocking_portal() as portal:
        service = IndexService(adapters, portal)
        server = RaceHTTPServer((bind, port), service, faults)
        thread = threading.Thread(target=server.serve_forever, args=(0.1,), name="race-serve", daemon=True)
        thread.start()
        try:
            yield server
        finally:
            server.stopping.set()
            server.shutdown()
            server.server_close()
            thread.join()


def serve(
    index_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    faults: Faults = Faults(),
    announce: Callable[[str], None] = print,
) -> None:
    """A process's main loop: serve until SIGTERM or SIGINT; ``announce`` gets the base URL
    once the port is bound. (``running_server`` is the form that leaves signals alone.)

    The stop signals get a handler that does nothing, and the C-level handler writes the
    signal number to a wakeup pipe that the main thread waits on. Whichever thread the
    kernel delivers a signal to (LanceDB, BLAS and tantivy all start threads of their own),
    it wakes the main thread and never kills the process; a handler that set an event could
    deadlock on the event's own lock. Signals that arrive during the shutdown are absorbed,
    so a repeated SIGTERM cannot turn a clean exit into a killed one.
    """
    stops = (signal.SIGTERM, signal.SIGINT)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    previous = signal.set_wakeup_fd(wake_write)
    for sig in stops:
        signal.signal(sig, _absorb)
    try:
        with running_server(index_dir, host=host, port=port, faults=faults) as server:
            bound_host, bound_port = server.server_address[:2]
            announce(f"http://{bound_host!s}:{bound_port}")
            while os.read(wake_read, 1)[0] not in stops:
                pass
    finally:
        # Ignored, not absorbed, from here on: CPython resets Python handlers to the default
        # (terminate) while it finalizes, but leaves an ignored signal ignored.
        for sig in stops:
            signal.signal(sig, signal.SIG_IGN)
        signal.set_wakeup_fd(previous)
        os.close(wake_read)
        os.close(wake_write)


def _absorb(signum: int, frame: object) -> None:
    """The stop signals' Python handler: the wakeup pipe already told the main thread."""
