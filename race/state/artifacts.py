"""The retained-artifact format: directory names, content digests, bodies kept exactly, and the
paths artifacts and receipts are written to (atomically). ``race.state.retain`` writes it and
``race.state.replay`` reads it; ``docs/remote-protocol.md`` describes the layout."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.remote.decode import Exchange
from race.receipt import Receipt
from rsc import fingerprint

ARTIFACT_SCHEMA_VERSION = "race.artifact/1"
ARTIFACTS = "artifacts"
PLANS = "plans"
RECEIPTS = "receipts"


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def encode_body(data: bytes) -> dict[str, str]:
    """Body bytes as a JSON string, exactly: UTF-8 text as is, anything else as base64."""
    try:
        return {"body": data.decode("utf-8"), "body_encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(data).decode("ascii"), "body_encoding": "base64"}


def decode_body(response: Mapping[str, Any]) -> bytes:
    if response["body_encoding"] == "base64":
        return base64.b64decode(str(response["body"]), validate=True)
    return str(response["body"]).encode("utf-8")


def exchange_response(exchange: Exchange) -> dict[str, Any]:
    return {
        "url": exchange.url,
        "status": exchange.status,
        "headers": dict(exchange.headers),
        **encode_body(exchange.body),
    }


def response_exchange(response: Mapping[str, Any]) -> Exchange:
    """The inverse of ``exchange_response``: what replay hands to the live decoder."""
    headers = response["headers"]
    return Exchange(
        url=str(response["url"]),
        status=int(response["status"]),
        headers=tuple(sorted((str(k), str(v)) for k, v in headers.items())),
        body=decode_body(response),
    )


def lookup_key(method: str, args: Mapping[str, Any]) -> str:
    return fingerprint({"method": method, "args": dict(args)})


def hex_of(fp: str) -> str:
    """A fingerprint's hex digits, without its algorithm prefix."""
    return fp.split(":", 1)[-1]


def artifact_path(root: Path, digest: str) -> Path:
    return root / ARTIFACTS / (hex_of(digest) + ".json")


def receipt_path(root: Path, receipt: Receipt) -> Path:
    return root / RECEIPTS / (hex_of(receipt.lineage.id) + ".json")


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
