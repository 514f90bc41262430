"""The exact vector path: a float32 matrix kept beside the LanceDB table, scored at the BLAS limit.

A matrix holds every row of one table version: the vectors in ``chunk_id`` order (which is
the order of the evidence keys ``chunk:<chunk_id>``), each row's float64 norm, the row's
other columns (an Arrow file, for the custody of the hits), and the fields a filter may name
dictionary-encoded (one code per row and field, the distinct values in ``exact.json``). It is
written at index time under ``exact/`` beside the table and memory-mapped at open.

A search resolves the hard filters to row positions from the codes, with the semantics of
``Filter.matches`` (a value matches an operand of its own type class only: booleans, numbers,
strings; a range needs both bounds' class), scores the selected rows with one float32
matrix-vector product, and settles the cut exactly: every row whose float32 score is within
the float32 error bound of the k-th is scored again in float64 from its float32 vector (the
products are exact there, the sum is per row and does not depend on the other rows asked
for), and the top-k is taken by that distance, rounded once to float32, ties broken by
``chunk_id``. The cosine distance is ``1 - x.q / (|x| |q|)``, what LanceDB's flat scan
computes in float32, here to float32 rounding. A row without a direction (zero, null or
non-finite vector) has no cosine distance: like LanceDB's flat scan, the search never ranks
it, though it counts among the rows that match the filter; a query without one is refused.

A matrix names the table version it was built from and the digest of that version's
manifest file. It is served only for that snapshot: for any other (a later write, a rebuilt
table that reuses the version number, a run pinned to an older version) the matrix of that
snapshot is built first, and only if that fails (an unwritable index directory, duplicate
chunk ids) does the adapter scan with LanceDB's flat scan instead.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import xxhash
from lancedb.table import Table

from rsc import BackendUnavailable, Filter, FilterOp

MODE_EXACT: Final = "vector_exact_matrix"
EXACT_DIR: Final = "exact"
SCHEMA_VERSION: Final = "race.exact/1"
_META: Final = "exact.json"
_MATRIX: Final = "matrix.npy"
_NORMS: Final = "norms.npy"
_ROWS: Final = "rows.arrow"
_VECTOR: Final = "vector"
_CODES: Final = "codes.npy"
_WHERE: Final = "lancedb.exact"

_BLOCK_ROWS: Final = 2048
"""Rows gathered per matrix-vector product: 3 MiB of 384-d float32, so a block is still in
cache when the product reads it back."""
_DENSE_SHARE: Final = 0.75
_SELECTIONS: Final = 64
"""Resolved filter combinations kept per matrix (row positions; at most 8 bytes a row each)."""
_MAX_RUNS: Final = 16
"""Up to this many runs of consecutive rows are scored in place, one product each."""
"""From this share of the rows on, one product over the whole matrix costs less than
gathering the selected rows first."""
_U64_MAX: Final = 2**64 - 1

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
TypedKey = tuple[int, Any]


def typed_key(value: Any) -> TypedKey:
    """A scalar as ``Filter.matches`` compares it: booleans, numbers and strings are three
    classes that never equal or order against each other."""
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, int | float):
        return (1, value)
    return (2, str(value))


def _scalar(value: Any) -> bool:
    return isinstance(value, bool | int | float | str)


def _value_key(value: Any) -> TypedKey:
    """Scalars by their typed key; any other value (a multi-valued keyword, ...) by its JSON,
    after every scalar."""
    return typed_key(value) if _scalar(value) else (3, orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode())


def margin(dims: int) -> float:
    """How far below the k-th float32 score a row can still belong to the exact top-k.

    A float32 dot product of ``dims`` terms errs by at most ``dims * 2**-24 * |x| |q|``
    (recursive summation; blocked and FMA kernels do better), the normalisation by a few
    more units; the k-th score itself is off by as much, and rounding the distance to float32
    moves it by one unit in the last place (2**-23 for distances in [1, 2)).
    """
    return 2.0 * (dims + 8) * 2.0**-24 + 2.0**-22


def row_norms(vectors: npt.NDArray[Any]) -> F64:
    """float64 norms, each row summed on its own (the squares of float32 values are exact)."""
    norms: F64 = np.empty(len(vectors), dtype=np.float64)
    for start in range(0, len(vectors), _BLOCK_ROWS):
        wide = np.asarray(vectors[start : start + _BLOCK_ROWS], dtype=np.float64)
        norms[start : start + len(wide)] = np.sqrt((wide * wide).sum(axis=1))
    return norms


def manifest_digest(versions_dir: Path, version: int) -> str | None:
    """xxh3_128 of the manifest file of ``version``; ``None`` if it is not there.

    Lance writes a version's manifest once and never changes it, and names the data files
    of every write afresh, so the digest tells one table's version ``v`` from another's.
    """
    for name in (f"{_U64_MAX - version:020d}.manifest", f"{version}.manifest"):
        try:
            data = (versions_dir / name).read_bytes()
        except FileNotFoundError:
            continue
        return xxhash.xxh3_128_hexdigest(data)
    return None


@dataclass(frozen=True)
class Column:
    """One filterable field, dictionary-encoded: code 0 is "field absent", code ``i + 1`` the
    ``i``-th distinct scalar in typed order, and the codes after those the field's other
    values (the value tuples of a multi-valued keyword), which ``Filter.matches`` itself
    judges one distinct value at a time."""

    field: str
    keys: tuple[TypedKey, ...]
    others: tuple[Any, ...]
    codes: npt.NDArray[np.int32]
    order: npt.NDArray[np.int64]
    """Row positions sorted by code, positions ascending within a code."""
    starts: npt.NDArray[np.int64]
    """``order[starts[c]:starts[c + 1]]`` are the rows of code ``c``."""
    lookup: dict[TypedKey, int]
    classes: dict[int, tuple[int, int]]
    """Per type class, the first and one-past-last code."""

    @classmethod
    def of(cls, field: str, values: Sequence[Any], codes: npt.NDArray[np.int32]) -> Column:
        keys = tuple(typed_key(v) for v in values if _scalar(v))
        others = tuple(tuple(v) if isinstance(v, list) else v for v in values if not _scalar(v))
        order = np.argsort(codes, kind="stable").astype(np.int64)
        starts = np.searchsorted(codes[order], np.arange(len(values) + 2), side="left").astype(np.int64)
        classes: dict[int, tuple[int, int]] = {}
        for code, key in enumerate(keys, start=1):
            first, _ = classes.get(key[0], (code, code))
            classes[key[0]] = (first, code + 1)
        lookup = {k: c for c, k in enumerate(keys, start=1)}
        return cls(field, keys, others, codes, order, starts, lookup, classes)

    def matching(self, flt: Filter) -> npt.NDArray[np.int64]:
        """The codes whose value passes ``flt``, ascending."""
        scalars = self._scalars(flt)
        if not self.others:
            return scalars
        first = len(self.keys) + 1
        others = [first + i for i, value in enumerate(self.others) if flt.matches({self.field: value})]
        return np.concatenate([scalars, np.asarray(others, dtype=np.int64)])

    def _scalars(self, flt: Filter) -> npt.NDArray[np.int64]:
        if flt.op is FilterOp.EQ:
            assert flt.value is not None
            found = self.lookup.get(typed_key(flt.value))
            return np.asarray([] if found is None else [found], dtype=np.int64)
        if flt.op is FilterOp.IN:
            codes = {self.lookup.get(typed_key(v)) for v in flt.values}
            return np.asarray(sorted(c for c in codes if c is not None), dtype=np.int64)
        bounds = [typed_key(b) for b in (flt.gte, flt.lte) if b is not None]
        if len({b[0] for b in bounds}) != 1 or any(isinstance(b[1], float) and math.isnan(b[1]) for b in bounds):
            # Both bounds must share the value's class; NaN orders against nothing.
            return np.asarray([], dtype=np.int64)
        first, end = self.classes.get(bounds[0][0], (1, 1))
        low, high = first, end
        if flt.gte is not None:
            low = bisect.bisect_left(self.keys, typed_key(flt.gte), first - 1, end - 1) + 1
        if flt.lte is not None:
            high = bisect.bisect_right(self.keys, typed_key(flt.lte), first - 1, end - 1) + 1
        return np.arange(low, max(low, high), dtype=np.int64)

    def count(self, codes: npt.NDArray[np.int64]) -> int:
        return int((self.starts[codes + 1] - self.starts[codes]).sum())

    def rows(self, codes: npt.NDArray[np.int64], total: int) -> I64:
        """The positions of the rows with one of ``codes`` (``total`` of them), ascending."""
        if len(codes) == 1:
            return self.order[self.starts[codes[0]] : self.starts[codes[0] + 1]]
        if total * 16 < len(self.codes) and codes[-1] - codes[0] + 1 == len(codes):
            # A short contiguous run of codes: one slice of the sorted order, sorted by position.
            return np.sort(self.order[self.starts[codes[0]] : self.starts[codes[-1] + 1]])
        return np.flatnonzero(self.admits(codes)[self.codes]).astype(np.int64)

    def admits(self, codes: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        table = np.zeros(len(self.keys) + len(self.others) + 1, dtype=np.bool_)
        table[codes] = True
        return table


def _filter_key(flt: Filter) -> Hashable:
    """A filter with each operand's type: ``Filter`` equality (and its JSON) has True == 1,
    which match different rows."""

    def typed(value: Any) -> Hashable:
        return (type(value).__name__, value)

    return (
        flt.field,
        flt.op.value,
        typed(flt.value),
        tuple(typed(v) for v in flt.values),
        typed(flt.gte),
        typed(flt.lte),
    )


@dataclass(frozen=True)
class Ranking:
    """An exact top-k: matrix row positions in rank order, their float32 cosine distances, and
    the number of rows that match the filters."""

    positions: I64
    distances: F32
    total_matches: int


class ExactMatrix:
    """One table version's vectors, norms, row ids and filter codes, read-only."""

    def __init__(self, folder: Path) -> None:
        meta = json.loads((folder / _META).read_text(encoding="utf-8"))
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{folder / _META}: schema_version is not {SCHEMA_VERSION}")
        self.folder = folder
        self.version = int(meta["table_version"])
        self.manifest = str(meta["manifest"])
        self.rows = int(meta["rows"])
        self.dims = int(meta["dims"])
        self.matrix: F32 = np.asarray(np.load(folder / _MATRIX, mmap_mode="r"))
        self.norms: F64 = np.load(folder / _NORMS)
        self.table = pa.ipc.open_file(pa.memory_map(str(folder / _ROWS))).read_all()
        codes = np.load(folder / _CODES)
        fields: list[str] = list(meta["fields"])
        if (
            self.matrix.shape != (self.rows, self.dims)
            or self.matrix.dtype != np.float32
            or self.norms.shape != (self.rows,)
            or self.table.num_rows != self.rows
            or codes.shape != (len(fields), self.rows)
        ):
            raise ValueError(f"{folder}: the matrix files do not agree with {_META}")
        if "chunk_id" not in fields:
            raise ValueError(f"{folder}: a matrix needs the chunk_id field")
        self.columns = {name: Column.of(name, meta["values"][name], codes[i]) for i, name in enumerate(fields)}
        self.cluster: str | None = meta.get("cluster")
        # chunk_id values are unique, so a row's chunk_id code is its rank in key order.
        self._rank = self.columns["chunk_id"].codes
        directed = np.isfinite(self.norms) & (self.norms > 0)
        self.undirected = int(self.rows - directed.sum())
        self._directed = directed
        with np.errstate(divide="ignore"):
            self._inverse: F32 = np.where(directed, 1.0 / self.norms, 0.0).astype(np.float32)
        self._margin = margin(self.dims)
        self._scratch = threading.local()
        self._selections: OrderedDict[tuple[Hashable, ...], tuple[I64, int]] = OrderedDict()
        self._selections_lock = threading.Lock()

    # -- filters ----------------------------------------------------------------------------

    def select(self, filters: Sequence[Filter]) -> tuple[I64 | None, int]:
        """(ascending positions of the rows passing every filter, or ``None`` for all; count).

        The answer depends on the filters and this (immutable) matrix only, so the last few
        are kept: a filter that many queries share is resolved once."""
        if not filters:
            return None, self.rows
        key = tuple(_filter_key(flt) for flt in filters)
        with self._selections_lock:
            found = self._selections.get(key)
            if found is not None:
                self._selections.move_to_end(key)
                return found
        found = self._select(filters)
        found[0].setflags(write=False)
        with self._selections_lock:
            self._selections[key] = found
            while len(self._selections) > _SELECTIONS:
                self._selections.popitem(last=False)
        return found

    def _select(self, filters: Sequence[Filter]) -> tuple[I64, int]:
        resolved = []
        for flt in filters:
            column = self.columns.get(flt.field)
            if column is None:
                # No row has the field, and a row without it matches no filter on it.
                return np.empty(0, dtype=np.int64), 0
            codes = column.matching(flt)
            resolved.append((column.count(codes), column, codes))
        # The narrowest filter lists the rows; each other one is a lookup per listed row.
        resolved.sort(key=lambda r: r[0])
        total, column, codes = resolved[0]
        if total == 0:
            return np.empty(0, dtype=np.int64), 0
        positions = column.rows(codes, total)
        for _, other, other_codes in resolved[1:]:
            if len(positions) == 0:
                break
            positions = positions[other.admits(other_codes)[other.codes[positions]]]
        return positions, len(positions)

    # -- scoring ----------------------------------------------------------------------------

    def search(self, query: npt.NDArray[Any], filters: Sequence[Filter], k: int) -> Ranking:
        q32 = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if q32.shape != (self.dims,):
            raise BackendUnavailable(f"a {q32.shape[0]}-d query against {self.dims}-d vectors", where=_WHERE)
        q64 = q32.astype(np.float64)
        q_norm = math.sqrt(float(q64 @ q64))
        if not (math.isfinite(q_norm) and q_norm > 0.0):
            raise BackendUnavailable("the query vector has no direction: cosine distance is undefined", where=_WHERE)
        positions, matching = self.select(filters)
        if self.undirected:
            positions = np.flatnonzero(self._directed) if positions is None else positions[self._directed[positions]]
        count = self.rows if positions is None else len(positions)
        if count == 0 or k < 1:
            return Ranking(np.empty(0, np.int64), np.empty(0, np.float32), matching)
        scores = self._scores(positions, (q32 / np.float32(q_norm)).astype(np.float32))
        if k < count:
            kth = np.partition(scores, count - k)[count - k]
            near = np.flatnonzero(scores >= kth - np.float32(self._margin))
        else:
            near = np.arange(count)
        rows = near if positions is None else positions[near]
        distances = self.distances(rows, q64, q_norm)
        order = np.lexsort((self._rank[rows], distances))[:k]
        return Ranking(rows[order].astype(np.int64), distances[order], matching)

    def distances(self, positions: I64, q64: F64, q_norm: float) -> F32:
        """Cosine distances of the rows at ``positions``, each from its own float64 dot product
        (the products of float32 values are exact in float64)."""
        # One dot per row (never a matrix product, whose blocking could depend on the row count).
        cosine: F64 = np.vecdot(self.matrix[positions].astype(np.float64), q64)
        cosine /= self.norms[positions] * q_norm
        distances: F32 = (1.0 - cosine).astype(np.float32)
        # 1 - cosine is at most 2 + 2**-52 (rounds to 2 in float32) but can dip below 0.
        np.maximum(distances, np.float32(0.0), out=distances)
        return distances

    def _scores(self, positions: I64 | None, unit: F32) -> F32:
        """float32 cosine of every selected row: one product over the whole matrix, over each
        run of consecutive rows (a filter on the clustering field selects one), or over blocks
        of the selected rows gathered into a per-thread buffer."""
        if positions is None or len(positions) >= _DENSE_SHARE * self.rows:
            everything: F32 = self.matrix @ unit
            everything *= self._inverse
            return everything if positions is None else everything[positions]
        first, last = int(positions[0]), int(positions[-1])
        if last - first + 1 == len(positions):
            run: F32 = self.matrix[first : last + 1] @ unit
            run *= self._inverse[first : last + 1]
            return run
        breaks = np.flatnonzero(np.diff(positions) != 1) + 1
        out = np.empty(len(positions), dtype=np.float32)
        if len(breaks) < _MAX_RUNS:
            for start, stop in zip((0, *breaks.tolist()), (*breaks.tolist(), len(positions)), strict=True):
                first = int(positions[start])
                np.matmul(self.matrix[first : first + stop - start], unit, out=out[start:stop])
            out *= self._inverse[positions]
            return out
        buffer = self._buffer()
        for start in range(0, len(positions), _BLOCK_ROWS):
            block = positions[start : start + _BLOCK_ROWS]
            rows = buffer[: len(block)]
            # mode="clip": positions are in range, and "raise" would copy through a bounce buffer.
            np.take(self.matrix, block, axis=0, out=rows, mode="clip")
            # One dot per row on this thread: a threaded BLAS call per block waits on the other
            # cores, which a busy machine makes cost more than the block's arithmetic.
            np.vecdot(rows, unit, out=out[start : start + len(block)])
        out *= self._inverse[positions]
        return out

    def _buffer(self) -> F32:
        buffer: F32 | None = getattr(self._scratch, "buffer", None)
        if buffer is None:
            buffer = self._scratch.buffer = np.empty((_BLOCK_ROWS, self.dims), dtype=np.float32)
        return buffer

    # -- rows -------------------------------------------------------------------------------

    def fetch(self, ranking: Ranking, columns: Sequence[str]) -> list[dict[str, Any]]:
        """The ranked rows' ``columns`` (as the table version holds them), in rank order, each
        with its ``_distance``."""
        if len(ranking.positions) == 0:
            return []
        found = self.table.select(list(columns)).take(pa.array(ranking.positions)).to_pylist()
        return [{**row, "_distance": d} for row, d in zip(found, ranking.distances.tolist(), strict=True)]


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
                seen.setdefault(name, set()).add(_value_key(value))
                present[name] = present.get(name, 0) + 1
    candidates = [(len(v), name) for name, v in seen.items() if len(v) >= 2 and present[name] * 2 >= len(rows)]
    return min(candidates)[1] if candidates else None


