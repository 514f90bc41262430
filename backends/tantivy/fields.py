"""The tantivy index layout: its schema, its analyzer and how metadata values become terms.

Text fields are analysed by ``race_en``; identity and keyword fields (and booleans, as
``true``/``false``) are raw fast terms; dates (``YYYYMMDD``), datetimes (microseconds since the
epoch) and integers are i64, floats f64. Documents at build and filter operands at scan are
turned into terms by the same ``_term``, so a filter matches exactly what was indexed.
"""

from __future__ import annotations

import re

import tantivy

from backends.ingest.schema import CorpusSchema, FieldType, datetime_micros

ANALYZER = "race_en"
TEXT_FIELDS = ("title", "section", "text")
KEYWORD_FIELDS = ("doc_id", "chunk_id")
_RAW_TYPES = frozenset({FieldType.KEYWORD, FieldType.KEYWORDS, FieldType.BOOLEAN})
"""Schema types indexed as raw terms (a boolean as ``true``/``false``); the others as numbers."""
_COUNTED_TYPES = frozenset({FieldType.KEYWORD, FieldType.KEYWORDS, FieldType.BOOLEAN, FieldType.INTEGER})
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


def _analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema(corpus_schema: CorpusSchema) -> tantivy.Schema:
    """Text fields, identity and keyword fields as raw fast terms, dates (``YYYYMMDD``),
    datetimes (microseconds since the epoch) and integers as i64, floats as f64."""
    builder = tantivy.SchemaBuilder()
    for name in TEXT_FIELDS:
        builder.add_text_field(name, stored=False, tokenizer_name=ANALYZER)
    for name in KEYWORD_FIELDS:
        builder.add_text_field(name, stored=False, fast=True, tokenizer_name="raw")
    for name, spec in corpus_schema.filterable().items():
        if spec.type in _RAW_TYPES:
            builder.add_text_field(name, stored=False, fast=True, tokenizer_name="raw")
        elif spec.type is FieldType.FLOAT:
            builder.add_float_field(name, indexed=True, fast=True)
        else:
            builder.add_integer_field(name, indexed=True, fast=True)
    builder.add_text_field("row", stored=True, tokenizer_name="raw", index_option="basic")
    return builder.build()


def _term(kind: FieldType, value: object) -> str | int | float:
    """A normalized metadata value (or filter operand) as the term tantivy holds."""
    if kind is FieldType.BOOLEAN:
        return "true" if value is True else "false" if value is False else f"\x00{value!r}"
    if kind is FieldType.DATE:
        return date_number(str(value))
    if kind is FieldType.DATETIME:
        return datetime_micros(str(value))
    if kind is FieldType.INTEGER:
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0
    if kind is FieldType.FLOAT:
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
    return str(value)


def _add(doc: tantivy.Document, name: str, kind: FieldType, value: object) -> None:
    term = _term(kind, value)
    if isinstance(term, str):
        doc.add_text(name, term)
    elif isinstance(term, float):
        doc.add_float(name, term)
    else:
        doc.add_integer(name, term)


def date_number(text: str) -> int:
    """``2024-03-12`` as ``20240312``: order-preserving, so ranges stay exact."""
    match = _DATE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not YYYY-MM-DD")
    return int(match[1] + match[2] + match[3])
