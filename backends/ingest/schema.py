"""The corpus schema (``race.schema/1``): which fields a corpus has, their types and roles.

A schema names the id, title and text fields of a document, every metadata field with its
type (``keyword``, ``keyword[]``, ``date``, ``datetime``, ``integer``, ``float``,
``boolean``), whether plans may filter on it and which RACE roles it plays (``status``,
``date``, ``authority``), and the edge relations, an open set, each with the role it plays
(``supersedes``, its inverse ``superseded_by``, ``derived_from`` or ``none``). It lives
beside the corpus as ``schema.json`` or ``schema.toml`` (or ``<name>.schema.json`` beside a
JSONL file).

Values are validated and normalized once, at ingest (``backends.ingest.values``): a date is
a real calendar date written ``YYYY-MM-DD``; a datetime is an instant written in UTC as
``YYYY-MM-DDTHH:MM:SSZ`` (``.ffffff`` before the ``Z`` when it has microseconds); integers
and floats are numbers, booleans booleans. Every backend then compares the same value. A plan filter is checked
against the same types (``check_filter``), so a value that cannot match is bad input rather
than a quiet empty answer.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from backends.ingest.values import ORDERED_TYPES as ORDERED_TYPES
from backends.ingest.values import FieldType as FieldType
from backends.ingest.values import _normalize, _operand_problem, _stored
from backends.ingest.values import datetime_micros as datetime_micros
from backends.ingest.values import normalize as normalize
from backends.ingest.values import parse_date as parse_date
from backends.ingest.values import parse_datetime as parse_datetime
from rsc import CorpusError, Filter, FilterOp, PlanError, Record, fingerprint, first_validation_error

METADATA_FIELDS: tuple[str, ...] = ("doc_type", "date", "component", "version", "authority", "status")
"""The metadata fields of the default schema (the bundled corpus's), besides ``doc_id``."""

EDGE_RELATIONS: tuple[str, ...] = ("cites", "supersedes", "derived_from", "mentions", "depends_on")
"""The relations of the default schema."""

SCHEMA_VERSION = "race.schema/1"
SCHEMA_FILES = ("schema.json", "schema.toml")


_NAME = r"^[a-z][a-z0-9_]*$"
RESERVED_FIELDS = frozenset({"doc_id", "chunk_id", "title", "section", "text", "row", "vector", "metadata_json"})
"""Names a metadata field cannot take: the chunk's own columns in every backend."""


class FieldRole(StrEnum):
    STATUS = "status"
    DATE = "date"
    AUTHORITY = "authority"


class RelationRole(StrEnum):
    SUPERSEDES = "supersedes"
    """``src`` makes ``dst`` stale."""
    SUPERSEDED_BY = "superseded_by"
    """``src`` is made stale by ``dst`` (a ``replaced_by`` edge, old to new)."""
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


class EmbedderFolder(Record):
    """The embedder a corpus's vector index is built with: a local folder in the
    sentence-transformers layout (``backends.models.folder``)."""

    path: Annotated[str, Field(min_length=1)]
    """The folder; a relative path is read from the folder holding the schema file."""
    name: Annotated[str, Field(min_length=1)] | None = None
    """The name its identity carries (default: the folder's name)."""
    query_prompt: str | None = None
    """The prefix of every query text (default: the folder's ``prompts["query"]``, else none)."""
    document_prompt: str | None = None
    """The prefix of every chunk text (default: the folder's ``prompts["document"]`` or
    ``prompts["passage"]``, else none)."""


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
    embedder: EmbedderFolder | None = Field(default=None, exclude_if=lambda value: value is None)
    """The embedder of the vector index (default: the bundled all-MiniLM-L6-v2)."""

    @model_validator(mode="after")
    def _consistent(self) -> CorpusSchema:
        reserved = sorted(set(self.fields) & RESERVED_FIELDS)
        if reserved:
            raise ValueError(f"field {reserved[0]!r} is a name every chunk already has; rename it")
        # A field named "path" is allowed: the loader fills it with each document's source path.
        own = {self.id_field, self.title_field, self.text_field}
        clash = sorted(set(self.fields) & own)
        if clash:
            raise ValueError(f"field {clash[0]!r} is the id, title or text field, not metadata")
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
        undeclared: str = 'declare it, or set extra: "store"',
    ) -> dict[str, Any]:
        """The document's metadata, validated and normalized; ``raw`` keys in ``skip`` are the
        document's own fields (id, title, text, path), ``lines`` the line of each key in the
        file ``where`` names, ``undeclared`` what the error of an undeclared field advises. An
        empty value is an absent one."""
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
                        f"field {key!r} is not in the corpus schema ({undeclared})",
                        where=where_key,
                    )
                if value is not None and value != "":
                    out[key] = _stored(value, key, where_key)
                continue
            if value is None or value == "" or value == []:
                continue
            out[key] = normalize(spec.type, value, field=key, where=where_key)
        return out


# -- plan filters -------------------------------------------------------------------------------


def check_filter(schema: CorpusSchema, flt: Filter, *, where: str) -> None:
    """A filter on a schema field whose values could never be that field's values is bad input
    (``PlanError``), as is a ``prefix`` on a field whose values are not strings. Whether an
    operator is supported (``range`` on a keyword is not) is the contracts' to say, as an
    ``unsupported_filter`` gap; fields the schema does not declare (``doc_id``, ``chunk_id``)
    are left to the contracts too. An ``any_of`` group is checked member by member."""
    for leaf in flt.leaves():
        _check_leaf(schema, leaf, where=where)


def _check_leaf(schema: CorpusSchema, flt: Filter, *, where: str) -> None:
    spec = schema.fields.get(flt.field)
    if spec is None:
        return
    if not spec.filterable:
        raise PlanError(f"filter on {flt.field!r}: the corpus schema declares it not filterable", where=where)
    if flt.op is FilterOp.PREFIX and spec.type not in (FieldType.KEYWORD, FieldType.KEYWORDS):
        raise PlanError(f"filter on {flt.field!r} ({spec.type.value}): op 'prefix' needs a keyword field", where=where)
    single = (FilterOp.EQ, FilterOp.NE, FilterOp.PREFIX)
    operands = [flt.value] if flt.op in single else list(flt.values)
    operands += [b for b in (flt.gte, flt.lte) if flt.op is FilterOp.RANGE and b is not None]
    element = FieldType.KEYWORD if spec.type is FieldType.KEYWORDS else spec.type
    for operand in operands:
        if operand is None:
            continue
        problem = _operand_problem(element, operand)
        if problem:
            raise PlanError(f"filter on {flt.field!r} ({spec.type.value}): {problem}", where=where)


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
    # Not ``is_file``: a schema.json that is a folder is refused when read, never passed over.
    return next((folder / n for n in names if (folder / n).exists()), None)


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


def field_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a metadata field, or ``None`` when it can."""
    if name == "doc_id":
        return "every chunk's own document id"
    if name in RESERVED_FIELDS:
        return "a name every chunk already has"
    if re.fullmatch(_NAME, name) is None:
        return "not lower-case letters, digits and '_', starting with a letter"
    return None


def infer_relations(names: list[str]) -> dict[str, RelationSpec]:
    known = default_schema().relations
    return {name: known.get(name, RelationSpec()) for name in sorted(names)}


def schema_file_for(corpus: Path) -> Path:
    """Where ``race index --infer-schema`` writes the schema of ``corpus``."""
    return corpus / "schema.json" if corpus.is_dir() else corpus.with_name(f"{corpus.stem}.schema.json")
