"""The catalog (``race.catalog/1``): the named backend instances one engine serves.

A catalog is a TOML or JSON document. Each instance has a name (which its contracts and its
hits' custody carry as ``backend``), a kind, a location and, for an index RACE did not build,
the field mapping from its columns to custody fields and the embedder its query vectors come
from (by name, its identity checked)::

    schema_version = "race.catalog/1"

    [instances.docs]            # a `race index` directory: its tantivy index
    kind = "tantivy"
    location = "../index"

    [instances.tickets]         # a LanceDB table another job maintains
    kind = "lancedb"
    location = "tables"
    table = "tickets"
    embedder = { name = "sentence-transformers/all-MiniLM-L6-v2" }
    fields = { id = "doc_key", text = "body" }

    [instances.tickets.contracts."tickets.lancedb.flat_prefilter"]
    filters = { team = "postfilter_only" }

Contracts are generated from each instance's real schema and capabilities; ``contracts``
overrides may only weaken what was generated (``race.indexing.catalog_contracts``). An index directory
built by ``race index`` is itself a catalog of its instances (``index_catalog``).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, model_validator

from backends.mapping import FieldMapping
from rsc import ContractEgress, FilterSupportClass, InputError, Record, first_validation_error
from rsc.suggest import schema_version_error

CATALOG_SCHEMA_VERSION = "race.catalog/1"
INSTANCE_NAME = r"^[a-z][a-z0-9_]*$"
"""An instance name is one segment of a contract id (``<name>.<kind>.<mode>``)."""

Kind = Literal["tantivy", "lancedb", "graph", "race-remote", "milvus"]
_ATTACHABLE = frozenset({"tantivy", "lancedb", "milvus"})
"""Kinds whose instance may be an index RACE did not build (with a field mapping)."""
_SHARDABLE = frozenset({"tantivy", "lancedb"})
"""Kinds whose instance may list the ``race index`` directories of its shards."""


class EmbedderRef(Record):
    """The embedder an instance's query vectors come from: the bundled model by name, a local
    folder in the sentence-transformers layout (``path``), or a model RACE cannot run, known by
    its ``name``, ``dims`` and ``weights_sha256`` (searched with caller vectors only). A given
    ``weights_sha256``, ``config_sha256`` or ``dims`` must be what that embedder really has."""

    name: Annotated[str, Field(min_length=1)]
    """The embedder's name (``sentence-transformers/all-MiniLM-L6-v2``, the bundled model, or the
    name a folder's identity carries)."""
    path: Annotated[str, Field(min_length=1)] | None = None
    """A local folder in the sentence-transformers layout (relative to the catalog's folder)."""
    query_prompt: str | None = None
    """With ``path``: the prefix of every query text (default: the folder's ``prompts["query"]``)."""
    document_prompt: str | None = None
    """With ``path``: the prefix of every document text (default: the folder's ``prompts["document"]``
    or ``prompts["passage"]``)."""
    weights_sha256: str | None = None
    """If given, the sha256 the embedder's weights must have."""
    config_sha256: str | None = None
    """If given, the sha256 of the folder's output-changing configuration (as a receipt names it)."""
    dims: Annotated[int, Field(ge=1)] | None = None
    """If given, the dimensions the embedder must give (and the vector column must hold)."""

    @model_validator(mode="after")
    def _prompts_need_folder(self) -> EmbedderRef:
        if self.path is None and (self.query_prompt is not None or self.document_prompt is not None):
            raise ValueError("'query_prompt' and 'document_prompt' belong to an embedder read from a folder ('path')")
        return self


class ContractOverride(Record):
    """What a user may change in one generated contract: each entry only weakens a claim."""

    filters: dict[str, FilterSupportClass] = Field(default_factory=dict)
    """A field filtered natively may be declared filtered after the top-k (``postfilter_only``),
    or not filterable at all (``unsupported``); never a stronger class than generated."""
    sorted_access: bool | None = None
    """Sorted access may be withdrawn (``false``), never granted."""
    random_access: bool | None = None
    """Random access may be withdrawn (``false``), never granted."""
    egress: ContractEgress | None = None
    """A local instance may be declared remote (its data leaves the machine), never the reverse."""
    snapshot: Literal["generation", "live"] | None = None
    """A generation snapshot may be declared live (read as it stands), never the reverse."""
    model_calls: Annotated[int, Field(ge=0)] | None = None
    """At most this many model calls per scan: never fewer than generated."""
    base_latency_ms: Annotated[float, Field(ge=0.0)] | None = None
    """A cost prior (no claim: a starting point the measured statistics replace)."""
    per_candidate_us: Annotated[float, Field(ge=0.0)] | None = None
    """A cost prior (no claim: a starting point the measured statistics replace)."""


