"""The corpus schema (``race.schema/1``): which fields a corpus has, their types and roles.

A schema names the id, title and text fields of a document, every metadata field with its
type (``keyword``, ``keyword[]``, ``date``, ``datetime``, ``integer``, ``float``,
``boolean``), whether plans may filter on it and which RACE roles it plays (``status``,
``date``, ``authority``), and the edge relations, an open set, each with the role it plays
(``supersedes``, ``derived_from`` or ``none``). It lives beside the corpus as
``schema.json`` or ``schema.toml`` (or ``<name>.schema.json`` beside a JSONL file).

Values are validated and normalized here, once, at ingest: a date is a real calendar date
written ``YYYY-MM-DD``; a datetime is an instant written in UTC as ``YYYY-MM-DDTHH:MM:SSZ``
(``.ffffff`` before the ``Z`` when it has microseconds); integers and floats are numbers,
booleans booleans. Every backend then compares the same value. A plan filter is checked
against the same types (``check_filter``), so a value that cannot match is bad input rather
than a quiet empty answer.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import math
import re
import tomllib
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from rsc import CorpusError, Filter, FilterOp, PlanError, Record, fingerprint, first_validation_error
from rsc.records import MetadataValue

SCHEMA_VERSION = "race.schema/1"
SCHEMA_FILES = ("schema.json", "schema.toml")


_NAME = r"^[a-z][a-z0-9_]*$"
RESERVED_FIELDS = frozenset({"doc_id", "chunk_id", "title", "section", "text", "row", "vector", "metadata_json"})
"""Names a metadata field cannot take: the chunk's own columns in every backend."""


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


class FieldRole(StrEnum):
    STATUS = "status"
    DATE = "date"
    AUTHORITY = "authority"


class RelationRole(StrEnum):
    SUPERSEDES = "supersedes"
    DERIVED_FROM = "derived_from"
    NONE = "none"


_ROLE_TYPES: dict[FieldRole, frozenset[FieldType]] = {
    FieldRole.STATUS: frozenset({FieldType.KEYWORD}),
    FieldRole.DATE: frozenset({FieldType.DATE, FieldType.DATETIME}),
    FieldRole.AUTHORITY: frozenset({FieldType.KEYWORD}),
}


class FieldSpec(Record):
    type: FieldType
    filterable: bool = True
    roles: tuple[FieldRole, ...] = ()

    @model_validator(mode="after")
    def _role_types(self) -> FieldSpec:
        for role in self.roles:
            if self.type not in _ROLE_TYPES[role]:
                allowed = " or ".join(sorted(t.value for t in _ROLE_TYPES[role]))
                raise ValueError(f"role {role.value!r} needs a field of type {allowed}, not {self.type.value!r}")
        return self


class RelationSpec(Record):
    role: RelationRole = RelationRole.NONE


