"""The LanceDB adapter: cosine vector search over chunk embeddings in three physical modes.

``vector_flat`` is an exhaustive scan with the filter applied before the distance top-k
(exact). ``vector_ann_prefilter`` probes the IVF index with the filter applied before the
top-k, widening the probe until k filtered rows are found (approximate, recall measured by
``benchmarks/bench_filtered_vectors.py``). ``vector_ann_postfilter`` takes the ANN top-k and
filters afterwards, so it can return fewer than k rows; that shortfall is reported as a
``postfilter_only_filter`` gap, never as absence. The planner sends postfilter-only filters
as ``residual``: that mode hands them to LanceDB's postfilter; the prefilter modes, which
should never get any, apply them to their k rows and report a shortfall the same way.

Unindexed rows (appended after the ANN index was trained) are still searched: LanceDB
scans them flat and merges them in, unless a request opts into ``fast_search``, which
skips them and is then reported as an ``unindexed_rows_skipped`` gap. Every scan reads one
table snapshot, so its hits and its generation describe the same version.

The generation names that snapshot: the table version together with a digest of the version's
manifest file (which names the dataset's data files and indexes, so two tables built apart
never share one even at the same version and row counts), the indexed and unindexed row
counts and the embedder. A run pins it by checking that version out (``pinned``).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import shutil
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Self

import lancedb
import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
from lancedb.index import Bitmap, BTree, IvfFlat, LabelList
from lancedb.query import LanceVectorQueryBuilder
from lancedb.table import Table

from backends.base import (
    UNKNOWN_GENERATION,
    Adapter,
    Progress,
    RefusedSnapshot,
    blocking,
    custody_hits,
    load_contracts_beside,
)
from backends.corpus import Chunk, Corpus
from backends.embedding import Embedder, EmbedderIdentity, MiniLMEmbedder, token_counter
from backends.generated import generate_contracts, read_contracts, schema_json, schema_of, write_contracts
from backends.lancedb.exact import EXACT_DIR, MODE_EXACT, MatrixStore
from backends.schema import CorpusSchema, FieldType, datetime_micros, default_schema
from rsc import (
    BackendStatistics,
    BackendUnavailable,
    Calibration,
    Contract,
    Filter,
    FilterOp,
    Gap,
    GapKind,
    Hit,
    IndexMissingError,
    ScanRequest,
    ScanResult,
    ScoreKind,
    fingerprint,
    fingerprint_bytes,
)

TABLE: Final = "chunks"
VECTOR: Final = "vector"
VECTOR_INDEX: Final = "vector_idx"
MANIFEST: Final = "race.json"

MODE_FLAT: Final = "vector_flat"
MODE_ANN_PREFILTER: Final = "vector_ann_prefilter"
MODE_ANN_POSTFILTER: Final = "vector_ann_postfilter"
MODES: Final = (MODE_FLAT, MODE_ANN_PREFILTER, MODE_ANN_POSTFILTER)

IDENTITY_FIELDS: Final = ("chunk_id", "doc_id")
_COLUMN_TYPES: Final = {
    FieldType.KEYWORD: pa.string(),
    FieldType.KEYWORDS: pa.list_(pa.string()),
    FieldType.DATE: pa.string(),
    FieldType.DATETIME: pa.int64(),
    FieldType.INTEGER: pa.int64(),
    FieldType.FLOAT: pa.float64(),
    FieldType.BOOLEAN: pa.bool_(),
}
"""The column of each schema type. Dates are ISO strings (string order is date order);
datetimes microseconds since the epoch, so that instants compare as numbers."""
_COUNTED_TYPES: Final = frozenset(
    {FieldType.KEYWORD, FieldType.KEYWORDS, FieldType.DATE, FieldType.INTEGER, FieldType.BOOLEAN}
)
"""Types whose value counts ``statistics()`` reports; ``doc_id`` is left out as unbounded."""


def _scalar_index(kind: FieldType | None) -> BTree | Bitmap | LabelList:
    """High-cardinality or range-queried fields get a BTREE, small keyword vocabularies a BITMAP,
    multi-valued keywords a LABEL_LIST (which serves ``array_has_any``)."""
    if kind is None or kind in (FieldType.DATE, FieldType.DATETIME, FieldType.INTEGER, FieldType.FLOAT):
        return BTree()
    return LabelList() if kind is FieldType.KEYWORDS else Bitmap()

ANN_MIN_NPROBES: Final = 20
"""IVF partitions probed at least (LanceDB's default). The prefilter mode may widen past it."""
ANN_PROBE_SHARE: Final = 16
"""At least 1/16 of the partitions are probed, the share the benchmark measured at 100k rows
(20 of 316), so the probed share of a larger table never falls below the measured one."""

_EMBED_BATCH = 64
_QUERY_VECTORS = 256
"""Query vectors kept per adapter: sorted and random access for one query embed it once."""
RANDOM_ACCESS: Final = "random"
"""``params["access"]`` of a random-access request: the rows its identity filter names,
scored exactly (flat, whatever the contract's mode) under the request's other filters."""
_CHUNK_FIELDS: Final = (
    "chunk_id",
    "doc_id",
    "title",
    "section",
    "text",
    "source_path",
    "line_start",
    "line_end",
    "char_start",
    "char_end",
    "source_hash",
)
"""The ``Chunk`` fields stored one column each; custody is rebuilt from them."""
_CHUNK_COLUMNS: Final = (*_CHUNK_FIELDS, "corpus_revision", "metadata_json")


def ann_partitions(rows: int) -> int:
    """IVF partitions for a table of ``rows``: sqrt(rows), LanceDB's own default.

    At the fixture scale (~200 rows) this gives ~15 partitions of ~14 rows, so the index
    is real (queries go through ANNIvfPartition) but the 20 probes cover every partition
    and ANN answers equal the flat ones; at 100k rows it is 316 partitions of which 20
    are probed. IVF_FLAT keeps full vectors, so distances are exact and no
    refine step is needed; PQ would also need >= 256 rows to train its codebooks.
    """
    return max(1, min(4096, round(math.sqrt(rows))))


def ann_nprobes(partitions: int) -> int:
    return max(ANN_MIN_NPROBES, math.ceil(partitions / ANN_PROBE_SHARE))


def ann_index_config(rows: int) -> IvfFlat:
    return IvfFlat(distance_type="cosine", num_partitions=ann_partitions(rows))


ANN_PROFILE: Final = (
    f"lancedb IVF_FLAT cosine, partitions=round(sqrt(rows)), nprobes=max({ANN_MIN_NPROBES}, "
    f"partitions/{ANN_PROBE_SHARE}) widened until k filtered rows are found, prefilter via BITMAP/BTREE "
    "scalar indexes"
)


def vector_query(
    table: Table,
    mode: str,
    vector: npt.NDArray[np.float32],
    where: str | None,
    k: int,
    *,
    nprobes: int = ANN_MIN_NPROBES,
    fast_search: bool = False,
    columns: Sequence[str] | None = None,
) -> LanceVectorQueryBuilder:
    """The native LanceDB query for one physical mode; the benchmark measures this same query."""
    if mode not in MODES:
        raise BackendUnavailable(f"lancedb has no mode {mode!r}", where="lancedb")
    # numpy 2 promotes mixed arithmetic to float64; LanceDB would then compare float64
    # queries against float32 columns, so the query is cast at the edge.
    query = np.ascontiguousarray(vector, dtype=np.float32)
    search = table.search(query, vector_column_name=VECTOR)
    if not isinstance(search, LanceVectorQueryBuilder):
        raise BackendUnavailable(f"lancedb answered a vector query with {type(search).__name__}", where="lancedb")
    builder = search.distance_type("cosine").limit(k)
    if columns is not None:
        # Named explicitly: LanceDB 0.40 warns that it will stop adding `_distance` on its own.
        builder = builder.select([*columns, *(() if "_distance" in columns else ("_distance",))])
    if mode == MODE_FLAT:
        builder = builder.bypass_vector_index()
    elif mode == MODE_ANN_PREFILTER:
        # maximum_nprobes(0): keep probing partitions while fewer than k rows pass the filter.
        builder = builder.minimum_nprobes(nprobes).maximum_nprobes(0)
    else:
        builder = builder.nprobes(nprobes)
    if where is not None:
        builder = builder.where(where, prefilter=mode != MODE_ANN_POSTFILTER)
    if fast_search and mode != MODE_FLAT:
        builder = builder.fast_search()
    return builder


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sql_literal(kind: FieldType, value: object) -> str | None:
    """A filter operand as an SQL literal of the column's type; ``None`` if no stored value can
    equal it (``Filter.matches`` never equates a string with a number or a boolean)."""
    if kind in (FieldType.KEYWORD, FieldType.KEYWORDS, FieldType.DATE):
        return _sql_string(value) if isinstance(value, str) else None
    if kind is FieldType.BOOLEAN:
        return ("TRUE" if value else "FALSE") if isinstance(value, bool) else None
    if kind is FieldType.DATETIME:
        return str(datetime_micros(value)) if isinstance(value, str) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if kind is FieldType.INTEGER:
        return str(value) if isinstance(value, int) else repr(float(value))
    return repr(float(value))


def filter_sql(filters: Sequence[Filter], schema: CorpusSchema | None = None) -> str | None:
    """One SQL predicate for all filters (AND), or None when there are none.

    Each operand is written as a literal of its column's type; one that no stored value can
    equal matches nothing (``FALSE``) rather than being cast. A multi-valued keyword matches
    when it holds any of the values (``array_has_any``).
    """
    fields = (schema or default_schema()).filterable()
    parts: list[str] = []
    for flt in filters:
        spec = fields.get(flt.field)
        if spec is None and flt.field not in IDENTITY_FIELDS:
            raise BackendUnavailable(f"lancedb cannot filter on field {flt.field!r}", where="lancedb")
        kind = spec.type if spec is not None else FieldType.KEYWORD
        column = f"`{flt.field}`"
        if flt.op in (FilterOp.EQ, FilterOp.IN):
            operands = [flt.value] if flt.op is FilterOp.EQ else list(flt.values)
            literals = [lit for lit in (_sql_literal(kind, v) for v in operands) if lit is not None]
            if not literals:
                parts.append("FALSE")
            elif kind is FieldType.KEYWORDS:
                parts.append(f"array_has_any({column}, [{', '.join(literals)}])")
            elif len(literals) == 1 and flt.op is FilterOp.EQ:
                parts.append(f"{column} = {literals[0]}")
            else:
                parts.append(f"{column} IN ({', '.join(literals)})")
        else:
            if kind not in (FieldType.DATE, FieldType.DATETIME, FieldType.INTEGER, FieldType.FLOAT):
                raise BackendUnavailable(
                    f"range filter on keyword field {flt.field!r} is not supported", where="lancedb"
                )
            bounds = [(">=", flt.gte), ("<=", flt.lte)]
            for op, bound in bounds:
                if bound is None:
                    continue
                literal = _sql_literal(kind, bound)
                parts.append(f"{column} {op} {literal}" if literal is not None else "FALSE")
    if not parts:
        return None
    return " AND ".join(f"({p})" for p in parts)


def chunk_text(chunk: Chunk) -> str:
    """What a chunk's vector embeds: title, section heading and body."""
    return "\n".join(part for part in (chunk.title, chunk.section, chunk.text) if part)


def _schema(dims: int, corpus_schema: CorpusSchema) -> pa.Schema:
    fields = [
        pa.field("chunk_id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("section", pa.string()),
        pa.field("text", pa.string()),
        pa.field("source_path", pa.string()),
        pa.field("line_start", pa.int64()),
        pa.field("line_end", pa.int64()),
        pa.field("char_start", pa.int64()),
        pa.field("char_end", pa.int64()),
        pa.field("source_hash", pa.string()),
        pa.field("corpus_revision", pa.string()),
        pa.field("metadata_json", pa.string()),
        *[pa.field(name, _COLUMN_TYPES[spec.type]) for name, spec in corpus_schema.filterable().items()],
        pa.field(VECTOR, pa.list_(pa.float32(), dims)),
    ]
    return pa.schema(fields)


def chunk_rows(
    chunks: Sequence[Chunk],
    vectors: npt.NDArray[np.float32],
    corpus_revision: str,
    dims: int,
    corpus_schema: CorpusSchema | None = None,
) -> pa.Table:
    """Arrow rows for chunks and their vectors, in the table's schema."""
    corpus_schema = corpus_schema or default_schema()
    fields = corpus_schema.filterable()
    columns: dict[str, list[Any]] = {name: [] for name in _CHUNK_COLUMNS}
    for name in fields:
        columns[name] = []
    for chunk in chunks:
        for name in _CHUNK_FIELDS:
            columns[name].append(getattr(chunk, name))
        columns["corpus_revision"].append(corpus_revision)
        columns["metadata_json"].append(json.dumps(chunk.metadata, sort_keys=True))
        for name, spec in fields.items():
            value = chunk.metadata.get(name)
            if value is not None and spec.type is FieldType.DATETIME:
                value = datetime_micros(str(value))
            columns[name].append(list(value) if isinstance(value, tuple) else value)
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1), type=pa.float32())
    schema = _schema(dims, corpus_schema)
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema if f.name != VECTOR]
    arrays.append(pa.FixedSizeListArray.from_arrays(flat, dims))
    return pa.Table.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class Snapshot:
    """One table version as a scan sees it, with what makes up its generation."""

    table: Table
    version: int
    rows: int
    indexed_rows: int
    unindexed_rows: int
    manifest: str = ""
    """Digest of this version's manifest file: which dataset, at which version."""
    corpus_revision: str = ""
    """The corpus revision ``race.json`` records for the table this version belongs to."""


