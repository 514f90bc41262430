"""Full garbage collections wait while runs are in flight (race.run.gc_pause)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from race.run import gc_pause
from race.run.gc_pause import full_collections_wait, waiting


@pytest.fixture(autouse=True)
def thresholds() -> Iterator[tuple[int, int, int]]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*saved)


def test_full_collections_wait_within_a_run_and_come_back_after(thresholds: tuple[int, int, int]) -> None:
    with full_collections_wait():
        assert waiting()
        first, second, third = gc.get_threshold()
        assert (first, second) == thresholds[:2] and third > 1000 * thresholds[2]
    assert not waiting()
    assert gc.get_threshold() == thresholds


def test_overlapping_runs_put_them_back_when_the_last_ends(thresholds: tuple[int, int, int]) -> None:
    outer, inner = full_collections_wait(), full_collections_wait()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert waiting() and gc.get_threshold() != thresholds
    inner.__exit__(None, None, None)
    assert not waiting() and gc.get_threshold() == thresholds


def test_overlapping_runs_never_put_them_off_past_the_bound(
    thresholds: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc_pause, "MAX_WAIT_S", 0.0)
    outer, inner = full_collections_wait(), full_collections_wait()
    outer.__enter__()
    inner.__enter__()
    inner.__exit__(None, None, None)  # one run ends after the bound: collections come back
    assert not waiting() and gc.get_threshold() == thresholds
    outer.__exit__(None, None, None)
    assert gc.get_threshold() == thresholds


def test_a_host_that_turned_collection_off_or_changed_thresholds_keeps_its_choice() -> None:
    gc.set_threshold(0)
    with full_collections_wait():
        assert not waiting() and gc.get_threshold()[0] == 0
    gc.set_threshold(700, 10, 10)
    with full_collections_wait():
        gc.set_threshold(500, 5, 5)
    assert gc.get_threshold() == (500, 5, 5)
