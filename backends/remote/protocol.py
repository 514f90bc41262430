"""The wire vocabulary of the RACE remote protocol (``race.remote/1``), shared by the
``race serve`` server and the remote adapter so that both sides spell it the same way: the
names of ``backends.remote.wire`` (paths, headers, bounds, error kinds) and the records of the
bodies.

Documented for people in ``docs/remote-protocol.md``. Every body is one JSON object with
``schema_version``; errors are ``{"schema_version", "error": {"kind", "message"}}``.
"""

from __future__ import annotations

from backends.remote.wire import (
    CONTRACTS_PATH,
    DEADLINE_HEADER,
    ERROR_STATUS,
    GENERATION_HEADER,
    MAX_BODY_BYTES,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    RETAINED_HEADERS,
    SCAN_PATH,
    error_body,
)
from rsc import Record, ScanResult


class ScanResponse(Record):
    """The body of a successful ``POST /v1/scan``."""

    schema_version: str
    generation: str
    backend: str
    contract: str
    request: str
    result: ScanResult


__all__ = [
    "CONTRACTS_PATH",
    "DEADLINE_HEADER",
    "ERROR_STATUS",
    "GENERATION_HEADER",
    "MAX_BODY_BYTES",
    "PROTOCOL_HEADER",
    "PROTOCOL_VERSION",
    "RETAINED_HEADERS",
    "SCAN_PATH",
    "ScanResponse",
    "error_body",
]
