"""The ``race serve`` ASGI application (starlette): the two protocol routes, a bounded number
of work slots with a bounded queue, the request limits, the injected faults, and a protocol JSON
answer for every failure (unknown path 404, wrong method 405, anything unexpected 500).

``GET /v1/contracts`` and ``POST /v1/scan`` answer byte for byte what the protocol
documents (``docs/remote-protocol.md``); the service behind them is ``race.serving.service.IndexService``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Final

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from backends.remote.protocol import CONTRACTS_PATH, DEADLINE_HEADER, SCAN_PATH
from race.serving.http import TRANSPORT_KEY
from race.serving.limits import Limits, answer_headers, encode, error, error_body

if TYPE_CHECKING:
    from race.serving.service import Faults, IndexService

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_DEADLINE = re.compile(r"[0-9]{1,9}")
"""A deadline is 1 to 9 digits of milliseconds (under 12 days): anything else is a bad request."""


def json_response(status: int, payload: dict[str, Any], *, close: bool = False) -> Response:
    body = encode(payload)
    response = Response(body, status_code=status)
    response.raw_headers = answer_headers(payload, len(body), close=close)
    return response


class _Truncated(Response):
    """The full headers (true Content-Length), half the body, then the connection closes."""

    def __init__(self, status: int, payload: dict[str, Any], transport: asyncio.Transport | None) -> None:
        body = encode(payload)
        super().__init__(body, status_code=status)
        self.raw_headers = answer_headers(payload, len(body), close=True)
        self.transport = transport

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body[: len(self.body) // 2], "more_body": True})
        await _hang_up(self.transport, receive)


class _Dropped(Response):
    """No answer at all: the connection closes without a byte."""

    def __init__(self, transport: asyncio.Transport | None) -> None:
        super().__init__(b"")
        self.transport = transport

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _hang_up(self.transport, receive)


async def _hang_up(transport: asyncio.Transport | None, receive: Receive) -> None:
    if transport is not None:
        transport.close()
    # Until the server has seen the connection go, so it takes the cut for a disconnect.
    with anyio.move_on_after(2.0):
        while (await receive())["type"] != "http.disconnect":
            pass


class ScanEndpoint:
    def __init__(
        self, service: IndexService, faults: Faults, limits: Limits, slots: Slots, stopping: asyncio.Event
    ) -> None:
        self.service = service
        self.faults = faults
        self.limits = limits
        self.slots = slots
        self.stopping = stopping
        self._scans = 0

    def _next_faulted(self) -> bool:
        self._scans += 1
        return not self.faults.first or self._scans <= self.faults.first

    async def handle(self, request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is None or not length.isdigit():
            return json_response(*error("bad_request", "a Content-Length header is required"), close=True)
        if len(length) > 12 or int(length) > self.limits.max_body_bytes:
            too_large = error("too_large", f"request body over {self.limits.max_body_bytes} bytes")
            return json_response(*too_large, close=True)
        deadline = request.headers.get(DEADLINE_HEADER)
        if deadline is not None and not _DEADLINE.fullmatch(deadline):
            shown = deadline if len(deadline) <= 20 else f"{deadline[:20]}… ({len(deadline)} characters)"
            message = f"{DEADLINE_HEADER} must be 1 to 9 digits of milliseconds, not {shown!r}"
            return json_response(*error("bad_request", message), close=True)
        deadline_ms = int(deadline) if deadline is not None else None
        try:
            body = await self._body(request, int(length))
        except ClientDisconnect:
            return _Dropped(None)
        if isinstance(body, Response):
            return body
        refused = await self.slots.enter(None if deadline_ms is None else deadline_ms / 1000.0)
        if refused is not None:
            return json_response(*error("overloaded", refused))
        try:
            return await self._answer(request, body, deadline_ms)
        finally:
            self.slots.release()

    async def _answer(self, request: Request, body: bytes, deadline_ms: int | None) -> Response:
        faults = self.faults if self._next_faulted() else None
        if faults is None:
            return json_response(*await self.service.scan(body, deadline_ms))
        transport = request.scope.get("state", {}).get(TRANSPORT_KEY)
        if faults.delay_ms:
            with anyio.move_on_after(faults.delay_ms / 1000.0):
                await self.stopping.wait()
            if self.stopping.is_set():
                return _Dropped(transport)
        if faults.drop:
            return _Dropped(transport)
        if faults.status is not None:
            status = faults.status
            return json_response(status, error_body("injected_fault", f"injected HTTP {status} (--fault-status)"))
        status, payload = await self.service.scan(body, deadline_ms)
        return _Truncated(status, payload, transport) if faults.truncate else json_response(status, payload)

    async def _body(self, request: Request, length: int) -> bytes | Response:
        chunks: list[bytes] = []
        size = 0
        with anyio.move_on_after(self.limits.body_timeout_s) as scope:
            async for chunk in request.stream():
                size += len(chunk)
                if size > length or size > self.limits.max_body_bytes:
                    return json_response(*error("too_large", "request body longer than its Content-Length"), close=True)
                chunks.append(chunk)
        if scope.cancelled_caught:
            seconds = f"{self.limits.body_timeout_s:g}"
            return json_response(*error("request_timeout", f"no complete body within {seconds} s"), close=True)
        return b"".join(chunks)


class Slots:
    """At most ``max_concurrency`` requests at work (reading the contracts, scanning), at most
    ``max_queue`` waiting for a slot in arrival order, none waiting longer than
    ``queue_timeout_s`` or its own deadline. A request still sending its head or body holds
    no slot (those are bounded by their own timeouts)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._slots = asyncio.Semaphore(limits.max_concurrency)
        self._waiting = 0

    async def enter(self, deadline_s: float | None) -> str | None:
        """``None`` with a slot taken (``release`` it), or why none was given."""
        if not self._slots.locked():
            await self._slots.acquire()
            return None
        if self._waiting >= self.limits.max_queue:
            return f"{self.limits.max_concurrency} requests in progress and {self._waiting} waiting; retry shortly"
        wait_s = self.limits.queue_timeout_s if deadline_s is None else min(self.limits.queue_timeout_s, deadline_s)
        self._waiting += 1
        try:
            with anyio.move_on_after(wait_s):
                await self._slots.acquire()
                return None
        finally:
            self._waiting -= 1
        return f"no request slot free within {wait_s:g} s; retry shortly"

    def release(self) -> None:
        self._slots.release()


