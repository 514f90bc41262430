"""What ``race serve`` bounds, and the one way it encodes every answer (success or error).

Shared by the ASGI application (``race.serving.app``) and the HTTP protocol below it
(``race.serving.http``), which answers the requests that never reach the application
(malformed request heads, a connection over the limit, a head that never arrives).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Final

from backends.remote.wire import ERROR_STATUS, GENERATION_HEADER, MAX_BODY_BYTES, PROTOCOL_HEADER, PROTOCOL_VERSION
from backends.remote.wire import error_body as error_body
from rsc import InputError

SERVER_NAME: Final = "race-serve/1"
RETRY_AFTER_S: Final = 1
"""The ``Retry-After`` of an ``overloaded`` answer."""


@dataclass(frozen=True)
class Limits:
    """Every bound of one server. A request over a bound gets a protocol JSON error, never a hang."""

    max_concurrency: int = 32
    """Requests handled at once; the others wait for a slot, in arrival order."""
    max_queue: int = 1024
    """Requests waiting for a slot; one more is answered ``503 overloaded`` at once."""
    queue_timeout_s: float = 30.0
    """The longest wait for a slot (shorter when the client's deadline is): then ``503 overloaded``."""
    max_connections: int = 2048
    """Open connections; one more is answered ``503 overloaded`` and closed."""
    backlog: int = 2048
    """The listen backlog: connections the kernel queues before the server accepts them."""
    header_timeout_s: float = 10.0
    """From a connection's first byte (or its last answer) to a complete request head: else ``408``."""
    body_timeout_s: float = 10.0
    """From the request head to the complete body: else ``408``."""
    idle_timeout_s: int = 5
    """A kept-alive connection with no new request for this long is closed."""
    shutdown_timeout_s: int = 10
    """On SIGTERM, in-flight requests get this long to finish."""
    max_body_bytes: int = MAX_BODY_BYTES
    max_header_bytes: int = 16_384
    """The request line and headers together."""
    max_headers: int = 64

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not value > 0:
                flag = "--" + field.name.replace("_", "-")
                raise InputError(f"{value!r} is not a positive bound", where=flag)


DEFAULT_LIMITS: Final = Limits()


def encode(payload: dict[str, Any]) -> bytes:
    """The canonical body bytes: sorted keys, no spaces, UTF-8."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def answer_headers(payload: dict[str, Any], length: int, *, close: bool = False) -> list[tuple[bytes, bytes]]:
    """The headers of every answer: JSON, the exact length, the protocol, and the generation
    where the body has one; ``Retry-After`` on ``overloaded``; ``Connection: close`` when the
    request was not read to its end."""
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(length).encode()),
        (PROTOCOL_HEADER.lower().encode(), PROTOCOL_VERSION.encode()),
    ]
    generation = payload.get("generation")
    if isinstance(generation, str):
        headers.append((GENERATION_HEADER.lower().encode(), generation.encode()))
    error = payload.get("error")
    if isinstance(error, dict) and error.get("kind") == "overloaded":
        headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
    if close:
        headers.append((b"connection", b"close"))
    return headers


def error(kind: str, message: str) -> tuple[int, dict[str, Any]]:
    """An error answer: its HTTP status and body."""
    return ERROR_STATUS[kind], error_body(kind, message)
