"""The files of an exact matrix (``backends/lancedb/exact.py``), written at index time under
``exact/`` beside the LanceDB table.

A matrix holds every row of one table version: the vectors in ``chunk_id`` order (which is
the order of the evidence keys ``chunk:<chunk_id>``), or grouped by a clustering field first,
each row's float64 norm, the row's other columns (an Arrow file, for the custody of the hits),
the fields a filter may name dictionary-encoded (one code per row and field, the distinct
values in ``exact.json``), and copies of the vectors sorted by a field's code, so that a
filter on that field reads runs of rows (``selection.py``). It names the table version it
was built from and the digest of that version's manifest file.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import xxhash

from backends.lancedb.masks import F64, TypedKey, value_key

if TYPE_CHECKING:  # the table is read to write a matrix; serving one needs no LanceDB
    from lancedb.table import Table

SCHEMA_VERSION: Final = "race.exact/2"
META_FILE: Final = "exact.json"
MATRIX_FILE: Final = "matrix.npy"
NORMS_FILE: Final = "norms.npy"
ROWS_FILE: Final = "rows.arrow"
VECTOR_COLUMN: Final = "vector"
CODES_FILE: Final = "codes.npy"
MAX_COPIES: Final = 8
"""At most this many sorted copies of the matrix (one per field, each as large as the matrix)."""

BLOCK_ROWS: Final = 2048
"""Rows gathered per matrix-vector product: 3 MiB of 384-d float32, so a block is still in
cache when the product reads it back."""
U64_MAX: Final = 2**64 - 1


def row_norms(vectors: npt.NDArray[Any]) -> F64:
    """float64 norms, each row summed on its own (the squares of float32 values are exact)."""
    norms: F64 = np.empty(len(vectors), dtype=np.float64)
    for start in range(0, len(vectors), BLOCK_ROWS):
        wide = np.asarray(vectors[start : start + BLOCK_ROWS], dtype=np.float64)
        norms[start : start + len(wide)] = np.sqrt((wide * wide).sum(axis=1))
    return norms


def manifest_digest(versions_dir: Path, version: int) -> str | None:
    """xxh3_128 of the manifest file of ``version``; ``None`` if it is not there.

    Lance writes a version's manifest once and never changes it, and names the data files
    of every write afresh, so the digest tells one table's version ``v`` from another's.
    """
    for name in (f"{U64_MAX - version:020d}.manifest", f"{version}.manifest"):
        try:
            data = (versions_dir / name).read_bytes()
        except FileNotFoundError:
            continue
        return xxhash.xxh3_128_hexdigest(data)
    return None


def cluster_field(rows: Sequence[dict[str, Any]]) -> str | None:
    """The field the matrix rows are grouped by: the metadata field with the fewest distinct
    values (at least two) among those at least half the rows have, ties by name; ``None``
    (``chunk_id`` order) if there is none. Any filter on it selects one run of rows per value,
    scored in place; a range over it (values sorted as filters compare them) one run in all."""
    seen: dict[str, set[TypedKey]] = {}
    present: dict[str, int] = {}
    for row in rows:
        for name, value in row.items():
            if name not in ("chunk_id", "doc_id"):
                seen.setdefault(name, set()).add(value_key(value))
                present[name] = present.get(name, 0) + 1
    candidates = [(len(v), name) for name, v in seen.items() if len(v) >= 2 and present[name] * 2 >= len(rows)]
    return min(candidates)[1] if candidates else None


def sorted_file(index: int) -> str:
    """The file of the matrix copy sorted by the ``index``-th encoded field."""
    return f"sorted-{index}.npy"


def copy_fields(fields: Sequence[str], codes: npt.NDArray[np.int32]) -> list[str]:
    """The fields that get a copy of the matrix sorted by their code (``selection.py``): every
    field but ``chunk_id`` whose values are not already runs of rows in the matrix's order,
    those with the fewest distinct values (whose filters keep the most rows) first, ties by
    name, at most ``MAX_COPIES``."""
    wanted = []
    for i, name in enumerate(fields):
        if name == "chunk_id" or len(codes[i]) == 0:
            continue
        distinct = len(np.unique(codes[i]))
        if int(np.count_nonzero(np.diff(codes[i]))) + 1 > distinct:
            wanted.append((distinct, name))
    return [name for _, name in sorted(wanted)[:MAX_COPIES]]


GATHER_ROWS: Final = 16384
"""Rows copied at a time into a sorted copy: 24 MiB of 384-d float32."""


def _gather_vectors(
    batches: Iterable[pa.RecordBatch], chunk_ids: pa.ChunkedArray, order: Sequence[int], dims: int
) -> npt.NDArray[np.float32]:
    """The vectors of a scan of the table (batches of ``chunk_id`` and the vector column, in
    the row scan's order, ``chunk_ids``), as one float32 matrix in ``order``: each batch is read
    in place and its rows are put where ``order`` places them, so the table's vectors are never
    held whole beside the matrix. A null vector has no direction: it is kept as zeros and
    never scored. Refuses a scan whose rows are not the row scan's."""
    out = np.empty((len(order), dims), dtype=np.float32)
    place = np.empty(len(order), dtype=np.intp)
    place[np.asarray(order, dtype=np.intp)] = np.arange(len(order))
    at = 0
    for batch in batches:
        rows = batch.num_rows
        column = batch.column(VECTOR_COLUMN)
        if not pa.chunked_array([batch.column("chunk_id")]).equals(chunk_ids.slice(at, rows)):
            raise ValueError(f"the vector scan's rows {at}..{at + rows} are not the row scan's")
        if column.null_count == 0:
            block = np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
        else:
            block = np.array([[0.0] * dims if v is None else v for v in column.to_pylist()], dtype=np.float32)
        out[place[at : at + rows]] = block.reshape(rows, dims)
        at += rows
    if at != len(order):
        raise ValueError(f"the vector scan has {at} rows, the row scan {len(order)}")
    return out


def _write_sorted(path: Path, vectors: npt.NDArray[np.float32], permutation: npt.NDArray[np.intp]) -> None:
    """``vectors[permutation]`` as a ``.npy`` file (the bytes ``np.save`` writes), copied a block
    of rows at a time instead of through a whole temporary copy."""
    target = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=vectors.shape)
    for start in range(0, len(permutation), GATHER_ROWS):
        block = permutation[start : start + GATHER_ROWS]
        # mode="clip": the positions are in range, and "raise" would copy through a bounce buffer.
        np.take(vectors, block, axis=0, out=target[start : start + len(block)], mode="clip")
    target.flush()
    del target


