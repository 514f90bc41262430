"""Building a Milvus collection: the chunks' vectors, the collection's schema and vector index,
its rows, and the ANN contract stating the recall measured on it."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from pymilvus import DataType, MilvusClient

from backends.base import Progress
from backends.generated import schema_json, write_contracts
from backends.ingest.corpus import Chunk, Corpus
from backends.ingest.schema import CorpusSchema, FieldType, datetime_micros
from backends.lancedb.adapter import chunk_text
from backends.milvus.calibration import Searched, write_calibration
from backends.milvus.client import (
    _EMBED_BATCH,
    _INSERT_BATCH,
    _INT_FIELDS,
    _METADATA_TYPES,
    _NULLABLE_INT_FIELDS,
    _TEXT_FIELDS,
    _VARCHAR_MAX,
    CONSISTENCY,
    HNSW_BUILD,
    HNSW_MIN_EF,
    INDEX_TYPES,
    LITE_FILE,
    MANIFEST,
    RECALL_K,
    VECTOR,
    connect,
    milvus_errors,
    resolve_uri,
)
from backends.milvus.consistency import Consistency, level_of, with_consistency
from backends.models.embedding import Embedder, EmbedderIdentity, MiniLMEmbedder
from rsc import BackendUnavailable, Contract, CoverageClaim, FilterSupportClass, IndexMissingError, InputError


class Built(Searched, Protocol):
    """What a build reads and sets of the adapter over the collection it loaded (``MilvusAdapter``)."""

    generated_contracts: tuple[Contract, ...] | None

    @property
    def folder(self) -> Path: ...

    @property
    def collection(self) -> str: ...

    @property
    def index_type(self) -> str: ...

    @property
    def consistency(self) -> Consistency: ...

    def measure_recall(self, vectors: npt.NDArray[np.float32], chunks: Sequence[Chunk]) -> tuple[float, str]: ...

    def close(self) -> None: ...


class BuiltClass(Protocol):
    """The adapter class a build opens over its collection (``MilvusAdapter``)."""

    backend: str

    def __call__(self, folder: Path, manifest: dict[str, Any], embedder: Embedder, *, timeout: float) -> Built: ...


PARTITION_KEY_TYPES = frozenset({FieldType.KEYWORD, FieldType.INTEGER})
"""Schema types a partition key may have (Milvus: VARCHAR or INT64, never nullable)."""


def embed_chunks(
    chunks: Sequence[Chunk], embedder: Embedder, progress: Progress | None = None
) -> npt.NDArray[np.float32]:
    """The vectors LanceDB's build stores for these chunks: ``chunk_text`` of each, embedded in
    batches by the same embedder, so both backends compare the same vectors."""
    vectors = np.empty((len(chunks), embedder.identity.dims), dtype=np.float32)
    for start in range(0, len(chunks), _EMBED_BATCH):
        batch = chunks[start : start + _EMBED_BATCH]
        vectors[start : start + len(batch)] = embedder.embed([chunk_text(c) for c in batch])
        if progress:
            progress(start + len(batch), len(chunks))
    return vectors


def lance_vectors(index_dir: Path, corpus: Corpus) -> npt.NDArray[np.float32]:
    """The vectors the LanceDB index in ``index_dir`` stores for the corpus's chunks, in chunk
    order: a collection loaded from them compares exactly the vectors LanceDB compares. The index
    must have been built from this very corpus revision."""
    from backends.lancedb.adapter import LanceAdapter

    chunks = corpus.chunks
    lance = LanceAdapter.open(index_dir)
    if lance.identity != f"lancedb:{corpus.revision}":
        raise IndexMissingError(
            f"the LanceDB index is of another corpus revision ({lance.identity}, not {corpus.revision})",
            where=str(index_dir),
        )
    table = lance.snapshot().table.search().select(["chunk_id", VECTOR]).limit(None).to_arrow()
    by_id = dict(zip(table.column("chunk_id").to_pylist(), table.column(VECTOR).to_pylist(), strict=True))
    missing = [c.chunk_id for c in chunks if c.chunk_id not in by_id]
    if missing:
        raise IndexMissingError(
            f"the LanceDB index lacks {len(missing)} chunks, e.g. {missing[0]}", where=str(index_dir)
        )
    return np.asarray([by_id[c.chunk_id] for c in chunks], dtype=np.float32)


def check_partition_key(corpus: Corpus, name: str | None) -> None:
    """A partition key is a keyword or integer field every chunk holds (Milvus keys are never null)."""
    if name is None:
        return
    spec = corpus.corpus_schema.filterable().get(name)
    if spec is None or spec.type not in PARTITION_KEY_TYPES:
        raise InputError(
            f"partition key {name!r} is not a keyword or integer field of the corpus schema", where="--partition-key"
        )
    lacking = [c.chunk_id for c in corpus.chunks if c.metadata.get(name) is None]
    if lacking:
        raise InputError(
            f"partition key {name!r}: {len(lacking)} chunks have no value (first {lacking[0]}); Milvus keys are "
            "never null",
            where="--partition-key",
        )


def _collection_schema(
    client: MilvusClient, dims: int, corpus_schema: CorpusSchema, partition_key: str | None = None
) -> Any:
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("chunk_id", DataType.VARCHAR, is_primary=True, max_length=_VARCHAR_MAX)
    for name in _TEXT_FIELDS:
        schema.add_field(name, DataType.VARCHAR, max_length=_VARCHAR_MAX)
    for name in _INT_FIELDS:
        schema.add_field(name, DataType.INT64)
    for name in _NULLABLE_INT_FIELDS:
        schema.add_field(name, DataType.INT64, nullable=True)
    for name, spec in corpus_schema.filterable().items():
        if spec.type is FieldType.KEYWORDS:
            schema.add_field(
                name,
                DataType.ARRAY,
                element_type=DataType.VARCHAR,
                max_capacity=4096,
                max_length=_VARCHAR_MAX,
                nullable=True,
            )
        elif name == partition_key:
            extra = {"max_length": _VARCHAR_MAX} if spec.type is FieldType.KEYWORD else {}
            schema.add_field(name, _METADATA_TYPES[spec.type], is_partition_key=True, **extra)
        elif _METADATA_TYPES[spec.type] is DataType.VARCHAR:
            schema.add_field(name, DataType.VARCHAR, max_length=_VARCHAR_MAX, nullable=True)
        else:
            schema.add_field(name, _METADATA_TYPES[spec.type], nullable=True)
    schema.add_field(VECTOR, DataType.FLOAT_VECTOR, dim=dims)
    return schema


def _index_build_params(index_type: str, rows: int) -> dict[str, int]:
    if index_type == "HNSW":
        return dict(HNSW_BUILD)
    return {}


def _row(chunk: Chunk, vector: npt.NDArray[np.float32], revision: str, corpus_schema: CorpusSchema) -> dict[str, Any]:
    row: dict[str, Any] = {name: getattr(chunk, name) for name in ("chunk_id", *_INT_FIELDS, *_NULLABLE_INT_FIELDS)}
    for name in _TEXT_FIELDS:
        if name == "corpus_revision":
            row[name] = revision
        elif name == "metadata_json":
            row[name] = json.dumps(chunk.metadata, sort_keys=True)
        else:
            row[name] = str(getattr(chunk, name) or "")
        if len(row[name].encode("utf-8")) > _VARCHAR_MAX:
            raise BackendUnavailable(
                f"chunk {chunk.chunk_id}: {name} is longer than Milvus's {_VARCHAR_MAX}-byte VARCHAR", where="milvus"
            )
    for name, spec in corpus_schema.filterable().items():
        value = chunk.metadata.get(name)
        if value is not None and spec.type is FieldType.DATETIME:
            value = datetime_micros(str(value))
        row[name] = list(value) if isinstance(value, tuple | list) else value
    row[VECTOR] = np.asarray(vector, dtype=np.float32).tolist()
    return row


def load_collection(
    resolved: str,
    collection: str,
    corpus: Corpus,
    vectors: npt.NDArray[np.float32],
    dims: int,
    index_type: str,
    build_params: dict[str, int],
    timeout: float,
    *,
    consistency: str = CONSISTENCY,
    partition_key: str | None = None,
) -> None:
    """Create ``collection`` at ``resolved`` (replacing one of that name) with its vector index,
    insert the corpus's chunks with their ``vectors``, flush and load it."""
    chunks = corpus.chunks
    schema = corpus.corpus_schema
    with milvus_errors(resolved):
        client = connect(resolved, timeout=timeout)
        try:
            if client.has_collection(collection):
                client.drop_collection(collection)
            index_params = client.prepare_index_params()
            index_params.add_index(field_name=VECTOR, index_type=index_type, metric_type="COSINE", params=build_params)
            client.create_collection(
                collection,
                schema=_collection_schema(client, dims, schema, partition_key),
                index_params=index_params,
                consistency_level=consistency,
            )
            for start in range(0, len(chunks), _INSERT_BATCH):
                client.insert(
                    collection,
                    [
                        _row(chunk, vectors[start + i], corpus.revision, schema)
                        for i, chunk in enumerate(chunks[start : start + _INSERT_BATCH])
                    ],
                )
            # Flushed rows are sealed into segments that carry the vector index.
            client.flush(collection)
            client.load_collection(collection)
        finally:
            client.close()


