"""The reserves before the plan deadline grow with the loop's lateness (race.run.lateness)."""

from __future__ import annotations

import time

import anyio
import pytest
import sniffio

from race.run.lateness import MAX_GROWTH, TICK_S, Lateness


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


@pytest.mark.anyio
async def test_a_late_tick_moves_a_cancel_scope_from_the_loop_timer() -> None:
    # The ticker is a loop timer, not a task: what it calls still reads anyio's clock and moves
    # a scope's deadline, and a deadline moved into the past cancels the scope.
    now = time.monotonic()
    lateness = Lateness(legs=now, cut=now, end=now)
    moves: list[float] = []
    with anyio.fail_after(30):  # a bound for a broken ticker, not a measurement
        with anyio.CancelScope() as scope:

            def moved(legs: float, cut: float) -> None:
                moves.append(anyio.current_time())
                scope.deadline = anyio.current_time() - 1.0

            # As on the engine's loop, nothing in the timer's context names the async library.
            unnamed = sniffio.current_async_library_cvar.set(None)
            try:
                stop = lateness.start(moved)
            finally:
                sniffio.current_async_library_cvar.reset(unnamed)
            try:
                blocked_until = time.monotonic() + 3 * TICK_S
                while time.monotonic() < blocked_until:  # the loop held past a tick: it runs late
                    pass
                await anyio.sleep_forever()
            finally:
                stop()
    assert scope.cancelled_caught
    assert len(moves) == 1
    assert lateness.late_s > 0.0
