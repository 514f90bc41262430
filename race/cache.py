"""Plan and result caches. Both are keyed by fingerprints (or, in memory, tuples of the
very strings a fingerprint would hash) that include every generation (I6), so a changed
index, contract or caller generation is always a miss — a stale entry can never be served,
only left unused."""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Hashable
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import ValidationError

from rsc import ScanResult

V = TypeVar("V")


class _Lru(Generic[V]):
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: Hashable, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class PlanCache(_Lru[V]):
    """Compiled plans (and receipts) by a key made of every input they depend on: a fingerprint,
    or a tuple of fingerprints and generation strings compared whole (exact, no hashing loss)."""

    def __init__(self, capacity: int = 256) -> None:
        super().__init__(capacity)


class ResultCache:
    """Scan results by the fingerprint of (request, backend generation, caller generations),
    in memory and optionally on disk (one JSON file per entry, written atomically)."""

    def __init__(self, capacity: int = 4096, directory: Path | None = None) -> None:
        self._memory: _Lru[ScanResult] = _Lru(capacity)
        self.directory = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        assert self.directory is not None
        return self.directory / (key.split(":", 1)[-1] + ".json")

    def get(self, key: str) -> ScanResult | None:
        found = self._memory.get(key)
        if found is not None or self.directory is None:
            return found
        path = self._path(key)
        try:
            found = ScanResult.model_validate(json.loads(path.read_bytes()))
        except (OSError, ValueError, ValidationError):
            return None
        self._memory.put(key, found)
        return found

    def put(self, key: str, result: ScanResult) -> None:
        self._memory.put(key, result)
        if self.directory is not None:
            path = self._path(key)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(result.model_dump_json())
            tmp.replace(path)

    def __len__(self) -> int:
        return len(self._memory)
