"""The HTTP edge of ``race serve``: uvicorn's h11 protocol with the server's own bounds, the
listening socket, and the thread the server's event loop runs on.

uvicorn answers a few requests itself, before any application sees them, in plain text: a
malformed request head, a connection over its limit. This protocol answers those in the
protocol's JSON instead, bounds the time to a complete request head (uvicorn bounds only
the idle time between requests), and hands each request's scope its connection's
transport under ``TRANSPORT_KEY`` (the injected ``drop`` and ``truncate`` faults close it).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from http import HTTPStatus
from typing import Any, ClassVar, Final

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from race.serving.limits import SERVER_NAME, Limits, answer_headers, encode, error
from rsc import InputError

TRANSPORT_KEY: Final = "race.transport"
START_TIMEOUT_S: Final = 30.0
LINGER_S: Final = 2.0


class _Connection(h11.Connection):
    """h11's server connection, keeping the protocol error it raised (uvicorn drops it)."""

    failure: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.failure = exc
            raise


class RaceProtocol(H11Protocol):
    """One connection. ``limits`` is set on the subclass ``protocol_for`` makes."""

    limits: ClassVar[Limits] = Limits()

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.conn = _Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
        self._head_timer: asyncio.TimerHandle | None = None
        self._answered = False
        """An answer outside h11 was sent; what the client still sends is read and dropped."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.app_state = {**self.app_state, TRANSPORT_KEY: transport}
        if len(self.connections) > self.limits.max_connections:
            self._answer_and_close(
                *error("overloaded", f"over {self.limits.max_connections} open connections; retry shortly")
            )
            return
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        if self._answered:
            return
        super().data_received(data)
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_head()

    def send_400_response(self, msg: str) -> None:
        failure = self.conn.failure if isinstance(self.conn, _Connection) else None
        status = failure.error_status_hint if failure is not None else 400
        detail = str(failure) if failure is not None else msg
        if status == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE:
            self._answer_and_close(
                *error("headers_too_large", f"request head over {self.limits.max_header_bytes} bytes ({detail})")
            )
        else:
            self._answer_and_close(*error("bad_request", f"malformed HTTP request: {detail}"))

    # -- the time to a complete request head ---------------------------------------------

    def _watch_head(self) -> None:
        """Armed while the connection has begun (or may begin) a request head and no request is
        being answered; the keep-alive timer covers a connection that sent nothing since its last answer."""
        if self.transport is None or self.transport.is_closing():
            return
        waiting = self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete)
        if waiting and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)
        elif not waiting:
            self._stop_head_timer()

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            seconds = f"{self.limits.header_timeout_s:g}"
            self._answer_and_close(*error("request_timeout", f"no complete request head within {seconds} s"))

    def _answer_and_close(self, status: int, payload: dict[str, Any]) -> None:
        """Answer outside h11's state machine (its state may be the error) and close."""
        self._stop_head_timer()
        self._unset_keepalive_if_required()
        if self.transport.is_closing():
            return
        body = encode(payload)
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}".encode(), b"server: " + SERVER_NAME.encode()]
        lines += [name + b": " + value for name, value in answer_headers(payload, len(body), close=True)]
        self.transport.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        # A lingering close: end our side, read and drop the rest of the request until the
        # client closes (or a moment has passed). Closing at once over unread bytes would send
        # a reset, and the client could lose the answer.
        self._answered = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()


def protocol_for(limits: Limits) -> type[RaceProtocol]:
    return type("BoundedRaceProtocol", (RaceProtocol,), {"limits": limits})


def raise_open_files(limits: Limits) -> None:
    """Lift the soft limit of open files towards the hard one, so that ``max_connections``
    connections (each a file) plus the index's own files fit; never lowers it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = limits.max_connections + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        if ceiling > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


def listen(host: str, port: int, backlog: int) -> socket.socket:
    """The listening socket. ``SO_REUSEADDR``: a restart binds the port at once, past the old
    server's connections in TIME_WAIT; a port another live server listens on is still refused."""
    # IPPROTO_TCP named, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on the
    # accepted sockets of a socket that says it is TCP. With it on, the second write of a
    # response (h11 writes the head and the body apart) waits for the client's delayed ACK,
    # about 40 ms on every kept-alive request.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", where="--port") from exc
    sock.setblocking(False)
    return sock


class ServerThread:
    """A uvicorn server for ``app`` on ``sock``, its event loop on a thread of its own (signals
    stay with the caller's main thread)."""

    def __init__(self, app: Any, sock: socket.socket, limits: Limits) -> None:
        self.sock = sock
        config = uvicorn.Config(
            app,
            http=protocol_for(limits),
            ws="none",
            loop="asyncio",
            lifespan="off",
            interface="asgi3",
            log_config=None,
            log_level="error",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            headers=[("server", SERVER_NAME)],
            backlog=limits.backlog,
            timeout_keep_alive=limits.idle_timeout_s,
            timeout_graceful_shutdown=limits.shutdown_timeout_s,
            h11_max_incomplete_event_size=limits.max_header_bytes,
        )
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="race-serve", daemon=True)
        self._failure: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._failure = exc

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.serve(sockets=[self.sock])

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"race serve did not start: {self._failure!r}")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join()
        self.sock.close()
