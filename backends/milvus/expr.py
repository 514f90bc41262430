"""Plan filters as one Milvus boolean expression, with ``Filter.matches`` semantics.

Every operand is written as a literal of its field's type: strings double-quoted with
``\\``, ``"`` and line breaks escaped, so a value can never close its literal and change the
expression; numbers and booleans printed by Python. An operand no stored value can equal
(``Filter.matches`` never equates a string with a number or a boolean) is dropped; a filter
left with no operand matches nothing, which ``filter_expr`` reports as ``NOTHING`` rather
than asking Milvus. A missing (null) field fails every comparison in Milvus as it does in
``Filter.matches``; a multi-valued keyword matches when it holds any of the values
(``array_contains_any``), ``ne``/``not_in`` when it holds none of them. ``prefix`` is a
``like`` pattern with ``\\``, ``%`` and ``_`` escaped (``like_prefix``); ``exists`` is
``is not null``; an ``any_of`` group an ``or`` of its members.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

from backends.ingest.schema import FieldSpec, FieldType, datetime_micros
from rsc import BackendUnavailable, Filter, FilterOp

NOTHING: Final = "<matches nothing>"
"""``filter_expr``'s answer for filters no row can pass."""

IDENTITY_FIELDS: Final = ("chunk_id", "doc_id")
_ESCAPES: Final = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def string_literal(value: str) -> str:
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in value) + '"'


def _literal(kind: FieldType, value: object, *, bound: str | None = None) -> str | None:
    """``value`` as a literal comparable with a ``kind`` field, or ``None`` if no stored value can
    equal it. ``bound`` (``">="`` or ``"<="``) lets a fractional bound on an integer field round
    inwards instead of matching nothing."""
    if kind in (FieldType.KEYWORD, FieldType.KEYWORDS, FieldType.DATE):
        return string_literal(value) if isinstance(value, str) else None
    if kind is FieldType.BOOLEAN:
        return ("true" if value else "false") if isinstance(value, bool) else None
    if kind is FieldType.DATETIME:
        return str(datetime_micros(value)) if isinstance(value, str) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if kind is FieldType.INTEGER:
        if isinstance(value, int):
            return str(value)
        if not math.isfinite(value):
            return None
        if value.is_integer():
            return str(int(value))
        if bound == ">=":
            return str(math.ceil(value))
        if bound == "<=":
            return str(math.floor(value))
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return repr(float(value))


def filter_expr(filters: Sequence[Filter], fields: Mapping[str, FieldSpec]) -> str | None:
    """One expression for all ``filters`` (AND); ``None`` when there are none, ``NOTHING`` when
    no row can pass them. ``fields`` are the collection's filterable metadata fields."""
    parts: list[str] = []
    for flt in filters:
        found = _conjuncts(flt, fields)
        if found is None:
            return NOTHING
        parts += found
    if not parts:
        return None
    return " and ".join(f"({p})" for p in parts)


def like_prefix(value: str) -> str:
    """A ``like`` pattern matching the strings that start with ``value``: ``\\``, ``%`` and ``_``
    (a wildcard in Milvus's ``like``) escaped with a backslash, then ``%``."""
    return "".join("\\" + ch if ch in "\\%_" else ch for ch in value) + "%"


def _conjuncts(flt: Filter, fields: Mapping[str, FieldSpec]) -> list[str] | None:
    """The conjuncts of one filter, or ``None`` when no row can pass it."""
    if flt.op is FilterOp.ANY_OF:
        members = [m for m in (_conjuncts(member, fields) for member in flt.any_of) if m is not None]
        if not members:
            return None
        return [" or ".join("(" + " and ".join(f"({p})" for p in m) + ")" for m in members)]
    spec = fields.get(flt.field)
    if spec is None and flt.field not in IDENTITY_FIELDS:
        raise BackendUnavailable(f"milvus cannot filter on field {flt.field!r}", where="milvus")
    kind = spec.type if spec is not None else FieldType.KEYWORD
    name = flt.field  # schema field names are [a-z][a-z0-9_]*: safe as identifiers
    if flt.op is FilterOp.EXISTS:
        return [f"{name} is not null"]
    if flt.op is FilterOp.PREFIX:
        if kind is not FieldType.KEYWORD or not isinstance(flt.value, str):
            raise BackendUnavailable(
                f"prefix filter on {kind.value} field {flt.field!r} is not supported", where="milvus"
            )
        return [f"{name} like {string_literal(like_prefix(flt.value))}"]
    if flt.op in (FilterOp.EQ, FilterOp.IN, FilterOp.NE, FilterOp.NOT_IN):
        single = flt.op in (FilterOp.EQ, FilterOp.NE)
        operands = [flt.value] if single else list(flt.values)
        literals = sorted({lit for lit in (_literal(kind, v) for v in operands) if lit is not None})
        if flt.op in (FilterOp.NE, FilterOp.NOT_IN):
            # Milvus's `not in` passes a null field; a missing field passes no filter here.
            present = f"{name} is not null"
            if not literals:
                return [present]
            if kind is FieldType.KEYWORDS:
                return [present, f"not array_contains_any({name}, [{', '.join(literals)}])"]
            if len(literals) == 1:
                return [present, f"{name} != {literals[0]}"]
            return [present, f"{name} not in [{', '.join(literals)}]"]
        if not literals:
            return None
        if kind is FieldType.KEYWORDS:
            return [f"array_contains_any({name}, [{', '.join(literals)}])"]
        if len(literals) == 1:
            return [f"{name} == {literals[0]}"]
        return [f"{name} in [{', '.join(literals)}]"]
    if kind not in (FieldType.DATE, FieldType.DATETIME, FieldType.INTEGER, FieldType.FLOAT):
        raise BackendUnavailable(f"range filter on {kind.value} field {flt.field!r} is not supported", where="milvus")
    parts = []
    for op, bound in ((">=", flt.gte), ("<=", flt.lte)):
        if bound is None:
            continue
        literal = _literal(kind, bound, bound=op)
        if literal is None:
            return None
        parts.append(f"{name} {op} {literal}")
    return parts