def _with_recall(contract: Contract, recall: float, note: str, index_type: str, params: dict[str, int]) -> Contract:
    """The ANN contract stating the recall bound measured on its collection, rounded down to 0.01."""
    stated = math.floor(recall * 100) / 100
    if stated <= 0.0:
        raise BackendUnavailable(
            f"the {index_type} index measured a recall bound of {recall:.3f} ({note}): too low to serve", where="milvus"
        )
    knobs = ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
    search = f"ef=max({HNSW_MIN_EF}, k)"
    profile = (
        f"milvus {index_type} cosine ({knobs}), search {search}, filter expression evaluated inside the index "
        f"search; recall@{RECALL_K} measured at build against the exact float64 answer"
    )
    filters = {
        name: support.model_copy(update={"profile": profile, "recall": stated})
        if support.support is FilterSupportClass.NATIVE_FILTERED_ANN
        else support
        for name, support in contract.filters.items()
    }
    description = (
        f"Approximate cosine top-k through the collection's {index_type} index with the boolean filter expression "
        f"applied inside the index search. Recall {stated} is the lowest one-sided 95 % lower bound of a "
        f"bucket's mean recall@{RECALL_K}, measured on this collection at build, by bucket: {note}; rounded down. "
        f"Read at consistency level {CONSISTENCY}."
    )
    return contract.model_copy(
        update={
            "coverage": contract.coverage.model_copy(update={"claim": CoverageClaim.APPROXIMATE, "recall": stated}),
            "filters": filters,
            "description": description,
        }
    )


