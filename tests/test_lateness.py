"""The reserves before the plan deadline grow with the loop's lateness (race.run.lateness)."""

from __future__ import annotations

import pytest

from race.run.lateness import MAX_GROWTH, Lateness


def test_on_time_the_instants_stay_where_the_clock_put_them() -> None:
    lateness = Lateness(legs=10.5, cut=10.75, end=11.0)
    assert lateness.moved() == (10.5, 10.75)


def test_a_late_loop_moves_both_instants_earlier_by_its_lateness() -> None:
    lateness = Lateness(legs=10.5, cut=10.75, end=11.0)
    lateness.late_s = 0.1
    legs, cut = lateness.moved()
    # Each reserve grows by the lateness: the receipt's (end - cut) and the operators' (cut - legs).
    assert 11.0 - cut == pytest.approx(0.25 + 0.1)
    assert cut - legs == pytest.approx(0.25 + 0.1)


def test_no_reserve_grows_past_its_bound() -> None:
    lateness = Lateness(legs=10.5, cut=10.75, end=11.0)
    lateness.late_s = 5.0
    legs, cut = lateness.moved()
    assert 11.0 - cut == pytest.approx(MAX_GROWTH * 0.25)
    assert cut - legs == pytest.approx(MAX_GROWTH * 0.25)
