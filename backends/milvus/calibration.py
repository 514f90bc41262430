"""Measuring the recall of a Milvus collection's approximate contract on that collection, by the
calibration LanceDB's contracts use (``backends.lancedb.calibration``): the same seeded query
rows and filter values per selectivity bucket, the same held-out query row, the same float64
exact answer with ties at the k-th distance counted as found, and the same Wilson lower bound.
Only the native search differs: the collection's own ``MilvusAdapter.search``. The curves are
kept in ``<instance>/milvus/calibration.json`` with the generation they were measured at, and
the engine applies them only at that generation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from backends.calibration import measure, write_document
from backends.ingest.schema import FieldSpec
from backends.milvus.expr import filter_expr
from rsc import Calibration, Contract, CoverageClaim, Filter


class Searched(Protocol):
    """What calibration reads of a Milvus collection's adapter (``MilvusAdapter`` is one)."""

    def index_contracts(self) -> tuple[Contract, ...]: ...

    def read_rows(self, fields: Sequence[str]) -> list[dict[str, Any]]: ...

    def filterable_fields(self) -> Mapping[str, FieldSpec]: ...

    def search(
        self, vector: npt.NDArray[np.float32], expr: str | None, limit: int
    ) -> list[tuple[dict[str, Any], float]]: ...

    def generation(self) -> str: ...


def calibrate(adapter: Searched, *, k: int = 10, seed: int = 7) -> tuple[Calibration, ...]:
    """Every approximate contract of ``adapter`` measured on its collection as it is now."""
    from backends.milvus.client import VECTOR

    contracts = [c for c in adapter.index_contracts() if c.coverage.claim is CoverageClaim.APPROXIMATE]
    rows_read = adapter.read_rows(("chunk_id", "metadata_json", VECTOR))
    ids = [str(r["chunk_id"]) for r in rows_read]
    filterable = set(adapter.filterable_fields())
    metas = [{f: v for f, v in orjson.loads(r["metadata_json"]).items() if f in filterable} for r in rows_read]
    vectors = np.asarray([r[VECTOR] for r in rows_read], dtype=np.float64).reshape(len(ids), -1)

    def search(contract: Contract, query: npt.NDArray[np.float32], flt: Filter | None, n: int) -> list[str]:
        expr = filter_expr((flt,), adapter.filterable_fields()) if flt is not None else None
        return [str(row["chunk_id"]) for row, _ in adapter.search(query, expr, n)]

    return measure(contracts, ids=ids, metas=metas, vectors=vectors, search=search, k=k, seed=seed)


def write_calibration(adapter: Searched, folder: Path, *, k: int = 10, seed: int = 7) -> tuple[Calibration, ...]:
    """Measure and keep the curves beside the instance's manifest, with their generation."""
    generation = adapter.generation()
    calibrations = calibrate(adapter, k=k, seed=seed)
    write_document(folder, generation, calibrations)
    return calibrations
