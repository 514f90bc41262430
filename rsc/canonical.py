"""Canonical JSON and fingerprints.

Canonical JSON: keys sorted, no whitespace, UTF-8, floats rounded to 12 significant digits
(so that the last-bit noise of a floating-point sum never changes a byte) and then written
in orjson's shortest round-trip form, ``-0.0`` and integral floats written as integers,
NaN and infinities refused. Fingerprints are xxh3_128 over those bytes, spelled
``xxh3_128:<32 hex>``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import orjson
import xxhash
from pydantic import BaseModel, PlainSerializer
from pydantic_core import PydanticSerializationError

from rsc.errors import CanonicalError, RaceError

_FLOAT_DIGITS = 12

# Input documents (plans, RSCs, receipts) are flat: a few levels deep, integers that fit a
# budget. Deeper nesting or longer integers are refused as bad input before Python's own
# limits (recursion depth, 4300-digit int conversion) turn them into internal errors.
MAX_JSON_DEPTH = 64
MAX_INT_DIGITS = 30
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


def read_json(data: bytes | str, *, where: str, error: type[RaceError]) -> Any:
    """One JSON document from untrusted input; any defect is one ``error`` naming ``where``:
    bytes that are not UTF-8, malformed JSON, nesting deeper than ``MAX_JSON_DEPTH``, an
    integer longer than ``MAX_INT_DIGITS`` digits, or NaN/Infinity (not JSON)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}", where=where) from None
    depth = deepest = 0
    for bracket in _NOT_BRACKET.sub(b"", _JSON_STRING.sub(b"", raw)):
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            raise error(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", where=where)

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise _Refused(f"an integer of {len(digits.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
        return int(digits)

    def constant(name: str) -> Any:
        raise _Refused(f"{name} is not a JSON number")

    try:
        return json.loads(text, parse_int=integer, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise error(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", where=where) from None
    except _Refused as exc:
        raise error(str(exc), where=where) from None
    except RecursionError:
        raise error(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", where=where) from None


class _Refused(Exception):
    """A value ``read_json`` refuses, raised from inside the decoder's hooks."""


def _float(value: float, where: str) -> float | int:
    if not math.isfinite(value):
        raise CanonicalError(f"{where}: non-finite number {value!r} cannot be canonical")
    rounded = float(f"{value:.{_FLOAT_DIGITS}g}")
    if rounded == 0.0:
        return 0
    if rounded.is_integer() and abs(rounded) < 2**53:
        return int(rounded)
    return rounded


def _normalize(value: Any, where: str) -> Any:
    # Dispatch on the exact type first: receipts hold tens of thousands of plain values and
    # this walk is on the hot path of every fingerprint.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return _float(value, where)
    if kind is dict:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise CanonicalError(f"{where}: non-string key {key!r}")
            t = type(item)
            out[key] = item if (t is str or t is int or t is bool or item is None) else _normalize(item, where)
        return out
    if kind is list or kind is tuple:
        return [item if (type(item) is str or type(item) is int) else _normalize(item, where) for item in value]
    if isinstance(value, BaseModel):
        return _model_data(value)
    if isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return _float(value, where)
    if isinstance(value, Mapping):
        return _normalize(dict(value), where)
    if isinstance(value, set | frozenset):
        raise CanonicalError(f"{where}: sets have no canonical order; sort them first")
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return _normalize(list(value), where)
    raise CanonicalError(f"{where}: {type(value).__name__} is not JSON data")


def canonical_float(value: float) -> float | int:
    """A float as canonical JSON writes it: 12 significant digits, integral values as ints."""
    return _float(value, "$")


CanonicalFloat = Annotated[float, PlainSerializer(canonical_float, when_used="json")]
"""The float type of every boundary record: serialized already canonical, so a record's
JSON needs no second pass over its numbers."""


def _model_data(model: BaseModel, exclude: set[str] | None = None) -> Any:
    # pydantic serializes in Rust in JSON mode, every float through canonical_float, straight
    # to JSON-ready Python data (half the cost of writing JSON text and parsing it again).
    try:
        return model.model_dump(mode="json", exclude=exclude)
    except PydanticSerializationError as exc:
        raise CanonicalError(f"$: {exc}") from exc


def canonical_data(model: BaseModel, *, exclude: set[str] | None = None) -> Any:
    """A model as canonical JSON data (floats normalized), ready for ``dumps_canonical``."""
    return _model_data(model, exclude)


def dumps_canonical(data: Any) -> bytes:
    """Canonical bytes of data that is already canonical (from ``canonical_data``)."""
    return _dumps(data)


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of a JSON-like value or pydantic model."""
    normalized = _model_data(value) if isinstance(value, BaseModel) else _normalize(value, "$")
    return _dumps(normalized)


def _dumps(data: Any) -> bytes:
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        if "Recursion limit" not in str(exc):
            raise
    # orjson stops at 255 levels, and a legal plan 200 operators deep nests further. The
    # standard encoder writes the same bytes except for floats in exponent form (``1e-07``
    # for orjson's ``1e-7``); a document always takes the same path, so its bytes are stable.
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def canonical_pretty(value: Any) -> str:
    """Canonical content, indented for people; still deterministic."""
    normalized = _model_data(value) if isinstance(value, BaseModel) else _normalize(value, "$")
    return json.dumps(normalized, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)


def fingerprint(value: Any) -> str:
    """``xxh3_128:<hex>`` of the canonical JSON of ``value``."""
    return "xxh3_128:" + xxhash.xxh3_128_hexdigest(canonical_json(value))


def fingerprint_bytes(data: bytes) -> str:
    return "xxh3_128:" + xxhash.xxh3_128_hexdigest(data)
