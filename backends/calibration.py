"""Measuring the recall of a backend's approximate contracts on the index they describe.

Queries are sampled from the index itself (seeded): a sampled chunk's stored vector asks for
its nearest other chunks, so the query is real text of this corpus and its own row is held
out of both answers. For every filterable keyword field and value, the filter's selectivity
(rows it keeps / rows) places it in a bucket; the backend's own native search (a ``Search``
the adapter supplies) is compared with the exact filtered top-k computed in float64. A
returned row counts as found when its exact distance is within the k-th exact distance, so
ties at the boundary are not misses. Each bucket's mean recall gets a one-sided Wilson lower
bound with the number of queries as sample size (few queries, a loose promise), and so does
each filter value's mean: the bucket promises the lowest of them, since recall moves between
the filters of one bucket and a promise is for every filter in it. The curves are
kept in ``calibration.json`` beside the index, with the generation they were measured at.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from pydantic import ValidationError

from rsc import (
    CALIBRATION_SCHEMA_VERSION,
    Calibration,
    Contract,
    Filter,
    IndexMissingError,
    RecallBucket,
    bucket_of,
    first_validation_error,
)
from rsc.canonical import read_json

if TYPE_CHECKING:  # numpy is imported by a calibration, not by reading one (planning)
    import numpy as np
    import numpy.typing as npt

Search = Callable[[Contract, "npt.NDArray[np.float32]", Filter | None, int], Sequence[str]]
"""``search(contract, query, filter, n)``: the chunk ids of the contract's native answer, best first."""

CALIBRATION_FILE = "calibration.json"
_Z = 1.6448536269514722
"""One-sided 95 % normal quantile."""
QUERIES_PER_BUCKET = 16
QUERIES_UNFILTERED = 32
VALUES_PER_BUCKET = 2


def wilson_lower(mean: float, n: int, z: float = _Z) -> float:
    """The Wilson score lower bound of a proportion ``mean`` observed over ``n`` trials."""
    if n <= 0:
        return 0.0
    denominator = 1.0 + z * z / n
    centre = mean + z * z / (2 * n)
    spread = z * math.sqrt(mean * (1.0 - mean) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / denominator)


def measure(
    contracts: Sequence[Contract],
    *,
    ids: Sequence[str],
    metas: Sequence[dict[str, object]],
    vectors: npt.NDArray[np.float64],
    search: Search,
    k: int = 10,
    seed: int = 7,
    disjoint_from: int | None = None,
) -> tuple[Calibration, ...]:
    """Every contract's recall@k over the rows ``ids`` (their filterable ``metas`` and stored
    ``vectors``), per selectivity bucket and per field. With ``disjoint_from``, no query row
    is one the calibration of that seed asked with: fresh queries, to check its promise."""
    import numpy as np

    rows = len(ids)
    if rows < 2 or not contracts:
        return ()
    norms = np.linalg.norm(vectors, axis=1)
    unit = vectors / np.where(norms == 0.0, 1.0, norms)[:, None]
    exclude = query_rows(metas, rows, disjoint_from) if disjoint_from is not None else frozenset()
    cases = _cases(metas, rows, np.random.default_rng(seed), exclude)
    position = {cid: i for i, cid in enumerate(ids)}
    out = []
    for contract in sorted(contracts, key=lambda c: c.rsc_id):

        def recall_of(
            query_row: int, mask: npt.NDArray[np.bool_], flt: Filter | None, contract: Contract = contract
        ) -> float | None:
            keep = mask.copy()
            keep[query_row] = False
            candidates = np.flatnonzero(keep)
            if candidates.size == 0:
                return None
            distances = 1.0 - unit[candidates] @ unit[query_row]
            want = min(k, candidates.size)
            kth = np.partition(distances, want - 1)[want - 1]
            allowed = set(candidates.tolist())
            found = search(contract, vectors[query_row].astype(np.float32), flt, want + 1)
            got = [position[c] for c in found if c in position and position[c] in allowed][:want]
            exact = 1.0 - unit[got] @ unit[query_row] if got else np.zeros(0)
            return float(np.count_nonzero(exact <= kth + 1e-6)) / want

        everything = np.ones(rows, dtype=bool)
        unfiltered = [r for r in (recall_of(q, everything, None) for q in cases.unfiltered) if r is not None]
        # Recalls by filter value: a bucket's promise must hold for each filter in it.
        by_bucket: dict[str, list[list[float]]] = {}
        by_field: dict[str, dict[str, list[list[float]]]] = {}
        for name, value, mask, queries in cases.filtered:
            label = bucket_of(float(mask.sum()) / rows)
            assert label is not None
            flt = Filter(field=name, value=value)
            measured = [r for r in (recall_of(q, mask, flt) for q in queries) if r is not None]
            if measured:
                by_bucket.setdefault(label, []).append(measured)
                by_field.setdefault(name, {}).setdefault(label, []).append(measured)
        out.append(
            Calibration(
                rsc_id=contract.rsc_id,
                rsc_version=contract.version,
                k=k,
                seed=seed,
                rows=rows,
                unfiltered=_bucket("unfiltered", [unfiltered] if unfiltered else [], k),
                buckets=tuple(b for label, rs in sorted(by_bucket.items()) if (b := _bucket(label, rs, k))),
                fields={
                    f: tuple(b for label, rs in sorted(per.items()) if (b := _bucket(label, rs, k)))
                    for f, per in sorted(by_field.items())
                },
            )
        )
    return tuple(out)