class Instance(Record):
    """One named backend instance: what it is, where it lives and how its fields read."""

    kind: Kind
    """``tantivy``, ``lancedb``, ``graph``, ``race-remote`` (a ``race serve`` server) or ``milvus``."""
    location: Annotated[str, Field(min_length=1)] | None = None
    """A path (relative to the catalog file), a LanceDB or Milvus URI (a milvus-lite ``*.db`` file is
    a path) or a server URL; required unless the instance lists its ``shards``."""
    table: Annotated[str, Field(min_length=1)] | None = None
    """LanceDB: the table of an attached database."""
    vector: Annotated[str, Field(min_length=1)] | None = None
    """LanceDB or Milvus: the vector column of an attached table or collection (default: its only one)."""
    collection: Annotated[str, Field(min_length=1)] | None = None
    """Milvus: the collection of an attached instance (``location`` is its URI)."""
    fields: FieldMapping | None = None
    """The field mapping of an index RACE did not build; none for one `race index` built."""
    embedder: EmbedderRef | None = None
    """The embedder the instance's vectors came from (required for an attached LanceDB table or Milvus collection)."""
    check_vectors: bool = True
    """LanceDB attached: embed a few rows' text and refuse the table if its vectors differ."""
    key_domain: Annotated[str, Field(pattern=INSTANCE_NAME)] | None = None
    """Evidence keys are ``<key_domain>:<id>``; ``chunk`` shares them with RACE's own indexes.
    Default: the instance name, so ids of unrelated sources never merge."""
    timeout_s: Annotated[float, Field(gt=0.0, le=600.0)] = 5.0
    """race-remote and milvus: the client's deadline for one call."""
    consistency: Literal["Strong", "Bounded", "Session", "Eventually"] | None = None
    """milvus: the consistency level every read uses (default: the instance folder's, Strong). Below
    ``Strong`` a scan may miss recent writes: its contracts say so and each scan carries a caveat."""
    contracts: dict[str, ContractOverride] = Field(default_factory=dict)
    """Overrides by the served contract id (``<name>.<kind>.<mode>``, or the kind's own id)."""
    shards: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    """A sharded instance (``backends.sharded``): one ``race index`` directory per shard, in order;
    tantivy or LanceDB indexes RACE built."""

    @model_validator(mode="after")
    def _shape(self) -> Instance:
        if self.fields is not None and self.kind not in _ATTACHABLE:
            raise ValueError(f"a {self.kind} instance has no field mapping (only {sorted(_ATTACHABLE)} attach one)")
        if self.kind == "lancedb" and self.fields is not None:
            if self.table is None:
                raise ValueError("an attached LanceDB instance names its 'table'")
            if self.embedder is None:
                raise ValueError("an attached LanceDB instance names the 'embedder' its vectors come from")
        elif self.kind == "milvus" and self.fields is not None:
            if self.collection is None or self.embedder is None or self.table is not None:
                raise ValueError("an attached Milvus instance names its 'collection' and its 'embedder' (no 'table')")
        elif self.table is not None or self.vector is not None:
            raise ValueError("'table' and 'vector' belong to an attached LanceDB instance")
        if self.collection is not None and (self.kind != "milvus" or self.fields is None):
            raise ValueError("'collection' belongs to an attached Milvus instance (with its 'fields')")
        if self.shards:
            if self.kind not in _SHARDABLE or self.fields is not None or self.location is not None:
                raise ValueError(
                    "'shards' lists the `race index` directories of a tantivy or lancedb instance, not 'location'"
                )
        elif self.location is None:
            raise ValueError("'location' is required (or 'shards', for a sharded instance)")
        if self.consistency is not None and self.kind != "milvus":
            raise ValueError("'consistency' belongs to a milvus instance")
        return self


class Catalog(Record):
    """The named backend instances one engine serves."""

    schema_version: Literal["race.catalog/1"]
    """Always ``race.catalog/1``."""
    instances: Annotated[dict[Annotated[str, Field(pattern=INSTANCE_NAME)], Instance], Field(min_length=1)]
    """The instances by name (``[a-z][a-z0-9_]*``): the backend their contracts and custody name."""


def parse_catalog(data: bytes, *, where: str, toml: bool) -> Catalog:
    """A validated catalog; any defect is one ``InputError`` naming the file and the field."""
    try:
        raw = tomllib.loads(data.decode("utf-8")) if toml else json.loads(data)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"malformed TOML: {exc}", where=where) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", where=where) from exc
    if not isinstance(raw, dict):
        raise InputError("a catalog must be an object", where=where)
    if raw.get("schema_version") != CATALOG_SCHEMA_VERSION:
        raise InputError(schema_version_error(raw, CATALOG_SCHEMA_VERSION) or "", where=where)
    try:
        return Catalog.model_validate(raw)
    except ValidationError as exc:
        raise InputError(first_validation_error(exc, Catalog), where=where) from exc


def load_catalog(path: Path) -> Catalog:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    return parse_catalog(data, where=str(path), toml=path.suffix.lower() == ".toml")


def index_catalog(index_dir: Path) -> Catalog:
    """An index directory built by ``race index`` as a catalog: one instance per backend it
    built, named after its kind, so its contracts are the ones ``Engine.open`` serves."""
    from race.indexing.indexing import read_manifest

    built = read_manifest(index_dir).get("backends", [])
    kinds = sorted(str(b) for b in built) if isinstance(built, list) else []
    return Catalog(
        schema_version=CATALOG_SCHEMA_VERSION,
        instances={kind: Instance.model_validate({"kind": kind, "location": str(index_dir)}) for kind in kinds},
    )


SUPPORT_RANK = {
    FilterSupportClass.UNSUPPORTED: 0,
    FilterSupportClass.POSTFILTER_ONLY: 1,
    FilterSupportClass.NATIVE_FILTERED_ANN: 2,
    FilterSupportClass.NATIVE_PREFILTER_EXACT: 3,
}
"""Filter support classes from the weakest claim to the strongest."""
