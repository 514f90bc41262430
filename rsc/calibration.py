"""Calibrated approximation (docs/invariants.md#calibrated-approximation): the recall an
approximate contract promises, measured on the index it describes, per filter-selectivity bucket
and per filterable field.

A ``Calibration`` is measured (``race calibrate``, or at index time) by running the
contract's own search for sampled queries and comparing with the exact top-k. What a
contract states for a request is the *lower confidence bound* of the request's bucket, never
a point estimate; a bucket nobody measured promises nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import Field

from rsc.canonical import CanonicalFloat, fingerprint
from rsc.records import ExpectedRecall, Record

CALIBRATION_SCHEMA_VERSION = "race.calibration/1"

BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("<0.1%", 0.0, 0.001),
    ("0.1-1%", 0.001, 0.01),
    ("1-10%", 0.01, 0.1),
    ("10-50%", 0.1, 0.5),
    (">50%", 0.5, 1.0),
)
"""Selectivity buckets (fraction of rows a filter keeps): lower bound inclusive, upper
exclusive, except that the last one holds 1.0 (no filter at all is its own bucket)."""
UNFILTERED = "unfiltered"
UNCALIBRATED = "none"
"""The ``calibration`` of an expected recall that no calibration of the index stands behind."""


def bucket_of(selectivity: float | None) -> str | None:
    """The bucket a request with this selectivity falls in (``None`` when it is not known)."""
    if selectivity is None:
        return None
    for label, low, high in BUCKETS:
        if low <= selectivity < high or (high == 1.0 and selectivity >= 1.0):
            return label
    return BUCKETS[0][0]


class RecallBucket(Record):
    """Recall@k measured over ``queries`` sampled queries whose filter fell in this bucket."""

    bucket: str
    """The selectivity bucket (``unfiltered``, ``<0.1%``, ``0.1-1%``, ``1-10%``, ``10-50%``, ``>50%``) or a field
    value's label."""
    queries: Annotated[int, Field(ge=1)]
    """How many sampled queries fell in the bucket."""
    mean_recall: CanonicalFloat
    """The mean recall@k over them."""
    lower_bound: CanonicalFloat
    """One-sided lower confidence bound of the mean recall (seeded bootstrap)."""


class Calibration(Record):
    schema_version: str = CALIBRATION_SCHEMA_VERSION
    """Always ``race.calibration/1``."""
    rsc_id: str
    """The approximate contract measured."""
    rsc_version: str
    """That contract's version."""
    k: Annotated[int, Field(ge=1)]
    """The k recall was measured at."""
    confidence: Annotated[CanonicalFloat, Field(gt=0.0, lt=1.0)] = 0.95
    """The confidence level of the lower bounds (0.95 by default)."""
    seed: int
    """The seed the query sample was drawn with, so the measurement can be repeated."""
    rows: Annotated[int, Field(ge=0)]
    """The rows of the index at the generation measured."""
    unfiltered: RecallBucket | None = None
    """The recall of queries without a filter."""
    buckets: tuple[RecallBucket, ...] = ()
    """Per selectivity bucket, over every filtered query."""
    fields: dict[str, tuple[RecallBucket, ...]] = Field(default_factory=dict)
    """Per filterable field and bucket: a field correlated with the vectors can do worse."""

    @property
    def fingerprint(self) -> str:
        return fingerprint(self)

    def floor(self) -> float | None:
        """The lowest bound measured anywhere: what the contract can promise for any request."""
        bounds = [b.lower_bound for b in self.buckets] + [b.lower_bound for bs in self.fields.values() for b in bs]
        if self.unfiltered is not None:
            bounds.append(self.unfiltered.lower_bound)
        return min(bounds) if bounds else None

    def field_floor(self, name: str) -> float | None:
        bounds = [b.lower_bound for b in self.fields.get(name, ())]
        return min(bounds) if bounds else None

    def expected(self, selectivity: float | None, fields: Sequence[str]) -> ExpectedRecall:
        """The promise for a request filtering ``fields`` with this (known or unknown)
        selectivity: the lowest bound among the buckets that apply to it."""
        fp = self.fingerprint
        if not fields:
            measured = self.unfiltered
            if measured is None:
                return ExpectedRecall(recall=None, bucket=UNFILTERED, queries=0, k=self.k, calibration=fp)
            return ExpectedRecall(
                recall=measured.lower_bound, bucket=UNFILTERED, queries=measured.queries, k=self.k, calibration=fp
            )
        label = bucket_of(selectivity)
        if label is None:
            # Selectivity unknown: only the lowest bound over every bucket is a promise.
            floor = self.floor()
            queries = sum(b.queries for b in self.buckets)
            return ExpectedRecall(recall=floor, bucket="unknown selectivity", queries=queries, k=self.k, calibration=fp)
        applicable = [b for b in self.buckets if b.bucket == label]
        applicable += [b for name in sorted(set(fields)) for b in self.fields.get(name, ()) if b.bucket == label]
        if not applicable or any(not any(b.bucket == label for b in self.fields.get(n, ())) for n in fields):
            return ExpectedRecall(recall=None, bucket=label, queries=0, k=self.k, calibration=fp)
        worst = min(applicable, key=lambda b: (b.lower_bound, b.queries))
        return ExpectedRecall(recall=worst.lower_bound, bucket=label, queries=worst.queries, k=self.k, calibration=fp)
