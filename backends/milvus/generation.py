"""A Milvus collection's generation: its index and a digest over every row (ids, custody fields,
metadata and vector bytes), read now, and the value counts the cost model reads from the rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import orjson
from pymilvus import MilvusClient

from backends.ingest.schema import FieldSpec
from backends.milvus.client import _COUNTED_TYPES, _READ_BATCH, _ROW_FIELDS, CONSISTENCY, VECTOR, milvus_errors
from rsc import BackendUnavailable, fingerprint


def read_rows(
    client: MilvusClient, collection: str, fields: Sequence[str], timeout: float, consistency: str = CONSISTENCY
) -> list[dict[str, Any]]:
    """Every row's ``fields``, in chunk-id order, read at ``consistency``."""
    rows: list[dict[str, Any]] = []
    with milvus_errors(f"milvus:{collection}"):
        iterator = client.query_iterator(
            collection,
            batch_size=_READ_BATCH,
            output_fields=list(fields),
            consistency_level=consistency,
            timeout=timeout,
        )
        try:
            while batch := iterator.next():
                rows.extend(dict(r) for r in batch)
        finally:
            iterator.close()
    return sorted(rows, key=lambda r: str(r["chunk_id"]))


def current_generation(
    call: Callable[..., Any],
    client: MilvusClient,
    collection: str,
    uri: str,
    embedder_fingerprint: str,
    read: Callable[[Sequence[str]], list[dict[str, Any]]],
) -> tuple[str, list[dict[str, Any]]]:
    """The collection's generation read now, and the rows it was read from."""
    if not call(client.has_collection, collection):
        raise BackendUnavailable(f"milvus collection {collection!r} is gone", where=uri)
    index = call(client.describe_index, collection, VECTOR) or {}
    rows = read((*_ROW_FIELDS, VECTOR))
    digest = fingerprint(
        [
            [*(r.get(name) for name in _ROW_FIELDS), np.asarray(r[VECTOR], dtype=np.float32).tobytes().hex()]
            for r in rows
        ]
    )
    index_name = f"{index.get('index_type', 'none')}/{index.get('metric_type', 'none')}"
    generation = (
        f"milvus:{collection}:index={index_name}:rows={len(rows)}:content={digest}:embedder={embedder_fingerprint}"
    )
    return generation, rows


def value_counts(rows: Sequence[dict[str, Any]], fields: dict[str, FieldSpec]) -> dict[str, dict[str, int]]:
    """How many rows hold each value of each counted field, by the rows' ``metadata_json``."""
    counts: dict[str, dict[str, int]] = {}
    for name, spec in fields.items():
        if spec.type not in _COUNTED_TYPES:
            continue
        tally: dict[str, int] = {}
        for row in rows:
            value = orjson.loads(row["metadata_json"]).get(name)
            for item in value if isinstance(value, list) else [value]:
                if item is not None:
                    tally[str(item)] = tally.get(str(item), 0) + 1
        if tally:
            counts[name] = dict(sorted(tally.items()))
    return counts