class Admission:
    """The application's outer edge: the header count and size bounds, and a protocol JSON
    answer for an exception the application let out (nothing reaches the server unhandled)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            headers = scope["headers"]
            if len(headers) > self.limits.max_headers:
                await _send(send, *error("headers_too_large", f"over {self.limits.max_headers} request headers"))
                return
            # h11 bounds a head that arrives in pieces; one that arrives whole is measured here.
            head = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) + 16
            head += sum(len(name) + len(value) + 4 for name, value in headers)
            if head > self.limits.max_header_bytes:
                too_large = f"request head over {self.limits.max_header_bytes} bytes"
                await _send(send, *error("headers_too_large", too_large))
                return
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if not started:
                await _send(send, *error("internal", f"the server failed: {type(exc).__name__}"))


async def _send(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = encode(payload)
    headers = answer_headers(payload, len(body), close=True)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def build_app(service: IndexService, faults: Faults, limits: Limits, stopping: asyncio.Event) -> Admission:
    slots = Slots(limits)

    async def contracts(request: Request) -> Response:
        refused = await slots.enter(None)
        if refused is not None:
            return json_response(*error("overloaded", refused))
        try:
            return json_response(200, service.contracts_document())
        finally:
            slots.release()

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            allowed = "GET" if request.url.path == CONTRACTS_PATH else "POST"
            message = f"{request.method} is not allowed on {request.url.path}; use {allowed}"
            response = json_response(*error("method_not_allowed", message))
            response.headers["allow"] = exc.headers.get("allow", allowed) if exc.headers else allowed
            return response
        if exc.status_code == 404:
            target = request.scope.get("raw_path", b"").decode("latin-1")
            query = request.scope.get("query_string", b"").decode("latin-1")
            target += f"?{query}" if query else ""
            hint = f"POST {SCAN_PATH}" if request.method == "POST" else f"try {CONTRACTS_PATH}"
            return json_response(*error("not_found", f"no resource {target}; {hint}"))
        return json_response(exc.status_code, error_body("bad_request", str(exc.detail)))

    async def internal(request: Request, exc: Exception) -> Response:
        return json_response(*error("internal", f"the server failed: {type(exc).__name__}"))

    routes = [
        Route(CONTRACTS_PATH, contracts, methods=["GET"]),
        Route(SCAN_PATH, ScanEndpoint(service, faults, limits, slots, stopping).handle, methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: internal})
    app.router.redirect_slashes = False
    return Admission(app, limits)


__all__: Final = ["Admission", "Slots", "build_app", "json_response"]
