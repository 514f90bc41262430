"""Building a Milvus collection: the chunks' vectors, the collection's schema and vector index,
its rows, and the ANN contract stating the recall measured on it."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pymilvus import DataType, MilvusClient

from backends.base import Progress
from backends.corpus import Chunk, Corpus
from backends.embedding import Embedder, EmbedderIdentity
from backends.generated import schema_json
from backends.lancedb.adapter import chunk_text
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
    MANIFEST,
    RECALL_K,
    VECTOR,
    milvus_errors,
)
from backends.schema import CorpusSchema, FieldType, datetime_micros
from rsc import BackendUnavailable, Contract, CoverageClaim, FilterSupportClass, IndexMissingError


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


def _collection_schema(client: MilvusClient, dims: int, corpus_schema: CorpusSchema) -> Any:
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
) -> None:
    """Create ``collection`` at ``resolved`` (replacing one of that name) with its vector index,
    insert the corpus's chunks with their ``vectors``, flush and load it."""
    chunks = corpus.chunks
    schema = corpus.corpus_schema
    with milvus_errors(resolved):
        client = MilvusClient(resolved, timeout=timeout)
        try:
            if client.has_collection(collection):
                client.drop_collection(collection)
            index_params = client.prepare_index_params()
            index_params.add_index(field_name=VECTOR, index_type=index_type, metric_type="COSINE", params=build_params)
            client.create_collection(
                collection,
                schema=_collection_schema(client, dims, schema),
                index_params=index_params,
                consistency_level=CONSISTENCY,
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
) -> dict[str, Any]:
    """The instance's manifest (where the collection is, what built it), written beside it."""
    manifest: dict[str, Any] = {
        "uri": uri,
        "collection": collection,
        "corpus_revision": corpus.revision,
        "embedder": identity.model_dump(mode="json"),
        "schema": schema_json(corpus.corpus_schema),
        "index": {"index_type": index_type, "metric_type": "COSINE", "params": params},
        "consistency_level": CONSISTENCY,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1), encoding="utf-8")
    return manifest
