"""Plan filters as tantivy queries over the index layout of ``backends.tantivy.fields``.

``eq`` and ``in`` are term queries; ``range`` a range query on the numeric field; ``exists`` an
exists query on the fast field; ``ne`` and ``not_in`` "exists, and none of these terms" (a
multi-valued keyword passes when none of its values is excluded, a row without the field never,
as ``Filter.matches`` has it); ``prefix`` a regex query over the raw keyword terms, every
character of the value written as a ``\\x{..}`` escape except ASCII letters and digits, so the
value is matched literally and never read as a pattern; an ``any_of`` group a boolean query
whose members are ``Should`` clauses.
"""

from __future__ import annotations

from collections.abc import Mapping

import tantivy

from backends.ingest.schema import FieldSpec, FieldType
from backends.tantivy.fields import _RAW_TYPES, _term
from rsc import BackendUnavailable, Filter, FilterOp


def filter_query(schema: tantivy.Schema, fields: Mapping[str, FieldSpec], filters: tuple[Filter, ...]) -> tantivy.Query:
    """The conjunction of ``filters`` (every field filterable in the corpus schema ``fields``)."""
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, one_filter(schema, fields, f)) for f in filters])


def one_filter(schema: tantivy.Schema, fields: Mapping[str, FieldSpec], flt: Filter) -> tantivy.Query:
    if flt.op is FilterOp.ANY_OF:
        return tantivy.Query.boolean_query([(tantivy.Occur.Should, one_filter(schema, fields, m)) for m in flt.any_of])
    spec = fields.get(flt.field)
    kind = spec.type if spec is not None else FieldType.KEYWORD
    if flt.op is FilterOp.EXISTS:
        return tantivy.Query.exists_query(flt.field)
    if flt.op in (FilterOp.NE, FilterOp.NOT_IN):
        operands = [flt.value] if flt.op is FilterOp.NE else list(flt.values)
        terms = [t for t in (_comparable_term(kind, v) for v in operands) if t is not None]
        clauses = [(tantivy.Occur.Must, tantivy.Query.exists_query(flt.field))]
        clauses += [(tantivy.Occur.MustNot, tantivy.Query.term_query(schema, flt.field, t)) for t in terms]
        return tantivy.Query.boolean_query(clauses)
    if flt.op is FilterOp.PREFIX:
        if kind not in (FieldType.KEYWORD, FieldType.KEYWORDS) or not isinstance(flt.value, str):
            raise BackendUnavailable(
                f"prefix filter on {kind.value} field {flt.field!r} is not supported", where="tantivy"
            )
        return tantivy.Query.regex_query(schema, flt.field, literal_pattern(flt.value) + "(?s:.*)")
    if kind in _RAW_TYPES:
        if flt.op is FilterOp.EQ:
            return tantivy.Query.term_query(schema, flt.field, _term(kind, flt.value))
        if flt.op is FilterOp.IN:
            return tantivy.Query.term_set_query(schema, flt.field, [_term(kind, v) for v in flt.values])
        raise BackendUnavailable(f"range filter on keyword field {flt.field!r} is not supported", where="tantivy")
    return _number_filter(schema, flt, kind)


def literal_pattern(text: str) -> str:
    """A regex matching exactly ``text``: only ASCII letters and digits stand for themselves."""
    return "".join(ch if ch.isascii() and ch.isalnum() else f"\\x{{{ord(ch):X}}}" for ch in text)


def _comparable_term(kind: FieldType, value: object) -> str | int | float | None:
    """The term a stored value equal to ``value`` would have, or ``None`` if none can equal it."""
    if kind in (FieldType.KEYWORD, FieldType.KEYWORDS, FieldType.DATE, FieldType.DATETIME):
        return _term(kind, value) if isinstance(value, str) else None
    if kind is FieldType.BOOLEAN:
        return _term(kind, value) if isinstance(value, bool) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if kind is FieldType.INTEGER:
        return int(value) if float(value).is_integer() else None
    return float(value)


def _number_filter(schema: tantivy.Schema, flt: Filter, kind: FieldType) -> tantivy.Query:
    """Dates, datetimes and integers as i64 terms and ranges, floats as f64."""
    if flt.op is FilterOp.RANGE:
        low = _term(kind, flt.gte) if flt.gte is not None else None
        high = _term(kind, flt.lte) if flt.lte is not None else None
        field_type = tantivy.FieldType.Float if kind is FieldType.FLOAT else tantivy.FieldType.Integer
        return tantivy.Query.range_query(schema, flt.field, field_type, low, high)
    values = [flt.value] if flt.op is FilterOp.EQ else list(flt.values)
    return tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, tantivy.Query.term_query(schema, flt.field, _term(kind, v))) for v in values]
    )
