"""Searching a Milvus collection: the search parameters of its index, Milvus's answer as
(row, cosine distance) with ties broken by chunk id, the conversion of rows into custody hits,
and the recall of the index measured against the exact float64 answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from backends.base import custody_hits
from backends.calibration import wilson_lower
from backends.ingest.corpus import Chunk
from backends.ingest.schema import FieldSpec, FieldType
from backends.milvus.client import _ROW_FIELDS, HNSW_MIN_EF, MAX_TOPK, RECALL_K, RECALL_QUERIES, TIE_MARGIN
from backends.milvus.expr import filter_expr
from rsc import Filter, Hit, ScanRequest, ScoreKind

Rows = list[tuple[dict[str, Any], float]]
Search = Callable[[npt.NDArray[np.float32], str | None, int], Rows]


def exact_top_k(
    vectors: npt.NDArray[np.float32], ids: Sequence[str], query: npt.NDArray[np.float32], k: int
) -> list[tuple[str, float]]:
    """The exact cosine top-k in float64, ties by id: the reference every approximate answer is
    measured against (and the FLAT contract is tested against)."""
    wide = vectors.astype(np.float64)
    q = query.astype(np.float64)
    norms = np.linalg.norm(wide, axis=1) * float(np.linalg.norm(q))
    sims = (wide @ q) / np.where(norms == 0.0, 1.0, norms)
    distances = 1.0 - sims
    order = sorted(range(len(ids)), key=lambda i: (float(distances[i]), ids[i]))
    return [(ids[i], float(distances[i])) for i in order[:k]]


def search_params(index_type: str, k: int) -> dict[str, Any]:
    if index_type == "HNSW":
        return {"metric_type": "COSINE", "params": {"ef": max(HNSW_MIN_EF, k)}}
    return {"metric_type": "COSINE"}


def answer_rows(answer: Any) -> Rows:
    """Milvus's search answer as (row, cosine distance) sorted by (distance, id)."""
    found = []
    for hit in answer[0]:
        entity = dict(hit["entity"])
        entity["chunk_id"] = hit["chunk_id"]
        found.append((entity, 1.0 - float(hit["distance"])))
    return sorted(found, key=lambda pair: (pair[1], str(pair[0]["chunk_id"])))


def top_k(search: Search, vector: npt.NDArray[np.float32], expr: str | None, k: int) -> Rows:
    """The top-k, reading past k until the row after the k-th is farther than it, so that which
    of several equally distant rows is kept is decided by chunk id."""
    limit = min(k + TIE_MARGIN, MAX_TOPK)
    while True:
        rows = search(vector, expr, limit)
        if len(rows) <= k or rows[-1][1] > rows[k - 1][1] or limit >= MAX_TOPK:
            return rows[:k]
        limit = min(limit * 2, MAX_TOPK)


def custody(request: ScanRequest, rows: Rows, generation: str, index_identity: str) -> tuple[Hit, ...]:
    """The rows as custody hits of ``request``, at ``generation``."""
    chunks = []
    for row, distance in rows:
        chunk = {name: row.get(name) for name in _ROW_FIELDS if name != "metadata_json"}
        chunk["metadata"] = orjson.loads(row["metadata_json"])
        chunks.append((chunk, distance))
    return tuple(
        custody_hits(
            request=request,
            contract_ref=f"{request.rsc_id}@{request.rsc_version}",
            rows=chunks,
            score_kind=ScoreKind.COSINE_DISTANCE,
            index_identity=index_identity,
            generation=generation,
            corpus_revision=str(rows[0][0]["corpus_revision"]) if rows else "",
        )
    )


def measure_recall(
    search: Search, fields: dict[str, FieldSpec], vectors: npt.NDArray[np.float32], chunks: Sequence[Chunk]
) -> tuple[float, str]:
    """``measure_recall_rows`` over a corpus's chunks."""
    return measure_recall_rows(search, fields, vectors, [c.chunk_id for c in chunks], [c.metadata for c in chunks])


def measure_recall_rows(
    search: Search,
    fields: dict[str, FieldSpec],
    vectors: npt.NDArray[np.float32],
    ids: Sequence[str],
    metas: Sequence[dict[str, Any]],
    *,
    key: str = "chunk_id",
) -> tuple[float, str]:
    """Mean recall@10 of ``search`` against the exact float64 answer, unfiltered and under each
    keyword field's most and least frequent value, over queries that are the normalized sums of
    two stored vectors (points the index does not hold). ``search`` answers rows whose ``key``
    is the id. Returns the lowest one-sided 95 % Wilson lower bound of a bucket's mean, and a note
    of every bucket's mean, bound and sample."""
    n = len(ids)
    buckets: list[tuple[str, Filter | None]] = [("unfiltered", None)]
    for name, spec in fields.items():
        if spec.type is not FieldType.KEYWORD:
            continue
        tally: dict[str, int] = {}
        for meta in metas:
            value = meta.get(name)
            if isinstance(value, str):
                tally[value] = tally.get(value, 0) + 1
        if not tally:
            continue
        ranked = sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))
        for value, _ in {ranked[0][0]: 0, ranked[-1][0]: 0}.items():
            buckets.append((f"{name}={value}", Filter(field=name, value=value)))
    means: list[tuple[str, float, int]] = []
    for label, flt in buckets:
        keep = [i for i, meta in enumerate(metas) if flt is None or flt.matches(meta)]
        if not keep:
            continue
        expr = filter_expr((flt,), fields) if flt is not None else None
        recalls = []
        for q in range(min(RECALL_QUERIES, n)):
            a, b = (q * 7919) % n, (q * 104_729 + 1) % n
            query = vectors[a] + vectors[b]
            query = (query / max(float(np.linalg.norm(query)), 1e-12)).astype(np.float32)
            exact = {cid for cid, _ in exact_top_k(vectors[keep], [ids[i] for i in keep], query, RECALL_K)}
            found = {str(row[key]) for row, _ in search(query, expr, RECALL_K)}
            recalls.append(len(exact & found) / len(exact))
        means.append((label, float(np.mean(recalls)), len(recalls)))
    lowest = min(wilson_lower(mean, size) for _, mean, size in means)
    note = "; ".join(
        f"{label} mean {mean:.3f}, bound {wilson_lower(mean, size):.3f} ({size} queries)" for label, mean, size in means
    )
    return lowest, note
