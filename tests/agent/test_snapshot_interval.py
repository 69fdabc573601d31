"""The snapshot interval rule (R4): every step while cheap, else the budget or Young/Daly."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.agent import snapshot_interval
from trainguard.agent.snapshot_interval import Measured

DEVICE_MTBF = 180_000_000.0  # 50,000 h


def _choose(measured: Measured, *, requested: int | None = None, current: int = 1,
            share: float = 0.05, ranks: int = 4) -> snapshot_interval.IntervalChoice:
    return snapshot_interval.choose(measured, requested=requested, current=current, share=share,
                                    device_mtbf=DEVICE_MTBF, ranks=ranks)


def test_a_cheap_snapshot_stays_every_step_and_loses_nothing() -> None:
    choice = _choose(Measured(stall_seconds=0.003, step_seconds=0.155, failures=0,
                              training_seconds=60.0))
    assert (choice.interval, choice.budget) == (1, 1)
    assert "a fault loses no completed step" in choice.reason
    assert "1.9% of a 155.0 ms step (share 5%)" in choice.reason


def test_the_issue_job_moves_to_the_fewest_steps_within_the_share() -> None:
    # 75 MB per rank: 31 ms of stall on a 155 ms step is 20%; every 4 steps is 5.0%.
    choice = _choose(Measured(stall_seconds=0.031, step_seconds=0.155, failures=0,
                              training_seconds=60.0))
    assert choice.interval == choice.budget == 4
    assert not choice.mtbf_observed
    assert choice.mtbf_seconds == DEVICE_MTBF / 4
    assert choice.optimum == round(math.sqrt(2 * 0.031 * DEVICE_MTBF / 4) / 0.155)
    assert "every 4 steps keeps it within the share (5.0%)" in choice.reason
    assert "assumed, no fault yet: 50,000 h per device / 4 ranks" in choice.reason
    assert "a fault loses up to 3 completed steps" in choice.reason


def test_crowded_cores_count_the_stall_in_the_budget_and_the_optimum() -> None:
    alone = _choose(Measured(stall_seconds=0.031, step_seconds=0.155, failures=5,
                             training_seconds=100.0))
    crowded = _choose(Measured(stall_seconds=0.031, step_seconds=0.155, failures=5,
                               training_seconds=100.0, crowding=1.5))
    assert (alone.budget, crowded.budget) == (4, 6)  # 20% of the step, then 30%
    assert crowded.optimum == round(math.sqrt(2 * 0.031 * 1.5 * 20.0) / 0.155)
    assert "a snapshot stalls 31.0 ms, 46.5 ms with 1.5 ranks to a core, 30.0%" in \
        crowded.reason
    assert "every 6 steps keeps it within the share (5.0%)" in crowded.reason


def test_frequent_faults_make_the_young_daly_optimum_win() -> None:
    # A 2 s stall on a 1 s step, a fault every 20 s: the optimum sqrt(2*2*20) ~ 9 steps beats
    # the budget of 40.
    choice = _choose(Measured(stall_seconds=2.0, step_seconds=1.0, failures=5,
                              training_seconds=100.0))
    assert choice.mtbf_observed
    assert choice.mtbf_seconds == 20.0
    assert (choice.budget, choice.optimum, choice.interval) == (40, 9, 9)
    assert "observed: 5 faults in 1.67 m" in choice.reason


def test_a_fixed_interval_is_kept_and_the_better_one_recommended() -> None:
    choice = _choose(Measured(stall_seconds=0.031, step_seconds=0.155, failures=0,
                              training_seconds=60.0), requested=1)
    assert (choice.interval, choice.recommended) == (1, 4)
    assert "(--snapshot-every 1)" in choice.reason
    assert "recommended: every 4 steps (--snapshot-every 4)" in choice.reason


def test_the_persist_optimum_uses_the_same_rule_in_seconds() -> None:
    choice = _choose(Measured(stall_seconds=0.01, step_seconds=0.1, failures=2,
                              training_seconds=200.0, persist_seconds=0.5))
    assert choice.persist_optimum_seconds == pytest.approx(math.sqrt(2 * 0.5 * 100.0))
    assert "a persist takes 0.50 s: optimum --persist-interval 10 s" in choice.reason


def test_auto_does_not_flip_on_a_small_change() -> None:
    measured = Measured(stall_seconds=0.031, step_seconds=0.155, failures=0,
                        training_seconds=60.0)
    assert _choose(measured, current=5).interval == 5  # best is 4: within 25% of 5
    assert "kept: the best, every 4 steps, is within 25% of it" in _choose(
        measured, current=5).reason
    assert _choose(measured, current=8).interval == 4


def test_a_stall_just_past_the_share_keeps_every_step_and_just_below_it_goes_back() -> None:
    def at(stall: float, current: int) -> int:
        return _choose(Measured(stall_seconds=stall, step_seconds=0.1, failures=0,
                                training_seconds=60.0), current=current).interval

    assert at(0.006, current=1) == 1  # 1.2x the share: within the band
    assert at(0.0065, current=1) == 2  # 1.3x: past it
    assert at(0.0055, current=2) == 2  # no flip back while still past the share
    assert at(0.0049, current=2) == 1


@pytest.mark.parametrize("text", ["0", "-3", "often", "1.5", ""])
def test_parse_every_names_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="snapshot-every must be 'auto' or a number of steps"):
        snapshot_interval.parse_every(text)


def test_parse_every() -> None:
    assert snapshot_interval.parse_every("auto") is None
    assert snapshot_interval.parse_every("AUTO") is None
    assert snapshot_interval.parse_every("25") == 25


measurements = st.builds(
    Measured,
    stall_seconds=st.floats(0.0, 1000.0),
    step_seconds=st.floats(1e-4, 1000.0),
    failures=st.integers(0, 10_000),
    training_seconds=st.floats(0.0, 1e8),
    persist_seconds=st.none() | st.floats(0.0, 1000.0),
    crowding=st.floats(1.0, 64.0))
shares = st.floats(1e-4, 0.99)


@given(measured=measurements, share=shares, current=st.integers(1, 100_000),
       ranks=st.integers(1, 100_000))
def test_auto_keeps_its_interval_only_within_the_band_around_the_best(
        measured: Measured, share: float, current: int, ranks: int) -> None:
    choice = _choose(measured, current=current, share=share, ranks=ranks)
    assert choice.interval >= 1
    assert choice.interval == choice.recommended
    assert choice.best == min(choice.budget, choice.optimum)
    # Kept only while the best, before rounding, is within the hysteresis factor of it.
    stall, step = measured.cost_seconds, measured.step_seconds
    mtbf = choice.mtbf_seconds
    target = min(stall / (share * step), math.sqrt(2 * stall * mtbf) / step)
    if choice.interval != choice.best:
        assert choice.interval == current
        assert current / 1.25 <= target <= current * 1.25
    assert choice.reason.startswith(f"snapshot every {choice.interval} step" if
                                    choice.interval > 1 else "snapshot every step")


@given(measured=measurements, share=shares, ranks=st.integers(1, 100_000))
def test_the_budget_keeps_the_stall_within_the_share_and_is_the_fewest_that_does(
        measured: Measured, share: float, ranks: int) -> None:
    choice = _choose(measured, share=share, ranks=ranks)
    stall, step = measured.cost_seconds, measured.step_seconds
    assert stall / (choice.budget * step) <= share * (1 + 1e-6)
    if choice.budget > 1:
        assert stall / ((choice.budget - 1) * step) > share * (1 - 1e-6)


@given(measured=measurements, share=shares, ranks=st.integers(1, 100_000),
       requested=st.integers(1, 100_000))
def test_a_fixed_interval_is_always_kept(measured: Measured, share: float, ranks: int,
                                         requested: int) -> None:
    choice = _choose(measured, requested=requested, share=share, ranks=ranks)
    assert choice.interval == requested
    assert f"(--snapshot-every {requested})" in choice.reason


@given(measured=measurements, share=shares)
def test_a_stall_within_the_share_means_every_step(measured: Measured, share: float) -> None:
    if measured.cost_seconds <= share * measured.step_seconds:
        assert _choose(measured, share=share, current=7).interval == 1


@given(stall=st.floats(1e-4, 10.0), step=st.floats(1e-3, 10.0),
       failures=st.integers(1, 1000), training=st.floats(1.0, 1e7))
def test_more_faults_never_lengthen_the_interval(stall: float, step: float, failures: int,
                                                 training: float) -> None:
    fewer = _choose(Measured(stall, step, failures, training))
    more = _choose(Measured(stall, step, failures * 2, training))
    assert more.best <= fewer.best


@given(measured=measurements, more=st.floats(1.0, 8.0))
def test_more_ranks_to_a_core_never_shorten_the_interval(measured: Measured,
                                                         more: float) -> None:
    crowded = dataclasses.replace(measured, crowding=measured.crowding * more)
    assert _choose(crowded).best >= _choose(measured).best


def test_a_small_share_is_shown_as_it_was_given() -> None:
    choice = _choose(Measured(stall_seconds=0.001, step_seconds=0.1, failures=0,
                              training_seconds=1.0), share=0.002)
    assert "(share 0.2%)" in choice.reason
