"""Hard filters resolved to matrix row positions, from the dictionary-encoded fields of an
exact matrix (``backends/lancedb/exact.py``).

A value matches an operand of its own type class only (booleans, numbers, strings), with the
semantics of ``Filter.matches``; a range needs both bounds' class. ``ne``, ``not_in``,
``prefix`` and ``exists`` are judged by ``Filter.matches`` over the distinct values.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from rsc import Filter, FilterOp

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
TypedKey = tuple[int, Any]
_JUDGED = frozenset({FilterOp.NE, FilterOp.NOT_IN, FilterOp.PREFIX, FilterOp.EXISTS})
"""Operators resolved by ``Filter.matches`` itself over the column's distinct values."""


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


def value_key(value: Any) -> TypedKey:
    """Scalars by their typed key; any other value (a multi-valued keyword, ...) by its JSON,
    after every scalar."""
    return typed_key(value) if _scalar(value) else (3, orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode())


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
    contiguous: bool
    """Every code's rows are one run of consecutive matrix rows."""

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
        present = int(np.count_nonzero(np.diff(starts)))
        contiguous = len(codes) == 0 or int(np.count_nonzero(np.diff(codes))) + 1 == present
        return cls(field, keys, others, codes, order, starts, lookup, classes, contiguous)

    def matching(self, flt: Filter) -> npt.NDArray[np.int64]:
        """The codes whose value passes ``flt``, ascending."""
        scalars = self._scalars(flt)
        if not self.others:
            return scalars
        first = len(self.keys) + 1
        others = [first + i for i, value in enumerate(self.others) if flt.matches({self.field: value})]
        return np.concatenate([scalars, np.asarray(others, dtype=np.int64)])

    def _scalars(self, flt: Filter) -> npt.NDArray[np.int64]:
        if flt.op in _JUDGED:
            # Judged one distinct value at a time (O(values)); code 0, the absent field, never passes.
            passing = [code for code, key in enumerate(self.keys, start=1) if flt.matches({self.field: key[1]})]
            return np.asarray(passing, dtype=np.int64)
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

    def runs(self, codes: npt.NDArray[np.int64], *, sorted_copy: bool) -> I64:
        """The rows of ``codes`` as runs ``[start, stop)`` (shape (n, 2), ascending, adjacent
        runs merged): in this field's sorted copy of the matrix (row ``p`` of the copy is
        matrix row ``order[p]``), or in the matrix itself when the field is ``contiguous``."""
        first, stop = self.starts[codes], self.starts[codes + 1]
        keep = stop > first
        first, stop = first[keep], stop[keep]
        if not sorted_copy:
            first, stop = self.order[first], self.order[stop - 1] + 1
            by = np.argsort(first, kind="stable")
            first, stop = first[by], stop[by]
        if len(first) > 1:
            # Merge runs that touch: a range over consecutive codes is one run.
            new = np.concatenate([[True], first[1:] != stop[:-1]])
            heads = np.flatnonzero(new)
            first = first[heads]
            stop = stop[np.concatenate([heads[1:] - 1, [len(new) - 1]])]
        return np.stack([first, stop], axis=1).astype(np.int64).reshape(-1, 2)

    def admits(self, codes: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        table = np.zeros(len(self.keys) + len(self.others) + 1, dtype=np.bool_)
        table[codes] = True
        return table


def filter_key(flt: Filter) -> Hashable:
    """A filter with each operand's type: ``Filter`` equality (and its JSON) has True == 1,
    which match different rows."""
    values = flt.values
    if flt.op is FilterOp.ANY_OF:
        return (flt.op.value, tuple(filter_key(member) for member in flt.any_of))
    return (
        flt.field,
        flt.op.value,
        type(flt.value),
        flt.value,
        tuple(map(type, values)),
        values,
        type(flt.gte),
        flt.gte,
        type(flt.lte),
        flt.lte,
    )
