"""Plan and result caches. Both are keyed by fingerprints (or, in memory, tuples of the
very strings a fingerprint would hash) that include every generation (I6), so a changed
index, contract or caller generation is always a miss — a stale entry can never be served,
only left unused.

The result cache can also keep entries on disk, one file per entry: a header line (schema
version, the entry's key, the sha256 of the body) and the ``ScanResult`` JSON body. An entry
is served only if its header names the key asked for and its body hashes to the recorded
digest; a corrupted, truncated or swapped file is a miss and is removed. The directory is
bounded in entries and bytes, least recently used (read or written) evicted first; the
access order lives in the files' modification times, so it survives a restart.
"""

from __future__ import annotations

import contextlib
import hashlib
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


ENTRY_SCHEMA_VERSION = "race.result-cache/1"
DEFAULT_DISK_ENTRIES = 20_000
DEFAULT_DISK_BYTES = 512 * 1024 * 1024
"""Disk bounds by default: at the fixture corpus's ~5-20 kB an entry, the entry count binds first."""


class ResultCache:
    """Scan results by the fingerprint of everything they depend on (translated request,
    contract and translator version, pinned backend generation, caller generations), in
    memory and optionally on disk, bounded by ``max_entries`` and ``max_bytes`` there."""

    def __init__(
        self,
        capacity: int = 4096,
        directory: Path | None = None,
        *,
        max_entries: int = DEFAULT_DISK_ENTRIES,
        max_bytes: int = DEFAULT_DISK_BYTES,
    ) -> None:
        self._memory: _Lru[ScanResult] = _Lru(capacity)
        self.directory = directory
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        # Entry file name -> size, least recently used first.
        self._disk: OrderedDict[str, int] = OrderedDict()
        self._disk_bytes = 0
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._index_directory(directory)

    def _index_directory(self, directory: Path) -> None:
        found = []
        for path in directory.glob("*.json"):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            found.append((st.st_mtime_ns, path.name, st.st_size))
        for _, name, size in sorted(found):
            self._disk[name] = size
            self._disk_bytes += size
        self._evict()

    @property
    def disk_entries(self) -> int:
        return len(self._disk)

    @property
    def disk_bytes(self) -> int:
        return self._disk_bytes

    def _path(self, key: str) -> Path:
        assert self.directory is not None
        return self.directory / (key.split(":", 1)[-1] + ".json")

    def get(self, key: str) -> ScanResult | None:
        found = self._memory.get(key)
        if found is not None or self.directory is None:
            return found
        found = self._read(key)
        if found is not None:
            self._memory.put(key, found)
        return found

    def _read(self, key: str) -> ScanResult | None:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            self._forget(path.name)
            return None
        header_line, _, body = data.partition(b"\n")
        try:
            header = json.loads(header_line)
            valid = (
                isinstance(header, dict)
                and header.get("schema_version") == ENTRY_SCHEMA_VERSION
                and header.get("key") == key
                and header.get("sha256") == _digest(body)
            )
            result = ScanResult.model_validate_json(body) if valid else None
        except (ValueError, ValidationError):
            result = None
        if result is None:
            # Not the entry it is named for, or not intact: never served, and removed.
            path.unlink(missing_ok=True)
            self._forget(path.name)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)
        self._touch(path.name, len(data))
        return result

    def put(self, key: str, result: ScanResult) -> None:
        self._memory.put(key, result)
        if self.directory is None:
            return
        body = result.model_dump_json().encode("utf-8")
        header = json.dumps({"schema_version": ENTRY_SCHEMA_VERSION, "key": key, "sha256": _digest(body)})
        data = header.encode("utf-8") + b"\n" + body
        if len(data) > self.max_bytes:
            return
        path = self._path(key)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(path)
        self._touch(path.name, len(data))
        self._evict()

    def _touch(self, name: str, size: int) -> None:
        self._disk_bytes += size - self._disk.pop(name, 0)
        self._disk[name] = size

    def _forget(self, name: str) -> None:
        self._disk_bytes -= self._disk.pop(name, 0)

    def _evict(self) -> None:
        assert self.directory is not None
        while self._disk and (len(self._disk) > self.max_entries or self._disk_bytes > self.max_bytes):
            name, size = self._disk.popitem(last=False)
            self._disk_bytes -= size
            (self.directory / name).unlink(missing_ok=True)

    def __len__(self) -> int:
        return len(self._memory)


def _digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()
