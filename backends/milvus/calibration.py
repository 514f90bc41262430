"""Measuring the recall of a Milvus collection's approximate contract on that collection, by the
calibration LanceDB's contracts use (``backends.lancedb.calibration``): the same seeded query
rows and filter values per selectivity bucket, the same held-out query row, the same float64
exact answer with ties at the k-th distance counted as found, and the same Wilson lower bound.
Only the native search differs: the collection's own ``MilvusAdapter.search``. The curves are
kept in ``<instance>/milvus/calibration.json`` with the generation they were measured at, and
the engine applies them only at that generation.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import orjson

from backends.lancedb.calibration import CALIBRATION_FILE, _bucket, _cases
from backends.milvus.expr import filter_expr
from rsc import CALIBRATION_SCHEMA_VERSION, Calibration, CoverageClaim, Filter, bucket_of

if TYPE_CHECKING:
    from backends.milvus.adapter import MilvusAdapter


def calibrate(adapter: MilvusAdapter, *, k: int = 10, seed: int = 7) -> tuple[Calibration, ...]:
    """Every approximate contract of ``adapter`` measured on its collection as it is now."""
    from backends.milvus.adapter import VECTOR

    contracts = [c for c in adapter.index_contracts() if c.coverage.claim is CoverageClaim.APPROXIMATE]
    rows_read = adapter.read_rows(("chunk_id", "metadata_json", VECTOR))
    rows = len(rows_read)
    if rows < 2 or not contracts:
        return ()
    ids = [str(r["chunk_id"]) for r in rows_read]
    filterable = set(adapter.filterable_fields())
    metas = [{f: v for f, v in orjson.loads(r["metadata_json"]).items() if f in filterable} for r in rows_read]
    vectors = np.asarray([r[VECTOR] for r in rows_read], dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1)
    unit = vectors / np.where(norms == 0.0, 1.0, norms)[:, None]
    cases = _cases(metas, rows, np.random.default_rng(seed))
    position = {cid: i for i, cid in enumerate(ids)}

    def recall_of(query_row: int, mask: npt.NDArray[np.bool_], flt: Filter | None) -> float | None:
        keep = mask.copy()
        keep[query_row] = False
        candidates = np.flatnonzero(keep)
        if candidates.size == 0:
            return None
        distances = 1.0 - unit[candidates] @ unit[query_row]
        want = min(k, candidates.size)
        kth = np.partition(distances, want - 1)[want - 1]
        expr = filter_expr((flt,), adapter.filterable_fields()) if flt is not None else None
        found = adapter.search(vectors[query_row].astype(np.float32), expr, want + 1)
        allowed = set(candidates.tolist())
        got = [position[str(row["chunk_id"])] for row, _ in found if position[str(row["chunk_id"])] in allowed][:want]
        exact = 1.0 - unit[got] @ unit[query_row] if got else np.zeros(0)
        return float(np.count_nonzero(exact <= kth + 1e-6)) / want

    out = []
    for contract in sorted(contracts, key=lambda c: c.rsc_id):
        everything = np.ones(rows, dtype=bool)
        unfiltered = [r for r in (recall_of(int(q), everything, None) for q in cases.unfiltered) if r is not None]
        by_bucket: dict[str, list[float]] = {}
        by_field: dict[str, dict[str, list[float]]] = {}
        for field, value, mask, queries in cases.filtered:
            label = bucket_of(float(mask.sum()) / rows)
            assert label is not None
            flt = Filter(field=field, value=value)
            for q in queries:
                r = recall_of(int(q), mask, flt)
                if r is not None:
                    by_bucket.setdefault(label, []).append(r)
                    by_field.setdefault(field, {}).setdefault(label, []).append(r)
        out.append(
            Calibration(
                rsc_id=contract.rsc_id,
                rsc_version=contract.version,
                k=k,
                seed=seed,
                rows=rows,
                unfiltered=_bucket("unfiltered", unfiltered),
                buckets=tuple(b for label, rs in sorted(by_bucket.items()) if (b := _bucket(label, rs))),
                fields={
                    f: tuple(b for label, rs in sorted(per.items()) if (b := _bucket(label, rs)))
                    for f, per in sorted(by_field.items())
                },
            )
        )
    return tuple(out)


def write_calibration(adapter: MilvusAdapter, folder: Path, *, k: int = 10, seed: int = 7) -> tuple[Calibration, ...]:
    """Measure and keep the curves beside the instance's manifest, with their generation."""
    generation = adapter.generation()
    calibrations = calibrate(adapter, k=k, seed=seed)
    document = {
        "schema_version": CALIBRATION_SCHEMA_VERSION,
        "generation": generation,
        "calibrations": [c.model_dump(mode="json") for c in calibrations],
    }
    target = folder / CALIBRATION_FILE
    partial = target.with_suffix(".json.partial")
    partial.write_bytes(orjson.dumps(document, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2))
    partial.replace(target)
    return calibrations
