"""Calibrating LanceDB's approximate contracts on the table they describe
(``backends.calibration``): each contract's native query is the very ``vector_query`` a scan
sends, in the contract's mode, with the filter as the scan would write it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import orjson

from backends.calibration import measure, read_calibration, write_document
from rsc import Calibration, Contract, CoverageClaim, Filter

if TYPE_CHECKING:
    from backends.lancedb.adapter import LanceAdapter

__all__ = ["calibrate", "read_calibration", "write_calibration"]


def calibrate(
    adapter: LanceAdapter, *, k: int = 10, seed: int = 7, disjoint_from: int | None = None
) -> tuple[Calibration, ...]:
    """Every approximate contract of ``adapter`` measured on its current table (with
    ``disjoint_from``, on queries the calibration of that seed did not ask)."""
    from backends.lancedb.build import ann_nprobes, ann_partitions
    from backends.lancedb.query import VECTOR, filter_sql, vector_query

    snap = adapter.snapshot()
    data = snap.table.search().select([VECTOR, "chunk_id", "metadata_json"]).limit(None).to_arrow()
    ids = [str(v) for v in data.column("chunk_id").to_pylist()]
    metas = [orjson.loads(m) for m in data.column("metadata_json").to_pylist()]
    schema = getattr(adapter, "_corpus_schema", None)
    if schema is not None:
        # Only the fields a plan may filter on: a field kept in custody only is in no contract.
        filterable = set(schema.filterable())
        metas = [{f: v for f, v in meta.items() if f in filterable} for meta in metas]
    nprobes = ann_nprobes(ann_partitions(len(ids)))

    def search(contract: Contract, query: npt.NDArray[np.float32], flt: Filter | None, n: int) -> list[str]:
        where = filter_sql([flt], schema) if flt is not None else None
        native = vector_query(snap.table, contract.mode, query, where, n, nprobes=nprobes, columns=["chunk_id"])
        return [str(c) for c in native.to_arrow().column("chunk_id").to_pylist()]

    contracts = [c for c in adapter.contracts() if c.coverage.claim is CoverageClaim.APPROXIMATE]
    vectors = np.asarray(data.column(VECTOR).to_pylist(), dtype=np.float64)
    return measure(
        contracts, ids=ids, metas=metas, vectors=vectors, search=search, k=k, seed=seed, disjoint_from=disjoint_from
    )


def write_calibration(adapter: LanceAdapter, path: Path, *, k: int = 10, seed: int = 7) -> tuple[Calibration, ...]:
    """Measure ``adapter``'s approximate contracts and keep the curves beside its table."""
    generation = adapter.generation()
    calibrations = calibrate(adapter, k=k, seed=seed)
    write_document(path, generation, calibrations)
    return calibrations