def _cluster_key(row: dict[str, Any], field: str) -> tuple[int, TypedKey]:
    return (0, value_key(row[field])) if field in row else (1, (0, 0))


def write_matrix(table: Table, folder: Path, manifest: str) -> None:
    """Write the matrix of ``table``'s checked-out version into ``folder`` (which must not exist).

    Every field a pushed filter may name on a hit is encoded: each metadata key the rows
    have, ``doc_id`` and ``chunk_id``.

    The files go to a sibling temporary folder renamed into place once complete, so a reader
    never sees half a matrix. Refuses a table whose ``chunk_id`` values are not unique.
    """
    # The vectors are scanned apart, batch by batch: the table's whole vector column is never
    # held beside the matrix (at 1M rows each is 1.5 GB).
    columns = [name for name in table.schema.names if name != VECTOR_COLUMN]
    found = table.search().select(columns).limit(None).to_arrow()
    chunk_ids = [str(c) for c in found.column("chunk_id").to_pylist()]
    if len(set(chunk_ids)) != len(chunk_ids):
        raise ValueError("chunk_id values are not unique")
    doc_ids = found.column("doc_id").to_pylist()
    metadata = found.column("metadata_json").to_pylist()
    # What a pushed filter may name on a hit: its metadata and its own identity.
    by_row = [
        {**orjson.loads(metadata[p] or "{}"), "doc_id": doc_ids[p], "chunk_id": chunk_ids[p]}
        for p in range(len(chunk_ids))
    ]
    del doc_ids, metadata
    cluster = cluster_field(by_row)
    if cluster is None:
        order = sorted(range(len(chunk_ids)), key=chunk_ids.__getitem__)
    else:
        order = sorted(range(len(chunk_ids)), key=lambda p: (_cluster_key(by_row[p], cluster), chunk_ids[p]))
    take = pa.array(order, type=pa.int64())
    dims = int(table.schema.field(VECTOR_COLUMN).type.list_size)
    scan = table.search().select(["chunk_id", VECTOR_COLUMN]).limit(None).to_batches(GATHER_ROWS)
    vectors = _gather_vectors(scan, found.column("chunk_id"), order, dims)
    norms = row_norms(vectors)
    undirected = ~(np.isfinite(norms) & (norms > 0))
    # Never scored, and zeroed so that no NaN or infinity can enter a product.
    vectors[undirected] = 0.0
    norms[undirected] = 0.0
    rows = [by_row[p] for p in order]
    fields = sorted({name for row in rows for name in row})
    values: dict[str, dict[TypedKey, Any]] = {name: {} for name in fields}
    for row in rows:
        for name, value in row.items():
            values[name].setdefault(value_key(value), value)
    distinct = {name: [seen[key] for key in sorted(seen)] for name, seen in values.items()}
    codes = np.zeros((len(fields), len(order)), dtype=np.int32)
    for i, name in enumerate(fields):
        code_of = {key: c for c, key in enumerate(sorted(values[name]), start=1)}
        codes[i] = [code_of[value_key(row[name])] if name in row else 0 for row in rows]
    copies = copy_fields(fields, codes)
    meta = {
        "schema_version": SCHEMA_VERSION,
        "sorted": copies,
        "table_version": int(table.version),
        "manifest": manifest,
        "rows": len(order),
        "dims": dims,
        "cluster": cluster,
        "undirected_rows": int(undirected.sum()),
        "fields": list(fields),
        "values": distinct,
    }
    staging = folder.with_name(f".{folder.name}.{os.getpid()}.{threading.get_ident()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        np.save(staging / MATRIX_FILE, vectors)
        np.save(staging / NORMS_FILE, norms)
        with pa.OSFile(str(staging / ROWS_FILE), "wb") as sink, pa.ipc.new_file(sink, found.schema) as writer:
            # A block of rows at a time, in matrix order: never a whole reordered copy.
            for start in range(0, len(order), GATHER_ROWS):
                writer.write_table(found.take(take[start : start + GATHER_ROWS]))
        del found
        np.save(staging / CODES_FILE, codes)
        for name in copies:
            index = fields.index(name)
            _write_sorted(staging / sorted_file(index), vectors, np.argsort(codes[index], kind="stable"))
        (staging / META_FILE).write_text(json.dumps(meta, sort_keys=True), encoding="utf-8")
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
