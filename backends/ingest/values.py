"""Field types and their values (``race.schema/1``): parsing and normalizing each type's values.

Values are validated and normalized here, once, at ingest: a date is a real calendar date
written ``YYYY-MM-DD``; a datetime is an instant written in UTC as ``YYYY-MM-DDTHH:MM:SSZ``
(``.ffffff`` before the ``Z`` when it has microseconds); integers and floats are numbers,
booleans booleans. A plan filter's operands are checked against the same types. The schema
model that names the fields and their types is ``backends.ingest.schema``'s.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import math
import re
from enum import StrEnum
from typing import Any

from rsc import CorpusError
from rsc.records import MetadataValue


class FieldType(StrEnum):
    KEYWORD = "keyword"
    KEYWORDS = "keyword[]"
    DATE = "date"
    DATETIME = "datetime"
    INTEGER = "integer"
    FLOAT = "float"
    BOOLEAN = "boolean"


ORDERED_TYPES = frozenset({FieldType.DATE, FieldType.DATETIME, FieldType.INTEGER, FieldType.FLOAT})
"""Types whose values have an order, so range filters mean something."""


def _stored(value: Any, key: str, where: str) -> MetadataValue:
    """An undeclared value kept as it is if it is a scalar or a list of strings; a nested one (an
    object, a list of anything else) kept as its canonical JSON text."""
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if nested(value):
        try:
            return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            pass
    raise CorpusError(f"field {key!r}: {type(value).__name__} values cannot be stored", where=where)


def nested(value: Any) -> bool:
    """Whether ``value`` is an object or a list holding anything but strings: no field's type."""
    return isinstance(value, dict) or (isinstance(value, list) and not all(isinstance(v, str) for v in value))


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_INT = re.compile(r"^[+-]?\d+$")


def normalize(kind: FieldType, value: Any, *, field: str, where: str) -> MetadataValue:
    """``value`` as the normalized value of a field of type ``kind``; a defect is a CorpusError."""
    try:
        return _normalize(kind, value)
    except ValueError as exc:
        raise CorpusError(f"field {field!r}: {exc}", where=where) from None


def _normalize(kind: FieldType, value: Any) -> MetadataValue:
    if kind is FieldType.KEYWORD:
        if isinstance(value, str):
            return value
        raise ValueError(f"{value!r} is not a keyword (a string)")
    if kind is FieldType.KEYWORDS:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) and v for v in items):
            raise ValueError(f"{value!r} is not a list of keywords (strings)")
        return tuple(sorted(set(items)))
    if kind is FieldType.DATE:
        return parse_date(value)
    if kind is FieldType.DATETIME:
        return parse_datetime(value)
    if kind is FieldType.INTEGER:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and _INT.match(value.strip()):
            return int(value.strip())
        raise ValueError(f"{value!r} is not an integer")
    if kind is FieldType.FLOAT:
        number: float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if number is None or not math.isfinite(number):
            raise ValueError(f"{value!r} is not a finite number")
        return number
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{value!r} is not a boolean (true or false)")


def parse_date(value: Any) -> str:
    """A real calendar date as ``YYYY-MM-DD``; ``2024-02-30`` is refused."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    if not isinstance(value, str) or not _DATE.match(value.strip()):
        raise ValueError(f"date {value!r} is not YYYY-MM-DD")
    try:
        return dt.date.fromisoformat(value.strip()).isoformat()
    except ValueError:
        raise ValueError(f"date {value!r} is not a calendar date") from None


def parse_datetime(value: Any) -> str:
    """An instant (ISO 8601 with an offset, or RFC 2822) as UTC ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``."""
    parsed: dt.datetime | None = None
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, str):
        text = value.strip()
        try:
            parsed = dt.datetime.fromisoformat(text)
        except ValueError:
            try:
                parsed = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                parsed = None
    if parsed is None:
        raise ValueError(f"datetime {value!r} is neither ISO 8601 nor RFC 2822")
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError(f"datetime {value!r} has no time zone offset (add Z or +HH:MM)")
    utc = parsed.astimezone(dt.UTC)
    spec = "microseconds" if utc.microsecond else "seconds"
    return utc.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def datetime_micros(text: str) -> int:
    """A normalized datetime as microseconds since the epoch: what the backends compare."""
    instant = dt.datetime.fromisoformat(text.removesuffix("Z")).replace(tzinfo=dt.UTC)
    return (instant - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def _operand_problem(kind: FieldType, operand: Any) -> str | None:
    if kind is FieldType.KEYWORD:
        return None if isinstance(operand, str) else f"{operand!r} is not a string"
    if kind is FieldType.BOOLEAN:
        return None if isinstance(operand, bool) else f"{operand!r} is not true or false"
    if kind is FieldType.INTEGER:
        ok = isinstance(operand, int) and not isinstance(operand, bool)
        return None if ok else f"{operand!r} is not an integer"
    if kind is FieldType.FLOAT:
        ok = isinstance(operand, int | float) and not isinstance(operand, bool)
        return None if ok else f"{operand!r} is not a number"
    try:
        normalized = parse_date(operand) if kind is FieldType.DATE else parse_datetime(operand)
    except ValueError as exc:
        return str(exc)
    if normalized != operand:
        return f"{operand!r} is not written as stored; write {normalized!r}"
    return None