_U64_MAX: Final = 2**64 - 1


@dataclass(frozen=True)
class _GenerationMemo:
    """The generation read for one table version, and what shows that version is still the latest."""

    generation: str
    versions_dir: tuple[int, int, int]
    """(inode, mtime, ctime) of ``_versions/``, taken before the version was read."""
    next_manifest: str | None
    """The path the manifest of the next version will have; ``None`` if its name is unknown."""


def _manifest_name(version: int, *, v2: bool) -> str:
    # Lance's manifest naming schemes: V2 counts down from u64::MAX so the latest lists first.
    return f"{_U64_MAX - version:020d}.manifest" if v2 else f"{version}.manifest"


def _next_manifest(versions_dir: str, version: int) -> str | None:
    """Where the commit after ``version`` will put its manifest, in the scheme (V2 or V1) of the
    manifest of ``version``; ``None`` if that one is not there to tell."""
    for v2 in (True, False):
        if os.path.exists(os.path.join(versions_dir, _manifest_name(version, v2=v2))):
            return os.path.join(versions_dir, _manifest_name(version + 1, v2=v2))
    return None


def _manifest_digest(versions_dir: str, version: int) -> str:
    """The digest (hex) of the manifest file of ``version``. Lance writes each version's manifest
    once (put-if-not-exists) and never changes it, so the digest names that version for good;
    data files are named afresh by every write, so another table's version differs."""
    for v2 in (True, False):
        try:
            with open(os.path.join(versions_dir, _manifest_name(version, v2=v2)), "rb") as handle:
                return fingerprint_bytes(handle.read()).split(":", 1)[1]
        except FileNotFoundError:
            continue
    raise IndexMissingError(f"table version {version} has no manifest", where=versions_dir)


