"""The result cache: complete keys (an unknown generation is always a miss), a bounded disk
cache evicting the least recently used entry, and entries served only when intact and named
for the key asked (a corrupted or swapped file is a miss and is removed)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from backends import Adapter
from planner import Generations, ScanNode, scans
from race.engine import Engine
from race.run.legs import UNKNOWN_GENERATION, LegRunner
from race.state.cache import ResultCache
from rsc import Contract, ScanRequest, ScanResult
from tests.state.conftest import plan


def _result(n: int) -> ScanResult:
    return ScanResult(generation=f"g{n}", total_matches=n, exhausted=True)


def _key(n: int) -> str:
    return f"xxh3_128:{n:032x}"


def _files(directory: Path) -> set[str]:
    return {p.name for p in directory.glob("*.json")}


def test_the_disk_cache_keeps_its_entry_bound_least_recently_used_first(tmp_path: Path) -> None:
    cache = ResultCache(directory=tmp_path, max_entries=3)
    for n in range(3):
        cache.put(_key(n), _result(n))
    # Reading entry 0 (from disk: a new cache has nothing in memory) makes entry 1 the oldest.
    reopened = ResultCache(directory=tmp_path, max_entries=3)
    assert reopened.get(_key(0)) == _result(0)
    reopened.put(_key(3), _result(3))
    assert reopened.disk_entries == 3
    assert ResultCache(directory=tmp_path).get(_key(1)) is None
    assert [ResultCache(directory=tmp_path).get(_key(n)) for n in (0, 2, 3)] == [_result(0), _result(2), _result(3)]


def test_the_disk_cache_keeps_its_byte_bound(tmp_path: Path) -> None:
    one = ResultCache(directory=tmp_path / "probe")
    one.put(_key(0), _result(0))
    size = one.disk_bytes
    cache = ResultCache(directory=tmp_path / "bounded", max_bytes=2 * size + size // 2)
    for n in range(5):
        cache.put(_key(n), _result(n))
        assert cache.disk_bytes <= cache.max_bytes
    assert cache.disk_entries == 2 and len(_files(tmp_path / "bounded")) == 2
    # A cache opened over a directory larger than its bound trims it, oldest access first.
    for age, name in enumerate(sorted(_files(tmp_path / "bounded"))):
        os.utime(tmp_path / "bounded" / name, (time.time() - 100 + age,) * 2)
    smaller = ResultCache(directory=tmp_path / "bounded", max_entries=1)
    assert smaller.disk_entries == 1 and _files(tmp_path / "bounded") == {max(_files(tmp_path / "bounded"))}


@pytest.mark.parametrize("damage", ["flip-a-byte", "truncate", "swap", "old-format"])
def test_a_damaged_or_swapped_entry_is_a_miss_and_is_removed(tmp_path: Path, damage: str) -> None:
    cache = ResultCache(directory=tmp_path)
    cache.put(_key(1), _result(1))
    cache.put(_key(2), _result(2))
    path = cache._path(_key(1))
    data = path.read_bytes()
    if damage == "flip-a-byte":
        at = data.index(b'"total_matches":1') + len('"total_matches":')
        path.write_bytes(data[:at] + b"7" + data[at + 1 :])
    elif damage == "truncate":
        path.write_bytes(data[:-5])
    elif damage == "swap":
        path.write_bytes(cache._path(_key(2)).read_bytes())
    else:
        path.write_bytes(_result(1).model_dump_json().encode())
    fresh = ResultCache(directory=tmp_path)
    assert fresh.get(_key(1)) is None
    assert not path.exists()
    assert fresh.get(_key(2)) == _result(2)


class _Counting(Adapter):
    """Answers every scan with no hits, counting the calls."""

    backend = "tantivy"

    def __init__(self, contracts: tuple[Contract, ...]) -> None:
        self._contracts = contracts
        self.calls = 0

    def contracts(self) -> tuple[Contract, ...]:  # type: ignore[override]
        return self._contracts

    @classmethod
    def build(cls, corpus: Any, index_dir: Path, progress: Any = None) -> str:
        raise NotImplementedError

    @classmethod
    def open(cls, index_dir: Path) -> _Counting:
        raise NotImplementedError

    @property
    def identity(self) -> str:
        return "counting"

    def generation(self) -> str:
        return "g"

    async def scan(self, request: ScanRequest) -> ScanResult:
        self.calls += 1
        return ScanResult(generation="g", total_matches=0, exhausted=True)


def _fetch(adapter: _Counting, scan: ScanNode, cache: ResultCache, **change: Any) -> None:
    contract = next(c for c in adapter.contracts() if c.ref == scan.rsc)
    if "translator" in change:
        contract = contract.model_copy(update={"translator_version": change["translator"]})
    runner = LegRunner(
        adapters={"tantivy": adapter},
        generations={"tantivy": change.get("generation", "g")},
        caller=change.get("caller", Generations()),
        contracts={scan.rsc: contract},
        deadline=time.monotonic() + 10.0,
        deadline_ms=10_000,
        concurrency=2,
        cache=cache,
    )
    anyio.run(runner.fetch, scan, scan.node, "label")


def test_every_input_of_an_answer_is_in_its_cache_key(index_dir: Path) -> None:
    engine = Engine.open(index_dir)
    (scan,) = scans(engine.plan_sync(plan("tantivy")).physical)
    adapter = _Counting(engine.adapters["tantivy"].contracts())
    cache = ResultCache()
    _fetch(adapter, scan, cache)
    _fetch(adapter, scan, cache)
    assert adapter.calls == 1
    for change in (
        {"translator": "9.9.9"},
        {"generation": "g2"},
        {"caller": Generations(freshness="2030-01-01")},
    ):
        _fetch(adapter, scan, cache, **change)
        assert adapter.calls == 2, change
        _fetch(adapter, scan, cache, **change)
        assert adapter.calls == 2, change
        adapter.calls = 1
    other = scan.model_copy(update={"request": scan.request.model_copy(update={"k": scan.request.k + 1})})
    _fetch(adapter, other, cache)
    assert adapter.calls == 2
    adapter.calls = 0
    for _ in range(2):
        _fetch(adapter, scan, cache, generation=UNKNOWN_GENERATION)
    assert adapter.calls == 2
