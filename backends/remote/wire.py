"""The wire vocabulary of the RACE remote protocol (``race.remote/1``) that needs no record:
paths, headers, the body bound and the error kinds. Standard library only, so that the server's
bounds (``race.serving.limits``) and ``race serve --help`` load neither pydantic nor a client;
``backends.remote.protocol`` re-exports every name beside the records of the bodies."""

from __future__ import annotations

from typing import Any, Final

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


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"schema_version": PROTOCOL_VERSION, "error": {"kind": kind, "message": message}}
