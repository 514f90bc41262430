"""Calibrating an index's approximate contracts (docs/invariants.md#calibrated-approximation).

``race index`` calibrates the index it builds, and ``race calibrate DIR`` again after the
table changed (new rows, a retrained ANN index): each is a new generation, which a kept
calibration does not cover. Until then the approximate legs promise no recall.
"""

from __future__ import annotations

from pathlib import Path

from rsc import Calibration


def calibrate_index(index_dir: Path, *, k: int = 10, seed: int = 7) -> tuple[Calibration, ...]:
    """Measure every approximate contract of the index's vector table and keep the curves."""
    from backends.lancedb import LanceAdapter
    from backends.lancedb.calibration import write_calibration

    if not (index_dir / LanceAdapter.backend).is_dir():
        return ()
    adapter = LanceAdapter.open(index_dir)
    return write_calibration(adapter, index_dir / LanceAdapter.backend, k=k, seed=seed)


def calibration_table(calibrations: tuple[Calibration, ...]) -> str:
    """The curves as a short text table: contract, bucket, queries, mean and bound."""
    lines = ["contract                 bucket          queries  mean    bound"]
    for cal in calibrations:
        rows = [cal.unfiltered] if cal.unfiltered is not None else []
        for bucket in (*rows, *cal.buckets):
            lines.append(
                f"{cal.rsc_id:<24} {bucket.bucket:<15} {bucket.queries:>7}  "
                f"{bucket.mean_recall:.3f}   {bucket.lower_bound:.3f}"
            )
    return "\n".join(lines)