class CorpusSchema(Record):
    schema_version: Literal["race.schema/1"]
    id_field: Annotated[str, Field(min_length=1)] = "id"
    title_field: Annotated[str, Field(min_length=1)] = "title"
    text_field: Annotated[str, Field(min_length=1)] = "text"
    extra: Literal["error", "store"] = "error"
    """What an undeclared field in the data is: an error naming it, or kept in custody
    metadata (never filterable)."""
    fields: dict[Annotated[str, Field(pattern=_NAME)], FieldSpec] = Field(default_factory=dict)
    relations: dict[Annotated[str, Field(pattern=_NAME)], RelationSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> CorpusSchema:
        reserved = sorted(set(self.fields) & RESERVED_FIELDS)
        if reserved:
            raise ValueError(f"field {reserved[0]!r} is a name every chunk already has; rename it")
        own = {self.id_field, self.title_field, self.text_field, "path"}
        clash = sorted(set(self.fields) & own)
        if clash:
            raise ValueError(f"field {clash[0]!r} is the id, title, text or path field, not metadata")
        for role in FieldRole:
            named = [name for name, spec in self.fields.items() if role in spec.roles]
            if len(named) > 1:
                raise ValueError(f"role {role.value!r} is played by {named[0]!r} and {named[1]!r}; one field at most")
        return self

    @property
    def fingerprint(self) -> str:
        return fingerprint(self)

    def filterable(self) -> dict[str, FieldSpec]:
        """Filterable metadata fields, by name in sorted order."""
        return {name: spec for name, spec in sorted(self.fields.items()) if spec.filterable}

    def field_with(self, role: FieldRole) -> str | None:
        return next((name for name, spec in sorted(self.fields.items()) if role in spec.roles), None)

    def relations_with(self, role: RelationRole) -> tuple[str, ...]:
        return tuple(sorted(name for name, spec in self.relations.items() if spec.role is role))

    # -- ingest -------------------------------------------------------------------------------

    def metadata(
        self,
        raw: Mapping[str, Any],
        *,
        where: str,
        lines: Mapping[str, int] | None = None,
        skip: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """The document's metadata, validated and normalized; ``raw`` keys in ``skip`` are the
        document's own fields (id, title, text, path), ``lines`` the line of each key in the
        file ``where`` names. An empty value is an absent one."""
        out: dict[str, Any] = {}
        for key in raw:
            if key in skip:
                continue
            value = raw[key]
            where_key = f"{where}:{lines[key]}" if lines and key in lines else where
            spec = self.fields.get(key)
            if spec is None:
                if self.extra == "error":
                    raise CorpusError(
                        f"field {key!r} is not in the corpus schema (declare it, or set extra: \"store\")",
                        where=where_key,
                    )
                if value is not None and value != "":
                    out[key] = _stored(value, key, where_key)
                continue
            if value is None or value == "" or value == []:
                continue
            out[key] = normalize(spec.type, value, field=key, where=where_key)
        return out


def _stored(value: Any, key: str, where: str) -> MetadataValue:
    """An undeclared value kept as it is, if it is a scalar or a list of strings."""
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    raise CorpusError(f"field {key!r}: {type(value).__name__} values cannot be stored", where=where)


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


# -- plan filters -------------------------------------------------------------------------------


def check_filter(schema: CorpusSchema, flt: Filter, *, where: str) -> None:
    """A filter on a schema field whose values could never be that field's values is bad input
    (``PlanError``). Whether an operator is supported (``range`` on a keyword is not) is the
    contracts' to say, as an ``unsupported_filter`` gap; fields the schema does not declare
    (``doc_id``, ``chunk_id``) are left to the contracts too."""
    spec = schema.fields.get(flt.field)
    if spec is None:
        return
    if not spec.filterable:
        raise PlanError(f"filter on {flt.field!r}: the corpus schema declares it not filterable", where=where)
    operands = [flt.value] if flt.op is FilterOp.EQ else list(flt.values) if flt.op is FilterOp.IN else []
    operands += [b for b in (flt.gte, flt.lte) if flt.op is FilterOp.RANGE and b is not None]
    element = FieldType.KEYWORD if spec.type is FieldType.KEYWORDS else spec.type
    for operand in operands:
        problem = _operand_problem(element, operand)
        if problem:
            raise PlanError(f"filter on {flt.field!r} ({spec.type.value}): {problem}", where=where)


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


# -- files ----------------------------------------------------------------------------------------


def parse_schema(data: bytes, *, where: str, toml: bool = False) -> CorpusSchema:
    try:
        raw = tomllib.loads(data.decode("utf-8")) if toml else json.loads(data)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CorpusError(f"malformed TOML: {exc}", where=where) from exc
    except json.JSONDecodeError as exc:
        raise CorpusError(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", where=where) from exc
    if not isinstance(raw, dict):
        raise CorpusError("a schema must be an object", where=where)
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise CorpusError(f"schema_version must be {SCHEMA_VERSION!r}, got {raw.get('schema_version')!r}", where=where)
    try:
        return CorpusSchema.model_validate(raw)
    except ValidationError as exc:
        raise CorpusError(first_validation_error(exc), where=where) from exc


def schema_path(corpus: Path) -> Path | None:
    """The schema file of a corpus folder or JSONL file, if it has one."""
    folder = corpus if corpus.is_dir() else corpus.parent
    names = list(SCHEMA_FILES) if corpus.is_dir() else [f"{corpus.stem}.schema.json", f"{corpus.stem}.schema.toml"]
    if not corpus.is_dir():
        names += list(SCHEMA_FILES)
    return next((folder / n for n in names if (folder / n).is_file()), None)


def load_schema(corpus: Path) -> CorpusSchema:
    """The corpus's declared schema, or the default one (``default_schema``) if it has none."""
    path = schema_path(corpus)
    if path is None:
        return default_schema()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    return parse_schema(data, where=str(path), toml=path.suffix == ".toml")


def default_schema() -> CorpusSchema:
    """The schema of a corpus that declares none: the bundled corpus's six fields and five
    relations, unknown fields an error."""
    keyword = FieldSpec(type=FieldType.KEYWORD)
    return CorpusSchema(
        schema_version=SCHEMA_VERSION,
        fields={
            "authority": FieldSpec(type=FieldType.KEYWORD, roles=(FieldRole.AUTHORITY,)),
            "component": keyword,
            "date": FieldSpec(type=FieldType.DATE, roles=(FieldRole.DATE,)),
            "doc_type": keyword,
            "status": FieldSpec(type=FieldType.KEYWORD, roles=(FieldRole.STATUS,)),
            "version": keyword,
        },
        relations={
            "cites": RelationSpec(),
            "depends_on": RelationSpec(),
            "derived_from": RelationSpec(role=RelationRole.DERIVED_FROM),
            "mentions": RelationSpec(),
            "supersedes": RelationSpec(role=RelationRole.SUPERSEDES),
        },
    )


def schema_document(schema: CorpusSchema) -> str:
    """The schema as the JSON file a user keeps beside the corpus."""
    return json.dumps(schema.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"


# -- inference -------------------------------------------------------------------------------------

_INFERRED_ORDER = (
    FieldType.BOOLEAN,
    FieldType.INTEGER,
    FieldType.FLOAT,
    FieldType.DATE,
    FieldType.DATETIME,
)


def infer_field(name: str, values: list[Any]) -> FieldSpec:
    """The narrowest type all ``values`` fit (``keyword[]`` if any is a list), and the role the
    default schema gives a field of this name, if the type allows it."""
    present = [v for v in values if v not in (None, "", [])]
    kind = FieldType.KEYWORD
    if any(isinstance(v, list) for v in present):
        kind = FieldType.KEYWORDS
    else:
        for candidate in _INFERRED_ORDER:
            try:
                for value in present:
                    _normalize(candidate, value)
            except ValueError:
                continue
            if present:
                kind = candidate
                break
    default = default_schema().fields.get(name)
    roles = tuple(r for r in (default.roles if default else ()) if kind in _ROLE_TYPES[r])
    return FieldSpec(type=kind, roles=roles)


def infer_relations(names: list[str]) -> dict[str, RelationSpec]:
    known = default_schema().relations
    return {name: known.get(name, RelationSpec()) for name in sorted(names)}


def schema_file_for(corpus: Path) -> Path:
    """Where ``race index --infer-schema`` writes the schema of ``corpus``."""
    return corpus / "schema.json" if corpus.is_dir() else corpus.with_name(f"{corpus.stem}.schema.json")
