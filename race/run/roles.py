"""The RACE roles an index's corpus schema gives its fields and relations, as a run reads them.

Staleness reads the field that plays ``status``, an age bound the field that plays ``date``,
supersession the relations that play ``supersedes`` (``src`` makes ``dst`` stale) or
``superseded_by`` (``dst`` makes ``src`` stale), and source dependence the relations that play
``derived_from`` (``backends.ingest.schema``). A field or relation is read for its declared role, never
for its name: a relation called ``supersedes`` that plays no role makes nothing stale, and a
corpus without a ``status`` field has no status staleness.

The roles of the bundled corpus's schema are ``DEFAULT_ROLES``. A run over any other roles
names them in its receipt, so that a replay, which opens no index, reads the evidence as the
live run did.
"""

from __future__ import annotations

from collections.abc import Iterable

from backends.base import Adapter
from backends.ingest.schema import CorpusSchema, FieldRole, RelationRole, default_schema
from race.receipt import Roles


def roles_of(schema: CorpusSchema) -> Roles:
    return Roles(
        status=schema.field_with(FieldRole.STATUS),
        date=schema.field_with(FieldRole.DATE),
        authority=schema.field_with(FieldRole.AUTHORITY),
        supersedes=schema.relations_with(RelationRole.SUPERSEDES),
        superseded_by=schema.relations_with(RelationRole.SUPERSEDED_BY),
        derived_from=schema.relations_with(RelationRole.DERIVED_FROM),
    )


DEFAULT_ROLES = roles_of(default_schema())


def index_roles(adapters: Iterable[Adapter]) -> Roles:
    """The roles of the schema the adapters' index was built under (the first adapter that
    knows one, as plan filters are checked), the default ones where none does."""
    schema = next((a.corpus_schema for a in adapters if a.corpus_schema is not None), None)
    if schema is None:
        return DEFAULT_ROLES
    # An engine's schemas are frozen records read once at open: each run asks again of the same
    # object, so the last few are remembered, found by identity (``is``).
    for known, roles in _RECENT:
        if known is schema:
            return roles
    roles = roles_of(schema)
    _RECENT[:] = [(schema, roles), *_RECENT[: _RECENT_LIMIT - 1]]
    return roles


_RECENT: list[tuple[CorpusSchema, Roles]] = []
_RECENT_LIMIT = 8