def write_document(folder: Path, generation: str, calibrations: Sequence[Calibration]) -> None:
    """Keep the curves beside the index, with the generation they were measured at: a later
    generation (new rows, a retrained index) is not covered by them."""
    document = {
        "schema_version": CALIBRATION_SCHEMA_VERSION,
        "generation": generation,
        "calibrations": [c.model_dump(mode="json") for c in calibrations],
    }
    target = folder / CALIBRATION_FILE
    partial = target.with_suffix(".json.partial")
    partial.write_bytes(orjson.dumps(document, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2))
    partial.replace(target)


def read_calibration(folder: Path) -> tuple[str, tuple[Calibration, ...]] | None:
    """The generation a kept calibration was measured at and its curves; ``None`` if there is
    none. A calibration file that is there but cannot be read is a damaged index (bad input
    naming the file), never a reason to promise the shipped contract's figure instead."""
    path = folder / CALIBRATION_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise IndexMissingError(f"cannot read: {exc.strerror}", where=str(path)) from None
    document = read_json(data, where=str(path), error=IndexMissingError)
    redo = "; measure it again with `race calibrate` on the index directory"
    try:
        generation, curves = document["generation"], document["calibrations"]
        if not isinstance(generation, str) or not isinstance(curves, list):
            raise TypeError
        return generation, tuple(Calibration.model_validate(c) for c in curves)
    except (KeyError, TypeError):
        message = f"not a calibration document (generation, calibrations){redo}"
        raise IndexMissingError(message, where=str(path)) from None
    except ValidationError as exc:
        raise IndexMissingError(first_validation_error(exc) + redo, where=str(path)) from None


def _bucket(label: str, groups: Sequence[Sequence[float]], k: int) -> RecallBucket | None:
    """A bucket's mean over every query, and its promise: the lower of the bound of that mean
    and the lowest bound of any one filter value's queries (recall differs between the filters
    of one bucket — a postfilter's grows with the filter's own share — and the promise is for
    each of them).

    A mean recall@k over the bucket's n queries moves in steps of at least 1 / (k n). A bound
    below one step cannot be told from nothing by as many queries as measured it (a bucket
    whose one hit in 160 gave a bound of 0.0004 measured 0 on fresh queries in every training),
    so it promises nothing: 0."""
    import numpy as np

    recalls = [r for group in groups for r in group]
    if not recalls:
        return None
    mean = float(np.mean(recalls))
    bound = min(wilson_lower(mean, len(recalls)), *(wilson_lower(float(np.mean(g)), len(g)) for g in groups if g))
    if bound < 1.0 / (k * len(recalls)):
        bound = 0.0
    return RecallBucket(bucket=label, queries=len(recalls), mean_recall=round(mean, 6), lower_bound=round(bound, 6))


@dataclass
class _Cases:
    unfiltered: list[int] = field(default_factory=list)
    filtered: list[tuple[str, str, npt.NDArray[np.bool_], list[int]]] = field(default_factory=list)


def query_rows(metas: Sequence[dict[str, object]], rows: int, seed: int) -> frozenset[int]:
    """Every row the calibration seeded ``seed`` asks with."""
    import numpy as np

    cases = _cases(metas, rows, np.random.default_rng(seed), frozenset())
    return frozenset([*cases.unfiltered, *(q for *_, queries in cases.filtered for q in queries)])


def _cases(metas: Sequence[dict[str, object]], rows: int, rng: np.random.Generator, exclude: frozenset[int]) -> _Cases:
    """Seeded query rows: unfiltered ones, and per keyword field a few values per bucket, each
    with query rows drawn from the whole table but ``exclude`` (a query need not match its own
    filter)."""
    import numpy as np

    pool = np.setdiff1d(np.arange(rows), np.fromiter(exclude, dtype=np.int64)) if exclude else None

    def draw(n: int) -> list[int]:
        if pool is None:
            return [int(i) for i in rng.choice(rows, size=min(n, rows), replace=False)]
        return [int(i) for i in rng.choice(pool, size=min(n, len(pool)), replace=False)]

    cases = _Cases()
    cases.unfiltered = draw(QUERIES_UNFILTERED)
    values: dict[str, dict[str, list[int]]] = {}
    for row, meta in enumerate(metas):
        for name, value in meta.items():
            if isinstance(value, str) and name not in ("doc_id", "chunk_id"):
                values.setdefault(name, {}).setdefault(value, []).append(row)
    for name in sorted(values):
        per_bucket: dict[str, list[str]] = {}
        for value in sorted(values[name]):
            label = bucket_of(len(values[name][value]) / rows)
            # A value every row has is no filter: the unfiltered queries measure that.
            if label is not None and len(values[name][value]) < rows:
                per_bucket.setdefault(label, []).append(value)
        for label in sorted(per_bucket):
            chosen = sorted(rng.permutation(per_bucket[label])[:VALUES_PER_BUCKET].tolist())
            share = max(1, QUERIES_PER_BUCKET // len(chosen))
            for value in chosen:
                mask = np.zeros(rows, dtype=bool)
                mask[values[name][value]] = True
                queries = draw(share)
                cases.filtered.append((name, value, mask, queries))
    return cases