def write_manifest(
    folder: Path,
    uri: str,
    collection: str,
    corpus: Corpus,
    identity: EmbedderIdentity,
    index_type: str,
    params: dict[str, int],
    *,
    consistency: str = CONSISTENCY,
    partition_key: str | None = None,
) -> dict[str, Any]:
    """The instance's manifest (where the collection is, what built it), written beside it."""
    manifest: dict[str, Any] = {
        "uri": uri,
        "collection": collection,
        "corpus_revision": corpus.revision,
        "embedder": identity.model_dump(mode="json"),
        "schema": schema_json(corpus.corpus_schema),
        "index": {"index_type": index_type, "metric_type": "COSINE", "params": params},
        "consistency_level": consistency,
    }
    if partition_key is not None:
        manifest["partition_key"] = partition_key
    (folder / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1), encoding="utf-8")
    return manifest


def write_built_contract(
    adapter: Built,
    vectors: npt.NDArray[np.float32],
    chunks: Sequence[Chunk],
    build_params: dict[str, int],
    stored_uri: str,
) -> None:
    """The instance's contract, generated from its collection: FLAT's as shipped, an ANN index's
    with the recall measured on it now (and its calibration curves), at its consistency level."""
    index_type = adapter.index_type
    contract = adapter.index_contracts()[0]
    if index_type != "FLAT":
        recall, note = adapter.measure_recall(vectors, chunks)
        contract = _with_recall(contract, recall, note, index_type, build_params)
    contract = with_consistency(contract, adapter.consistency).model_copy(
        update={"source_domain": f"{contract.source_domain}; collection {adapter.collection!r} at {stored_uri}"}
    )
    write_contracts(adapter.folder, (contract,))
    if index_type != "FLAT":
        adapter.generated_contracts = (contract,)
        write_calibration(adapter, adapter.folder)


def build_instance(
    cls: BuiltClass,
    corpus: Corpus,
    index_dir: Path,
    progress: Progress | None,
    embedder: Embedder | None,
    uri: str | None,
    collection: str,
    index_type: str,
    timeout: float,
    vectors: npt.NDArray[np.float32] | None,
    *,
    consistency: str,
    partition_key: str | None,
) -> str:
    """``MilvusAdapter.build``: load the collection, write the manifest and the contract."""
    if index_type not in INDEX_TYPES:
        raise BackendUnavailable(f"milvus index type {index_type!r} is not one of {INDEX_TYPES}", where="milvus")
    level = level_of(consistency, where="consistency")
    check_partition_key(corpus, partition_key)
    embedder = embedder or MiniLMEmbedder()
    identity = embedder.identity
    folder = index_dir / cls.backend
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    stored_uri = uri if uri is not None else LITE_FILE
    resolved = resolve_uri(folder, stored_uri)
    chunks = corpus.chunks
    if vectors is None:
        vectors = embed_chunks(chunks, embedder, progress)
    elif vectors.shape != (len(chunks), identity.dims):
        raise BackendUnavailable(
            f"{vectors.shape} vectors given for {len(chunks)} chunks of {identity.dims} dims", where="milvus"
        )
    build_params = _index_build_params(index_type, len(chunks))
    key = partition_key
    load_collection(
        resolved, collection, corpus, vectors, identity.dims, index_type, build_params, timeout, consistency=level,
        partition_key=key,
    )  # fmt: skip
    manifest = write_manifest(
        folder, stored_uri, collection, corpus, identity, index_type, build_params, consistency=level, partition_key=key
    )
    adapter = cls(folder, manifest, embedder, timeout=timeout)
    try:
        write_built_contract(adapter, vectors, chunks, build_params, stored_uri)
        return adapter.generation()
    finally:
        adapter.close()


def with_partition_key(contract: Contract, name: str | None) -> Contract:
    """``contract`` stating the collection's partition key: an ``eq``/``in`` filter on it is part of
    the search expression, which Milvus prunes to the partitions of its values before searching.
    The answer is the expression's either way; on FLAT the field stays ``native_prefilter_exact``."""
    if name is None or name not in contract.filters:
        return contract
    said = (
        f" Partition key {name!r}: an eq/in filter on it is pushed into the search expression, which searches only "
        "the partitions its values hash to."
    )
    return contract.model_copy(update={"description": contract.description + said})
