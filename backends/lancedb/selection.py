"""Which rows of an exact matrix a search scores (``backends/lancedb/exact.py``), and where
they lie: runs of consecutive rows, scored in place, wherever the filter allows.

A matrix keeps its rows in one order (grouped by its cluster field, then ``chunk_id``) and,
beside it, a copy sorted by each other field a filter can name (``matrix.py``): in the copy
of field ``f`` the rows of every value of ``f`` are one run, and a range over ``f`` (values in
the order filters compare them) one run in all. A filter on ``f`` alone therefore reads runs
of rows in place, as the numpy floor reads its pre-sliced rows; a conjunction lists the rows
of its narrowest filter (in that filter's copy when there is one) and keeps those the others
admit, then gathers them. Selecting costs O(values) for runs, O(matching rows) for a list;
filters with an ``any_of`` group among them are one boolean mask over every row (O(rows)).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from backends.lancedb.masks import I64, Column
from rsc import Filter, FilterOp


@dataclass(frozen=True)
class Selection:
    """The rows passing every filter, in one space: the matrix (``space`` is ``None``) or the
    copy sorted by field ``space``. They are ``runs`` (``[start, stop)`` pairs, ascending),
    or ``positions`` (ascending), or, with neither, every row."""

    space: str | None
    runs: I64 | None
    positions: I64 | None
    matching: int

    def listed(self) -> I64 | None:
        """The selected positions in the space, ascending (``None``: every row)."""
        if self.runs is None:
            return self.positions
        return spans(self.runs)


def spans(runs: I64) -> I64:
    """Every position of ``runs``, ascending."""
    if len(runs) == 0:
        return np.empty(0, dtype=np.int64)
    if len(runs) == 1:
        return np.arange(int(runs[0, 0]), int(runs[0, 1]), dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in runs.tolist()])


def _empty() -> Selection:
    return Selection(None, None, np.empty(0, dtype=np.int64), 0)


def _admitted(columns: Mapping[str, Column], flt: Filter, rows: int) -> npt.NDArray[np.bool_]:
    """Whether each matrix row passes ``flt`` (an ``any_of`` group: any of its members)."""
    if flt.op is FilterOp.ANY_OF:
        mask = np.zeros(rows, dtype=np.bool_)
        for member in flt.any_of:
            mask |= _admitted(columns, member, rows)
        return mask
    column = columns.get(flt.field)
    if column is None:
        return np.zeros(rows, dtype=np.bool_)
    admitted: npt.NDArray[np.bool_] = column.admits(column.matching(flt))[column.codes]
    return admitted


def _masked(columns: Mapping[str, Column], filters: Sequence[Filter], rows: int) -> Selection:
    """Filters with an OR among them, resolved to one boolean mask over the matrix (O(rows))."""
    mask = np.ones(rows, dtype=np.bool_)
    for flt in filters:
        mask &= _admitted(columns, flt, rows)
    positions = np.flatnonzero(mask).astype(np.int64)
    return Selection(None, None, positions, len(positions))


def choose(columns: Mapping[str, Column], filters: Sequence[Filter], copies: frozenset[str], rows: int) -> Selection:
    """The rows of a ``rows``-row matrix passing every one of ``filters``, given the fields
    that have a sorted copy."""
    if not filters:
        return Selection(None, None, None, rows)
    if any(flt.op is FilterOp.ANY_OF for flt in filters):
        return _masked(columns, filters, rows)
    resolved = []
    for flt in filters:
        column = columns.get(flt.field)
        if column is None:
            # No row has the field, and a row without it matches no filter on it.
            return _empty()
        codes = column.matching(flt)
        resolved.append((column.count(codes), column, codes))
    # The narrowest filter lists the rows; each other one is a lookup per listed row.
    resolved.sort(key=lambda r: r[0])
    total, column, codes = resolved[0]
    if total == 0:
        return _empty()
    copied = column.field in copies
    if len(resolved) == 1 and (copied or column.contiguous):
        return Selection(column.field if copied else None, column.runs(codes, sorted_copy=copied), None, total)
    if copied:
        positions = spans(column.runs(codes, sorted_copy=True))
        base = column.order[positions]
    else:
        positions = base = column.rows(codes, total)
    for _, other, other_codes in resolved[1:]:
        if len(positions) == 0:
            break
        keep = other.admits(other_codes)[other.codes[base]]
        positions, base = positions[keep], base[keep]
    return Selection(column.field if copied else None, None, positions, len(positions))