def _cluster_key(row: dict[str, Any], field: str) -> tuple[int, TypedKey]:
    return (0, _value_key(row[field])) if field in row else (1, (0, 0))


def write_matrix(table: Table, folder: Path, manifest: str) -> None:
    """Write the matrix of ``table``'s checked-out version into ``folder`` (which must not exist).

    Every field a pushed filter may name on a hit is encoded: each metadata key the rows
    have, ``doc_id`` and ``chunk_id``.

    The files go to a sibling temporary folder renamed into place once complete, so a reader
    never sees half a matrix. Refuses a table whose ``chunk_id`` values are not unique.
    """
    found = table.to_arrow()
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
    cluster = cluster_field(by_row)
    if cluster is None:
        order = sorted(range(len(chunk_ids)), key=chunk_ids.__getitem__)
    else:
        order = sorted(range(len(chunk_ids)), key=lambda p: (_cluster_key(by_row[p], cluster), chunk_ids[p]))
    take = pa.array(order, type=pa.int64())
    vectors_column = found.column(_VECTOR).combine_chunks().take(take)
    dims = int(vectors_column.type.list_size)
    if vectors_column.null_count == 0:
        flat = vectors_column.flatten().to_numpy(zero_copy_only=False)
        vectors = np.array(flat, dtype=np.float32).reshape(-1, dims)
    else:
        # A null vector has no direction; it is kept as zeros and never scored.
        listed = [[0.0] * dims if v is None else v for v in vectors_column.to_pylist()]
        vectors = np.array(listed, dtype=np.float32).reshape(-1, dims)
    norms = row_norms(vectors)
    undirected = ~(np.isfinite(norms) & (norms > 0))
    # Never scored, and zeroed so that no NaN or infinity can enter a product.
    vectors[undirected] = 0.0
    norms[undirected] = 0.0
    rows_table = found.drop_columns([_VECTOR]).take(take)
    rows = [by_row[p] for p in order]
    fields = sorted({name for row in rows for name in row})
    values: dict[str, dict[TypedKey, Any]] = {name: {} for name in fields}
    for row in rows:
        for name, value in row.items():
            values[name].setdefault(_value_key(value), value)
    distinct = {name: [seen[key] for key in sorted(seen)] for name, seen in values.items()}
    codes = np.zeros((len(fields), len(order)), dtype=np.int32)
    for i, name in enumerate(fields):
        code_of = {key: c for c, key in enumerate(sorted(values[name]), start=1)}
        codes[i] = [code_of[_value_key(row[name])] if name in row else 0 for row in rows]
    meta = {
        "schema_version": SCHEMA_VERSION,
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
        np.save(staging / _MATRIX, vectors)
        np.save(staging / _NORMS, norms)
        with pa.OSFile(str(staging / _ROWS), "wb") as sink, pa.ipc.new_file(sink, rows_table.schema) as writer:
            writer.write_table(rows_table)
        np.save(staging / _CODES, codes)
        (staging / _META).write_text(json.dumps(meta, sort_keys=True), encoding="utf-8")
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class MatrixStore:
    """The exact matrices of one LanceDB table: one folder per (version, manifest digest), and
    the one this process serves."""

    def __init__(self, folder: Path, versions_dir: Path) -> None:
        self._folder = folder
        self._versions_dir = versions_dir
        self._current: ExactMatrix | None = None
        self._lock = threading.Lock()
        self._digests: dict[tuple[int, int, int, int], str] = {}
        self.unavailable = "not opened"
        """Why no matrix is served, for explanation; empty while one is."""

    def _name(self, version: int, manifest: str) -> str:
        return f"v{version}-{manifest[:16]}"

    def _digest(self, version: int) -> str | None:
        # A manifest file is written once; its digest is kept by (version, inode, mtime, size).
        for name in (f"{_U64_MAX - version:020d}.manifest", f"{version}.manifest"):
            try:
                st = os.stat(self._versions_dir / name)
            except FileNotFoundError:
                continue
            stamp = (version, st.st_ino, st.st_mtime_ns, st.st_size)
            found = self._digests.get(stamp)
            if found is None:
                found = manifest_digest(self._versions_dir, version)
                if found is None:
                    return None
                self._digests[stamp] = found
            return found
        return None

    def build(self, table: Table) -> ExactMatrix | None:
        """Write (or find) and serve the matrix of ``table``'s checked-out version.

        A table that cannot have one (duplicate chunk ids, an unwritable index directory)
        leaves none served, and the reason in ``unavailable``.
        """
        with self._lock:
            version = int(table.version)
            manifest = self._digest(version)
            if manifest is None:
                self.unavailable = f"table version {version} has no manifest"
                return None
            folder = self._folder / self._name(version, manifest)
            current = self._current
            if current is not None and current.folder == folder:
                return current
            try:
                if not (folder / _META).exists():
                    self._folder.mkdir(parents=True, exist_ok=True)
                    try:
                        write_matrix(table, folder, manifest)
                    except OSError:
                        if not (folder / _META).exists():  # not another writer's matrix either
                            raise
                matrix = ExactMatrix(folder)
            except (OSError, ValueError, KeyError) as exc:
                self.unavailable = f"no matrix for table version {version}: {exc}"
                return None
            for old in self._folder.iterdir():
                if old.name != folder.name and not old.name.startswith("."):
                    shutil.rmtree(old, ignore_errors=True)
            self._current, self.unavailable = matrix, ""
            return matrix

    def serving(self, version: int) -> ExactMatrix | None:
        """The matrix of table ``version`` if it is the one kept, else ``None`` (never stale)."""
        matrix = self._current
        if matrix is None or matrix.version != version or self._digest(version) != matrix.manifest:
            return None
        return matrix

    def answer(
        self,
        table: Table,
        version: int,
        query: npt.NDArray[Any],
        filters: Sequence[Filter],
        k: int,
        columns: Sequence[str],
    ) -> ExactAnswer | None:
        """The exact top-k of ``table`` (checked out at ``version``) under ``filters``, its rows'
        ``columns`` in rank order; ``None`` if no matrix of that version can be had.

        A matrix of another version is never used: the one of ``version`` is built first (the
        first scan after a write pays for it), so that every engine answers one snapshot with
        the same bytes, whenever it opened the index."""
        matrix = self.serving(version)
        if matrix is None:
            matrix = self.build(table)
            if matrix is None or matrix.version != version:
                return None
        ranking = matrix.search(query, filters, k)
        try:
            rows = matrix.fetch(ranking, columns)
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendUnavailable(f"reading the ranked rows failed: {exc}", where=_WHERE) from exc
        return ExactAnswer(rows=rows, total_matches=ranking.total_matches)


@dataclass(frozen=True)
class ExactAnswer:
    rows: list[dict[str, Any]]
    """The ranked rows, each with its ``_distance``."""
    total_matches: int
    """Rows of the table version that pass the filters (rows without a direction included)."""
