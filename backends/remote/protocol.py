"""The wire vocabulary of the RACE remote protocol (``race.remote/1``), shared by the
``race serve`` server and the remote adapter so that both sides spell it the same way.

Documented for people in ``docs/remote-protocol.md``. Every body is one JSON object with
``schema_version``; errors are ``{"schema_version", "error": {"kind", "message"}}``.
"""

from __future__ import annotations

from typing import Any, Final

from rsc import Record, ScanResult

PROTOCOL_VERSION: Final = "race.remote/1"
CONTRACTS_PATH: Final = "/v1/contracts"
SCAN_PATH: Final = "/v1/scan"

DEADLINE_HEADER: Final = "X-Race-Deadline-Ms"
"""Optional request header: the client's remaining leg deadline; the server answers 504 past it."""
GENERATION_HEADER: Final = "X-Race-Generation"
PROTOCOL_HEADER: Final = "X-Race-Protocol"

RETAINED_HEADERS: Final = ("content-length", "content-type", "x-race-generation", "x-race-protocol")
"""The response headers that matter for replay; the rest (date, server) are transport noise."""

MAX_BODY_BYTES: Final = 1_048_576

# Error kinds, with the HTTP status each is sent with.
ERROR_STATUS: Final = {
    "bad_request": 400,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "unknown_contract": 422,
    "too_large": 413,
    "headers_too_large": 431,
    "backend_error": 502,
    "timeout": 504,
    "injected_fault": 503,
    "overloaded": 503,
    "internal": 500,
}
"""``overloaded`` answers carry ``Retry-After``; the client may ask again after that many seconds."""


class ScanResponse(Record):
    """The body of a successful ``POST /v1/scan``."""

    schema_version: str
    generation: str
    backend: str
    contract: str
    request: str
    result: ScanResult


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"schema_version": PROTOCOL_VERSION, "error": {"kind": kind, "message": message}}
