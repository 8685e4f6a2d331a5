"""loop-unroll's arithmetic: trip counts of every comparison, and the automatic factor."""

from __future__ import annotations

import pytest

from hlofuse.analysis.counted_loops import CountedLoop, trip_count
from hlofuse.passes.unroll import AUTO_MAX_FACTOR, auto_unroll_factor


def _simulate(start: int, step: int, direction: str, bound: int, limit: int = 100) -> int | None:
    holds = {"LT": int.__lt__, "LE": int.__le__, "GT": int.__gt__, "GE": int.__ge__,
             "EQ": int.__eq__, "NE": int.__ne__}[direction]
    counter, trips = start, 0
    while holds(counter, bound):
        counter, trips = counter + step, trips + 1
        if trips > limit:
            return None
    return trips


@pytest.mark.parametrize("direction", ["LT", "LE", "GT", "GE", "EQ", "NE"])
def test_trip_count_matches_running_the_loop(direction: str) -> None:
    for start in range(-7, 8):
        for step in (-3, -2, -1, 1, 2, 3):
            for bound in range(-9, 10):
                assert trip_count(start, step, direction, bound) == _simulate(
                    start, step, direction, bound), (start, step, direction, bound)


@pytest.mark.parametrize("trips, body, budget, factor", [
    (1000, 100, 10000, 10),  # the study's factor
    (12, 10, 10000, 6),  # 10 does not divide 12; 6 does and is at least half of 10
    (7, 10, 10000, 7),  # the whole loop
    (13, 10, 10000, 10),  # no divisor near 10: three iterations are peeled
    (1000, 2000, 10000, 5),  # the instruction budget allows 5 copies
    (1000, 6000, 10000, 1),  # not even two copies fit
    (1, 10, 10000, 1),
])
def test_auto_unroll_factor(trips: int, body: int, budget: int, factor: int) -> None:
    loop = CountedLoop(index=0, start=0, step=1, trip_count=trips, body_instructions=body)
    assert auto_unroll_factor(loop, budget) == factor
    assert factor <= AUTO_MAX_FACTOR
