"""Plan filters as one Milvus boolean expression, with ``Filter.matches`` semantics.

Every operand is written as a literal of its field's type: strings double-quoted with
``\\``, ``"`` and line breaks escaped, so a value can never close its literal and change the
expression; numbers and booleans printed by Python. An operand no stored value can equal
(``Filter.matches`` never equates a string with a number or a boolean) is dropped; a filter
left with no operand matches nothing, which ``filter_expr`` reports as ``NOTHING`` rather
than asking Milvus. A missing (null) field fails every comparison in Milvus as it does in
``Filter.matches``; a multi-valued keyword matches when it holds any of the values
(``array_contains_any``).
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
        spec = fields.get(flt.field)
        if spec is None and flt.field not in IDENTITY_FIELDS:
            raise BackendUnavailable(f"milvus cannot filter on field {flt.field!r}", where="milvus")
        kind = spec.type if spec is not None else FieldType.KEYWORD
        name = flt.field  # schema field names are [a-z][a-z0-9_]*: safe as identifiers
        if flt.op in (FilterOp.EQ, FilterOp.IN):
            operands = [flt.value] if flt.op is FilterOp.EQ else list(flt.values)
            literals = sorted({lit for lit in (_literal(kind, v) for v in operands) if lit is not None})
            if not literals:
                return NOTHING
            if kind is FieldType.KEYWORDS:
                parts.append(f"array_contains_any({name}, [{', '.join(literals)}])")
            elif len(literals) == 1:
                parts.append(f"{name} == {literals[0]}")
            else:
                parts.append(f"{name} in [{', '.join(literals)}]")
            continue
        if kind not in (FieldType.DATE, FieldType.DATETIME, FieldType.INTEGER, FieldType.FLOAT):
            raise BackendUnavailable(
                f"range filter on {kind.value} field {flt.field!r} is not supported", where="milvus"
            )
        for op, bound in ((">=", flt.gte), ("<=", flt.lte)):
            if bound is None:
                continue
            literal = _literal(kind, bound, bound=op)
            if literal is None:
                return NOTHING
            parts.append(f"{name} {op} {literal}")
    if not parts:
        return None
    return " and ".join(f"({p})" for p in parts)
