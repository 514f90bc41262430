"""The HTTP clients of one remote adapter instance: one pooled ``httpx.AsyncClient`` for its
scans and generation reads, made on first use and kept (with its open connections) until
``aclose``, plus one ``httpx.Client`` for the blocking reads (handshake, ``generation()``).

An ``AsyncClient``'s connections belong to the event loop they were opened on. An engine's
``*_sync`` calls all run on its one loop, so they share one client; code that drives the
adapter from several loops (one ``asyncio.run`` per call) gets a client per loop: each is
reused by every request made on its loop, and one whose loop has ended is dropped at the
next request (its sockets close as it is collected). ``aclose`` closes the client
of the loop it runs on and drops the others.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Final

import httpx

DEFAULT_MAX_CONNECTIONS: Final = 32
"""Open connections one remote instance keeps to its server (kept alive between requests)."""

_TLS: ssl.SSLContext | None = None
_TLS_LOCK = threading.Lock()


def tls() -> ssl.SSLContext:
    # Building the default context costs ~70 ms; one shared context keeps making clients cheap.
    global _TLS
    with _TLS_LOCK:
        if _TLS is None:
            _TLS = ssl.create_default_context()
        return _TLS


class ClientPool:
    """The clients of one adapter instance (its pinned copies share it)."""

    def __init__(self, *, timeout: float, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self.timeout = timeout
        self.limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._blocking: httpx.Client | None = None
        self._lock = threading.Lock()
        self.opened = 0
        """``AsyncClient``s made so far (one per event loop the instance was used on)."""

    def client(self) -> httpx.AsyncClient:
        """The pooled client of the running event loop, made on first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._drop_ended()
            client = self._clients.get(loop)
            if client is None or client.is_closed:
                client = httpx.AsyncClient(timeout=self.timeout, limits=self.limits, verify=tls(), trust_env=False)
                self._clients[loop] = client
                self.opened += 1
            return client

    def blocking(self) -> httpx.Client:
        """The client for blocking reads (thread-safe), made on first use."""
        with self._lock:
            if self._blocking is None or self._blocking.is_closed:
                self._blocking = httpx.Client(timeout=self.timeout, limits=self.limits, verify=tls(), trust_env=False)
            return self._blocking

    def _drop_ended(self) -> None:
        # A client holds its loop (through its connections), so the pool lets go of it by hand.
        for ended in [loop for loop in self._clients if loop.is_closed()]:
            del self._clients[ended]

    @property
    def open_clients(self) -> int:
        """``AsyncClient``s made, not closed, on a loop that has not ended."""
        with self._lock:
            self._drop_ended()
            return sum(1 for c in self._clients.values() if not c.is_closed)

    async def aclose(self) -> None:
        """Close every client; the next request makes a new one."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            clients = dict(self._clients)
            self._clients.clear()
            blocking, self._blocking = self._blocking, None
        if blocking is not None:
            blocking.close()
        for owner, client in clients.items():
            if owner is loop:
                await client.aclose()
