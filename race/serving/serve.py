"""``race serve``: one local index's contracts over the remote protocol, on loopback only.

The server runs the engine's own adapters for the index on one event loop, served by
uvicorn (``race.serving.http``) through a starlette application (``race.serving.app``), and
speaks ``race.remote/1`` (see ``docs/remote-protocol.md`` and ``backends.remote.protocol``):

* ``GET /v1/contracts`` -> identity, current generation, the RSCs served, statistics;
* ``POST /v1/scan`` with a ``ScanRequest`` for one served contract -> a ``ScanResponse``.

Every bound (concurrency, queue, connections, backlog, timeouts, sizes) is a ``Limits``
(``race.serving.limits``); over a bound, or on any failure, the answer is a protocol JSON error.

Fault injection exists for tests and is off unless asked for: a delay, a fixed error
status, a truncated body or a dropped connection, on every scan or only the first N.
Faults touch ``POST /v1/scan`` only, so a client can still connect and read generations.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from race.serving.limits import DEFAULT_LIMITS, Limits
from race.serving.service import Faults, IndexService
from rsc import InputError

if TYPE_CHECKING:
    from backends import Adapter


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


@dataclass
class RunningServer:
    """A started server: its bound address, and the way to stop it."""

    server_address: tuple[str, int]
    service: IndexService
    limits: Limits


@contextmanager
def running_server(
    index_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    faults: Faults = Faults(),
    limits: Limits = DEFAULT_LIMITS,
    set_up: bool = False,
) -> Iterator[RunningServer]:
    """A started server for ``index_dir`` (its event loop on a thread); stopped when the block
    ends: the listener closes, injected delays are cut short, in-flight requests finish. With
    ``set_up``, the adapters' set-up is done before the port is bound (``set_up_adapters``)."""
    from race.engine import Engine
    from race.serving.app import build_app
    from race.serving.http import ServerThread, listen

    bind = loopback_host(host)
    adapters = Engine.open(index_dir).adapters
    if set_up:
        set_up_adapters(adapters)
    service = IndexService(adapters)
    sock = listen(bind, port, limits.backlog)
    stopping = asyncio.Event()
    thread = ServerThread(build_app(service, faults, limits, stopping), sock, limits)
    try:
        thread.start()
    except BaseException:
        sock.close()
        raise
    bound_host, bound_port = sock.getsockname()[:2]
    try:
        yield RunningServer((str(bound_host), int(bound_port)), service, limits)
    finally:
        if thread.loop is not None:
            with suppress(RuntimeError):  # the loop has already ended
                thread.loop.call_soon_threadsafe(stopping.set)
        thread.stop()


def set_up_adapters(adapters: Mapping[str, Adapter]) -> None:
    """Every adapter's set-up for every mode (library imports, opens, model weights), all at
    once on threads, then the compiled query path of the models they loaded: what a request
    would otherwise pay inside its client's deadline. A failure is left for the scans to
    report, as an engine's set-up leaves it (``race.facts``)."""
    from backends.models.embedding import compile_forward_passes

    def one(adapter: Adapter) -> None:
        with suppress(Exception):
            adapter.warm(None)

    with ThreadPoolExecutor(max_workers=max(1, len(adapters))) as pool:
        list(pool.map(one, adapters.values()))
    compile_forward_passes()


def serve(
    index_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    faults: Faults = Faults(),
    limits: Limits = DEFAULT_LIMITS,
    announce: Callable[[str], None] = print,
) -> None:
    """A process's main loop: set up every adapter, then serve until SIGTERM or SIGINT;
    ``announce`` gets the base URL once the port is bound, so no request pays the set-up.
    (``running_server`` is the form that leaves signals alone.)

    The stop signals get a handler that does nothing, and the C-level handler writes the
    signal number to a wakeup pipe that the main thread waits on. Whichever thread the
    kernel delivers a signal to (LanceDB, BLAS and tantivy all start threads of their own),
    it wakes the main thread and never kills the process; a handler that set an event could
    deadlock on the event's own lock. Signals that arrive during the shutdown are absorbed,
    so a repeated SIGTERM cannot turn a clean exit into a killed one.
    """
    from race.serving.http import raise_open_files

    raise_open_files(limits)
    stops = (signal.SIGTERM, signal.SIGINT)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    previous = signal.set_wakeup_fd(wake_write)
    for sig in stops:
        signal.signal(sig, _absorb)
    try:
        with running_server(index_dir, host=host, port=port, faults=faults, limits=limits, set_up=True) as server:
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