_VERSION_OF: Final = re.compile(r"^lancedb:v(\d+):")
_SNAPSHOT_TRIES: Final = 5
"""Reads of a snapshot retried while the table directory keeps being replaced under them."""


class LanceAdapter(Adapter):
    backend = "lancedb"

    def __init__(self, path: Path, manifest: dict[str, Any], embedder: Embedder) -> None:
        self._path = path
        self._manifest = manifest
        self._corpus_schema = schema_of(manifest)
        self._truncated: dict[str, dict[str, int]] = manifest.get("truncated") or {}
        self._embedder = embedder
        self._embedder_identity = EmbedderIdentity.model_validate(manifest["embedder"])
        self._embedder_fingerprint = fingerprint(self._embedder_identity)
        # No read-consistency interval: each scan opens its own handle (latest version at
        # open time) and then keeps reading that one version, so the hits and the
        # generation it reports cannot straddle a concurrent write.
        self._db = lancedb.connect(str(path))
        self._stats: tuple[str, BackendStatistics] | None = None
        self._nprobes = int(manifest["ann_index"]["nprobes"])
        self._versions_dir = path / f"{TABLE}.lance" / "_versions"
        self._generation_memo: _GenerationMemo | None = None
        self._generation_lock = threading.Lock()
        self._counts: dict[str, tuple[int, int, int]] = {}
        self._pin: Snapshot | None = None
        # The corpus revision race.json records, by the (inode, mtime, size) it was read at.
        self._revision: tuple[tuple[int, int, int], str] | None = None
        self._vectors: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._vectors_lock = threading.Lock()
        self._embedding: dict[str, threading.Lock] = {}
        self._exact = MatrixStore(path / EXACT_DIR, self._versions_dir)

    # -- contract, build, open --------------------------------------------------------------

    @classmethod
    def contracts(cls) -> tuple[Contract, ...]:
        return load_contracts_beside(__file__)

    @classmethod
    def build(
        cls, corpus: Corpus, index_dir: Path, progress: Progress | None = None, *, embedder: Embedder | None = None
    ) -> str:
        embedder = embedder or MiniLMEmbedder()
        identity = embedder.identity
        path = index_dir / cls.backend
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        chunks = corpus.chunks
        vectors = np.empty((len(chunks), identity.dims), dtype=np.float32)
        for start in range(0, len(chunks), _EMBED_BATCH):
            batch = chunks[start : start + _EMBED_BATCH]
            vectors[start : start + len(batch)] = embedder.embed([chunk_text(c) for c in batch])
            if progress:
                progress(start + len(batch), len(chunks))
        truncated, tokens = _truncation(chunks, embedder)
        db = lancedb.connect(str(path))
        schema = corpus.corpus_schema
        table = db.create_table(TABLE, chunk_rows(chunks, vectors, corpus.revision, identity.dims, schema))
        # Column positionally: LanceDB 0.40 misreads `column=` together with `config=`.
        table.create_index(VECTOR, config=ann_index_config(len(chunks)), name=VECTOR_INDEX)
        for name in IDENTITY_FIELDS:
            table.create_index(name, config=_scalar_index(None))
        for name, spec in schema.filterable().items():
            table.create_index(name, config=_scalar_index(spec.type))
        MatrixStore(path / EXACT_DIR, path / f"{TABLE}.lance" / "_versions").build(table)
        manifest = {
            "corpus_revision": corpus.revision,
            "embedder": identity.model_dump(mode="json"),
            "schema": schema_json(schema),
            "table": TABLE,
            # Text the model did not read, by document: chunk id -> tokens past its window.
            "text_tokens": tokens,
            "truncated": truncated,
            "ann_index": {
                "type": "IVF_FLAT",
                "distance": "cosine",
                "num_partitions": ann_partitions(len(chunks)),
                "nprobes": ann_nprobes(ann_partitions(len(chunks))),
                "trained_rows": len(chunks),
            },
        }
        (path / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1), encoding="utf-8")
        write_contracts(path, generate_contracts(cls.contracts(), schema))
        return cls.open(index_dir, embedder=embedder).generation()

    @classmethod
    def open(cls, index_dir: Path, *, embedder: Embedder | None = None) -> Self:
        path = index_dir / cls.backend
        manifest_path = path / MANIFEST
        if not manifest_path.exists() or not (path / f"{TABLE}.lance").is_dir():
            raise IndexMissingError("no LanceDB index here (run `race index`)", where=str(path))
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        embedder = embedder or MiniLMEmbedder()
        built_with = EmbedderIdentity.model_validate(manifest["embedder"])
        if embedder.identity != built_with:
            # Query vectors from other weights would be compared against these silently.
            raise IndexMissingError(
                f"the vectors were built with {built_with.name} ({built_with.weights_sha256}), but this "
                f"process embeds with {embedder.identity.name} ({embedder.identity.weights_sha256}); "
                "rebuild with `race index`",
                where=str(path),
            )
        adapter = cls(path, manifest, embedder)
        # The exact matrix of the latest version: loaded, or rebuilt if the table moved on.
        adapter._exact.build(adapter.snapshot().table)
        adapter.generated_contracts = read_contracts(path)
        adapter.corpus_schema = adapter._corpus_schema
        return adapter

    @property
    def identity(self) -> str:
        pin = self._pin
        if pin is not None:
            return f"lancedb:{pin.corpus_revision}"
        known = self._revision
        return f"lancedb:{known[1] if known is not None else self._manifest['corpus_revision']}"

    @property
    def embedder_identity(self) -> EmbedderIdentity:
        return self._embedder_identity

    def models(self) -> tuple[dict[str, str | int], ...]:
        return (dict(self._embedder_identity.model_dump(mode="json")),)

    # -- snapshots and generations ------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The pinned version, or else the latest one, held for as long as the handle is used."""
        pin = self._pin
        return pin if pin is not None else self._open_snapshot(None)

    def _open_snapshot(self, version: int | None) -> Snapshot:
        """Table ``version`` (the latest when ``None``) checked out, with its manifest digest.

        ``_versions/`` keeps its inode unless the table directory itself is replaced (a rebuild),
        so the same inode before and after says the handle, the digest and ``race.json`` all
        belong to one table.
        """
        versions_dir = str(self._versions_dir)
        for _ in range(_SNAPSHOT_TRIES):
            before = self._versions_inode()
            revision = self._corpus_revision()
            try:
                table = self._db.open_table(TABLE)
                if version is not None:
                    table.checkout(version)
            except (ValueError, FileNotFoundError) as exc:
                raise IndexMissingError(f"the LanceDB table is gone: {exc}", where=str(self._path)) from exc
            current = table.version
            digest = _manifest_digest(versions_dir, current)
            if self._versions_inode() == before:
                break
        else:
            raise BackendUnavailable("the LanceDB table kept being replaced while it was read", where=str(self._path))
        # A manifest never changes once written, so the counts of a version are read once.
        counts = self._counts.get(digest)
        if counts is None:
            rows = table.count_rows()
            stats = table.index_stats(VECTOR_INDEX)
            indexed = stats.num_indexed_rows if stats is not None else 0
            unindexed = stats.num_unindexed_rows if stats is not None else rows
            counts = self._counts[digest] = (rows, indexed, unindexed)
        rows, indexed, unindexed = counts
        return Snapshot(
            table=table,
            version=current,
            rows=rows,
            indexed_rows=indexed,
            unindexed_rows=unindexed,
            manifest=digest,
            corpus_revision=revision,
        )

    def _versions_inode(self) -> int:
        try:
            return os.stat(self._versions_dir).st_ino
        except FileNotFoundError as exc:
            raise IndexMissingError("the LanceDB table is gone", where=str(self._path)) from exc

    def _corpus_revision(self) -> str:
        """The corpus revision in ``race.json``, read again whenever the file was rewritten."""
        path = self._path / MANIFEST
        try:
            st = os.stat(path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            known = self._revision
            if known is not None and known[0] == stamp:
                return known[1]
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise IndexMissingError(f"unreadable {MANIFEST}: {exc}", where=str(self._path)) from exc
        if EmbedderIdentity.model_validate(manifest["embedder"]) != self._embedder_identity:
            raise IndexMissingError(
                "the table was rebuilt with another embedder; reopen the index", where=str(self._path)
            )
        revision = str(manifest["corpus_revision"])
        self._revision = (stamp, revision)
        return revision

    def _generation(self, snap: Snapshot) -> str:
        return (
            f"lancedb:v{snap.version}:manifest={snap.manifest}:indexed={snap.indexed_rows}"
            f":unindexed={snap.unindexed_rows}:embedder={self._embedder_fingerprint}"
        )

    def pinned(self, generation: str) -> Adapter:
        """The table checked out at the version ``generation`` names, if that version is still
        the snapshot ``generation`` names (a rebuilt table reuses version numbers)."""
        match = _VERSION_OF.match(generation)
        if match is None:
            return RefusedSnapshot(
                self, planned=generation, current=self._latest_or_unknown(), reason="names no table version"
            )
        try:
            snap = self._open_snapshot(int(match[1]))
        except (IndexMissingError, BackendUnavailable, ValueError, RuntimeError, OSError) as exc:
            reason = f"cannot be checked out ({type(exc).__name__}: {exc})"
            return RefusedSnapshot(self, planned=generation, current=self._latest_or_unknown(), reason=reason)
        found = self._generation(snap)
        if found != generation:
            reason = f"is gone: table version {snap.version} is now {found}"
            return RefusedSnapshot(self, planned=generation, current=self._latest_or_unknown(), reason=reason)
        held = copy.copy(self)
        held._pin = snap
        return held

    async def pin(self, generation: str) -> Adapter:
        # Opening and checking out a table is real I/O: off the event loop.
        return await blocking(self.pinned, generation)

    def _latest_or_unknown(self) -> str:
        try:
            return self.generation()
        except Exception:
            return UNKNOWN_GENERATION

    def generation(self) -> str:
        """Table version, rows inside/outside the ANN index, and the embedder's fingerprint.

        The generation read for version ``v`` still holds while both of these do:

        * no manifest of version ``v + 1`` exists. Every commit (rows, an index, a delete, an
          overwrite, a restore) creates exactly that file, put-if-not-exists, before the new
          version is visible: Lance numbers versions densely, each one the latest plus one.
        * ``_versions/`` has the (inode, mtime, ctime) it had before ``v`` was read. What
          changes the latest version without a commit (dropping and re-creating the table,
          removing versions) adds, removes or renames entries there, and so moves those.

        Commits are caught by the first check alone, which does not rely on timestamps. Two
        system calls, however many versions the table keeps; anything else reads afresh. A
        pinned adapter answers its pinned generation.
        """
        pin = self._pin
        if pin is not None:
            return self._generation(pin)
        versions_dir = str(self._versions_dir)
        try:
            st = os.stat(versions_dir)
        except FileNotFoundError as exc:
            raise IndexMissingError("the LanceDB table is gone", where=str(self._path)) from exc
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        # The memo is one immutable object, replaced whole, so reading it needs no lock.
        memo = self._generation_memo
        if (
            memo is not None
            and memo.versions_dir == stamp
            and memo.next_manifest is not None
            and not os.access(memo.next_manifest, os.F_OK)
        ):
            return memo.generation
        with self._generation_lock:
            snap = self.snapshot()
            generation = self._generation(snap)
            self._generation_memo = _GenerationMemo(generation, stamp, _next_manifest(versions_dir, snap.version))
            return generation

    def statistics(self) -> BackendStatistics:
        snap = self.snapshot()
        if self._stats is not None and self._stats[0] == snap.manifest:
            return self._stats[1]
        counted = [name for name, spec in self._corpus_schema.filterable().items() if spec.type in _COUNTED_TYPES]
        data = snap.table.search().select(counted).limit(None).to_arrow() if counted else None
        counts: dict[str, dict[str, int]] = {}
        for name in counted:
            assert data is not None
            column = data.column(name).drop_null()
            if pa.types.is_list(column.type):
                column = pa.compute.list_flatten(column)
            if len(column) == 0:
                continue
            pairs = column.value_counts().to_pylist()
            counts[name] = {str(p["values"]): int(p["counts"]) for p in sorted(pairs, key=lambda p: str(p["values"]))}
        stats = BackendStatistics(backend=self.backend, rows=snap.rows, value_counts=counts)
        self._stats = (snap.manifest, stats)
        return stats

    # -- scans --------------------------------------------------------------------------------

    async def scan(self, request: ScanRequest) -> ScanResult:
        return await blocking(self._scan, request)

    def native_plan(self, request: ScanRequest) -> str:
        """LanceDB's own physical plan for a request (shows whether the ANN index is used)."""
        snap = self.snapshot()
        vector = np.zeros(self._embedder_identity.dims, dtype=np.float32)
        vector[0] = 1.0
        native, _ = _split_filters(request)
        builder = vector_query(
            snap.table,
            request.mode,
            vector,
            filter_sql(native, self._corpus_schema),
            request.k,
            nprobes=self._nprobes,
            fast_search=_fast(request),
        )
        return str(builder.explain_plan(verbose=True))

    def _scan(self, request: ScanRequest) -> ScanResult:
        if request.mode not in (*MODES, MODE_EXACT):
            raise BackendUnavailable(f"lancedb has no mode {request.mode!r}", where=request.rsc_id)
        text = (request.query.text or "").strip()
        if not text:
            raise BackendUnavailable("a vector scan needs query text", where=request.rsc_id)
        native, after = _split_filters(request)
        where = filter_sql(native, self._corpus_schema)
        every = filter_sql((*request.pushed, *request.residual), self._corpus_schema)
        fast_search = _fast(request)
        snap = self.snapshot()
        generation = self._generation(snap)
        vector, embedded = self._query_vector(text)
        # Random access scores named rows exactly: a flat scan restricted by the identity
        # filter computes each row's distance as the sorted access does.
        mode = MODE_FLAT if _random(request) or request.mode == MODE_EXACT else request.mode
        # The exact matrix of this snapshot (built first if the table moved on) answers sorted
        # and random access alike; LanceDB's flat scan answers only where none can be built.
        exact = (
            self._exact.answer(snap.table, snap.version, vector, native, request.k, _CHUNK_COLUMNS)
            if request.mode == MODE_EXACT
            else None
        )
        try:
            if exact is not None:
                found = exact.rows
            else:
                query = vector_query(
                    snap.table,
                    mode,
                    vector,
                    where,
                    request.k,
                    nprobes=self._nprobes,
                    fast_search=fast_search,
                    columns=_CHUNK_COLUMNS,
                )
                found = query.to_arrow().to_pylist()
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendUnavailable(f"lancedb search failed: {exc}", where=request.rsc_id) from exc
        rows = sorted(found, key=lambda r: (float(r["_distance"]), str(r["chunk_id"])))
        if mode == MODE_ANN_POSTFILTER:
            late, candidates = native, min(request.k, snap.rows)
        else:
            late, candidates = after, len(rows)
            rows = [r for r in rows if all(f.matches(orjson.loads(r["metadata_json"])) for f in after)]
        hits = self._hits(request, rows, generation)
        matching = exact.total_matches if exact is not None and not after else None
        if matching is None and (late or len(hits) < request.k or mode == MODE_FLAT):
            # The exact scan reports the size of the fragment it searched; the ANN modes count
            # only for a short answer, to tell an exhausted set from a postfilter that lost rows.
            try:
                matching = snap.table.count_rows(every) if every is not None else snap.rows
            except (ValueError, RuntimeError, OSError) as exc:
                raise BackendUnavailable(f"lancedb count failed: {exc}", where=request.rsc_id) from exc
        gaps: list[Gap] = []
        if late and matching is not None and len(hits) < min(request.k, matching):
            gaps.append(
                self.gap(
                    request,
                    GapKind.POSTFILTER_ONLY_FILTER,
                    (
                        f"filter applied after the top-{request.k}: {len(hits)} of {candidates} candidates survived "
                        f"({'; '.join(f.describe() for f in late)}); {matching} rows in table version "
                        f"{snap.version} match the filters"
                    ),
                )
            )
        gaps += self._truncation_gaps(request, hits)
        if fast_search and mode != MODE_FLAT and snap.unindexed_rows > 0:
            gaps.append(
                self.gap(
                    request,
                    GapKind.UNINDEXED_ROWS_SKIPPED,
                    (
                        f"fast_search skipped {snap.unindexed_rows} of {snap.rows} rows that are not yet in the "
                        f"ANN index (table version {snap.version})"
                    ),
                )
            )
        return ScanResult(
            hits=hits,
            gaps=tuple(gaps),
            # A kept query vector costs no model call; the receipt counts the obligation's own.
            model_calls=int(embedded),
            generation=generation,
            total_matches=matching,
            exhausted=matching is not None and len(hits) >= matching and not gaps,
        )

    def calibrations(self) -> tuple[str, tuple[Calibration, ...]] | None:
        """The recall curves measured on this table (``race calibrate``) and their generation."""
        from backends.calibration import read_calibration

        return read_calibration(self._path)

    def _truncation_gaps(self, request: ScanRequest, hits: Sequence[Hit]) -> list[Gap]:
        """A ``truncated_text`` gap for every document among the hits with text past the model's
        window: this search could not see into that text (SPEC §7)."""
        gaps = []
        for doc in sorted({h.doc_id for h in hits} & set(self._truncated)):
            cut = self._truncated[doc]
            detail = ", ".join(f"{chunk}: {n} tokens" for chunk, n in sorted(cut.items()))
            gaps.append(
                self.gap(
                    request,
                    GapKind.TRUNCATED_TEXT,
                    f"document {doc}: {sum(cut.values())} tokens were never embedded ({detail}); "
                    f"the vector index cannot find what they say",
                )
            )
        return gaps

    def forget_query_vectors(self) -> None:
        """Drop the kept query vectors (benchmarks compare cold embedding against a peer)."""
        with self._vectors_lock:
            self._vectors.clear()

    def _query_vector(self, text: str) -> tuple[npt.NDArray[np.float32], bool]:
        """The query's embedding, computed once per text while it stays among the recent ones,
        and whether it was computed now. The embedder gives the same bits on every thread, so a
        kept vector is the one a new call would compute."""
        with self._vectors_lock:
            kept = self._vectors.get(text)
            if kept is not None:
                self._vectors.move_to_end(text)
                return kept, False
            # Concurrent legs with one query text wait for one embedding instead of each making one.
            pending = self._embedding.setdefault(text, threading.Lock())
        with pending:
            with self._vectors_lock:
                kept = self._vectors.get(text)
            if kept is not None:
                return kept, False
            vector: npt.NDArray[np.float32] = np.asarray(self._embedder.embed([text])[0], dtype=np.float32)
            vector.setflags(write=False)
            with self._vectors_lock:
                self._vectors[text] = vector
                self._embedding.pop(text, None)
                while len(self._vectors) > _QUERY_VECTORS:
                    self._vectors.popitem(last=False)
        return vector, True

    def _hits(self, request: ScanRequest, rows: list[dict[str, Any]], generation: str) -> tuple[Hit, ...]:
        chunks = []
        for row in rows:
            chunk = {name: row[name] for name in _CHUNK_COLUMNS if name != "metadata_json"}
            chunk["metadata"] = orjson.loads(row["metadata_json"])
            chunks.append((chunk, float(row["_distance"])))
        corpus_revision = str(rows[0]["corpus_revision"]) if rows else ""
        return tuple(
            custody_hits(
                request=request,
                contract_ref=f"{request.rsc_id}@{request.rsc_version}",
                rows=chunks,
                score_kind=ScoreKind.COSINE_DISTANCE,
                index_identity=self.identity,
                generation=generation,
                corpus_revision=corpus_revision,
            )
        )


def _truncation(chunks: Sequence[Chunk], embedder: Embedder) -> tuple[dict[str, dict[str, int]], int | None]:
    """Tokens of each chunk the model does not read (doc id -> chunk id -> tokens), counted
    with the model's own tokenizer; unknown (empty, ``None``) for another embedder."""
    counter = token_counter() if isinstance(embedder, MiniLMEmbedder) else None
    if counter is None:
        return {}, None
    out: dict[str, dict[str, int]] = {}
    total = 0
    for chunk in chunks:
        n = counter.count(chunk_text(chunk)) + counter.specials
        total += n
        if n > counter.max_tokens:
            out.setdefault(chunk.doc_id, {})[chunk.chunk_id] = n - counter.max_tokens
    return out, total


def _split_filters(request: ScanRequest) -> tuple[tuple[Filter, ...], tuple[Filter, ...]]:
    """(filters LanceDB applies, filters applied here to the rows LanceDB returned).

    The postfilter mode hands pushed and residual filters alike to LanceDB's own
    postfilter (``prefilter=False``); the prefilter modes push ``pushed`` before the
    top-k and can only apply ``residual`` filters to the k rows they got back.
    """
    if request.mode == MODE_ANN_POSTFILTER:
        return (*request.pushed, *request.residual), ()
    return request.pushed, request.residual


def _random(request: ScanRequest) -> bool:
    return request.params.get("access") == RANDOM_ACCESS


def _fast(request: ScanRequest) -> bool:
    """Whether the request opted into skipping unindexed rows (off by default)."""
    return request.params.get("fast_search") is True
