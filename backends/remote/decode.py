"""Exchange decoding for the remote adapter: the raw ``Exchange`` and ``decode_exchange``.

``decode_exchange`` turns the bytes of one ``POST /v1/scan`` exchange into a ``ScanResult``, or
into the ``BackendError`` that says why those bytes are not evidence. It is pure: live scans
(``RemoteAdapter.decode``) and replay of retained exchanges both come through here, so a
replayed answer is parsed exactly as the live one was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import ValidationError

from backends.remote.protocol import PROTOCOL_VERSION, ScanResponse
from rsc import (
    BackendTimeout,
    BackendUnavailable,
    ScanRequest,
    ScanResult,
    SnapshotMoved,
    fingerprint,
    first_validation_error,
)

BACKEND = "remote"
"""The backend name relabelled hits and gaps carry (``RemoteAdapter.backend``)."""

UPSTREAM: dict[str, tuple[str, str]] = {
    "remote.bm25": ("tantivy.bm25", "^1.0.0"),
    "remote.exact": ("tantivy.exact", "^1.0.0"),
}
"""Each remote contract -> the server contract it forwards to, and the versions it accepts."""


@dataclass(frozen=True)
class Exchange:
    """One HTTP exchange as received: what is retained and what replay decodes."""

    url: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name.lower()), None)


def upstream_request(request: ScanRequest, contract: str, backend: str) -> ScanRequest:
    """The remote request as the server's contract ``rsc_id@version`` of ``backend``: same query, filters, k."""
    rsc_id, _, version = contract.partition("@")
    expected = UPSTREAM.get(request.rsc_id)
    if expected is None or expected[0] != rsc_id:
        raise BackendUnavailable(f"{contract!r} is not the upstream of {request.rsc_id}", where=request.rsc_id)
    return request.model_copy(update={"rsc_id": rsc_id, "rsc_version": version, "backend": backend})


def decode_exchange(request: ScanRequest, exchange: Exchange, *, expected_generation: str | None) -> ScanResult:
    """Bytes -> ScanResult, or the ``BackendError`` that says why these bytes are not evidence.

    Pure: live scans and replay both come through here.
    """
    where = request.rsc_id
    if exchange.status != 200:
        kind, message = _error_of(exchange.body)
        text = f"{exchange.url} answered HTTP {exchange.status}" + (f" ({kind}: {message})" if kind else "")
        if exchange.status == 504 or kind == "timeout":
            raise BackendTimeout(text, where=where)
        raise BackendUnavailable(text, where=where)
    declared = exchange.header("content-length")
    if declared is not None and declared.isdigit() and int(declared) != len(exchange.body):
        raise BackendUnavailable(
            f"{exchange.url}: truncated response ({len(exchange.body)} of {declared} bytes); a partial response "
            "is never evidence",
            where=where,
        )
    try:
        raw = json.loads(exchange.body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BackendUnavailable(f"{exchange.url}: malformed response body ({exc})", where=where) from exc
    if not isinstance(raw, dict) or raw.get("schema_version") != PROTOCOL_VERSION:
        got = raw.get("schema_version") if isinstance(raw, dict) else type(raw).__name__
        raise BackendUnavailable(f"{exchange.url}: not a {PROTOCOL_VERSION} response (got {got!r})", where=where)
    try:
        body = ScanResponse.model_validate(raw)
    except ValidationError as exc:
        raise BackendUnavailable(f"{exchange.url}: response {first_validation_error(exc)}", where=where) from exc
    if expected_generation is not None and body.generation != expected_generation:
        raise SnapshotMoved(
            f"server generation moved from {expected_generation} (planned) to {body.generation}; "
            "the answer is from another snapshot",
            where=where,
            planned=expected_generation,
            current=body.generation,
        )
    sent = upstream_request(request, body.contract, body.backend)
    if body.request != fingerprint(sent):
        raise BackendUnavailable(f"{exchange.url}: the response answers another request ({body.request})", where=where)
    return _relabel(request, body)


def _error_of(body: bytes) -> tuple[str, str]:
    try:
        raw = json.loads(body)
        error = raw["error"]
        return str(error["kind"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return "", body[:200].decode("utf-8", "replace")


def _relabel(request: ScanRequest, body: ScanResponse) -> ScanResult:
    ref = f"{request.rsc_id}@{request.rsc_version}"
    request_fp = fingerprint(request)
    hits = tuple(
        hit.model_copy(
            update={
                "custody": hit.custody.model_copy(
                    update={
                        "backend": BACKEND,
                        "rsc": ref,
                        "request": request_fp,
                        "index_identity": f"remote:{body.contract}:{hit.custody.index_identity}",
                        "index_generation": body.generation,
                    }
                )
            }
        )
        for hit in body.result.hits
    )
    gaps = tuple(g.model_copy(update={"backend": BACKEND}) for g in body.result.gaps)
    return body.result.model_copy(update={"hits": hits, "gaps": gaps, "generation": body.generation})
