"""Canonical JSON and fingerprints.

Canonical JSON: keys sorted, no whitespace, UTF-8, floats written with 12 significant
digits (so that the last-bit noise of a floating-point sum never changes a byte), ``-0.0``
written as ``0``, NaN and infinities refused. Fingerprints are xxh3_128 over those bytes,
spelled ``xxh3_128:<32 hex>``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import xxhash
from pydantic import BaseModel

from rsc.errors import CanonicalError

_FLOAT_DIGITS = 12


def _normalize(value: Any, where: str) -> Any:
    if isinstance(value, BaseModel):
        return _normalize(value.model_dump(mode="json"), where)
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalError(f"{where}: non-finite number {value!r} cannot be canonical")
        rounded = float(f"{value:.{_FLOAT_DIGITS}g}")
        if rounded == 0.0:
            return 0
        if rounded.is_integer() and abs(rounded) < 2**53:
            return int(rounded)
        return rounded
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError(f"{where}: non-string key {key!r}")
            out[key] = _normalize(item, f"{where}.{key}")
        return out
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [_normalize(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, set | frozenset):
        raise CanonicalError(f"{where}: sets have no canonical order; sort them first")
    raise CanonicalError(f"{where}: {type(value).__name__} is not JSON data")


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of a JSON-like value or pydantic model."""
    normalized = _normalize(value, "$")
    return json.dumps(normalized, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


def canonical_pretty(value: Any) -> str:
    """Canonical content, indented for people; still deterministic."""
    normalized = _normalize(value, "$")
    return json.dumps(normalized, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)


def fingerprint(value: Any) -> str:
    """``xxh3_128:<hex>`` of the canonical JSON of ``value``."""
    return "xxh3_128:" + xxhash.xxh3_128_hexdigest(canonical_json(value))


def fingerprint_bytes(data: bytes) -> str:
    return "xxh3_128:" + xxhash.xxh3_128_hexdigest(data)
