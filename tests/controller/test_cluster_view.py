"""The step every rank stops at, decided from the ranks' reports."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trainguard.controller import cluster_view


def test_no_rank_begun_means_no_agreed_step() -> None:
    assert cluster_view.stop_step([]) is None
    assert cluster_view.stop_step([None, None]) is None


@given(st.lists(st.none() | st.integers(0, 10**9), min_size=1))
def test_the_step_is_one_past_the_furthest_rank(begun: list[int | None]) -> None:
    step = cluster_view.stop_step(begun)
    started = [b for b in begun if b is not None]
    if not started:
        assert step is None
        return
    assert step == max(started) + 1
    # Lockstep: no rank is more than one step past the slowest that began; each can reach it.
    assert all(b < step for b in started)
