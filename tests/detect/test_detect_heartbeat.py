"""Hang detection from step marks with explicit times: no clock, no waiting."""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from collections.abc import Callable

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from trainguard.detect import heartbeat
from trainguard.ipc import messages

BEGIN = messages.StepPhase.BEGIN
END = messages.StepPhase.END
CHECKPOINT = messages.ActivityKind.CHECKPOINT

SETTINGS = heartbeat.HeartbeatSettings(floor=2.0, cap=60.0, factor=10.0, window=5,
                                       startup_timeout=30.0, busy_timeout=120.0)


def _detector(settings: heartbeat.HeartbeatSettings = SETTINGS) -> heartbeat.HangDetector:
    return heartbeat.HangDetector(settings)


def _steps(detector: heartbeat.HangDetector, rank: int, times: list[float]) -> None:
    for at in times:
        detector.mark(rank, BEGIN, at=at)


# --- settings -----------------------------------------------------------------------------------


def test_default_settings() -> None:
    settings = heartbeat.HeartbeatSettings()

    assert (settings.floor, settings.cap, settings.factor, settings.window) == (2.0, 600.0,
                                                                               10.0, 50)
    assert (settings.startup_timeout, settings.busy_timeout) == (600.0, 1800.0)
    assert (settings.busy_floor, settings.stopped_timeout) == (60.0, 1.0)


@pytest.mark.parametrize(("changes", "text"), [
    ({"floor": 0.0}, "heartbeat floor must be > 0 seconds, got 0.0"),
    ({"floor": -1.0}, "heartbeat floor must be > 0 seconds, got -1.0"),
    ({"floor": math.nan}, "heartbeat floor must be > 0 seconds, got nan"),
    ({"floor": 5.0, "cap": 4.0},
     "heartbeat cap (4.0 s) must be >= heartbeat floor (5.0 s)"),
    ({"cap": math.nan}, "heartbeat cap (nan s) must be >= heartbeat floor (2.0 s)"),
    ({"factor": 0.5}, "heartbeat factor must be >= 1, got 0.5"),
    ({"factor": math.nan}, "heartbeat factor must be >= 1, got nan"),
    ({"window": 0}, "heartbeat window must be >= 1 interval, got 0"),
    ({"startup_timeout": 0.0}, "heartbeat-startup-timeout must be > 0 seconds, got 0.0"),
    ({"busy_timeout": -3.0}, "heartbeat-busy-timeout must be > 0 seconds, got -3.0"),
    ({"busy_timeout": math.nan}, "heartbeat-busy-timeout must be > 0 seconds, got nan"),
    ({"busy_floor": 0.0}, "heartbeat-busy-floor must be > 0 seconds, got 0.0"),
    ({"stopped_timeout": math.nan}, "heartbeat-stopped-timeout must be > 0 seconds, got nan"),
])
def test_settings_validation_names_field_value_and_rule(changes: dict[str, float],
                                                         text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(text)) as caught:
        heartbeat.HeartbeatSettings(**changes)  # type: ignore[arg-type]

    assert str(caught.value) == text


def test_settings_accept_the_edges() -> None:
    settings = heartbeat.HeartbeatSettings(floor=1e-9, cap=1e-9, factor=1.0, window=1,
                                           startup_timeout=1e-9, busy_timeout=1e-9)

    assert settings.cap == settings.floor


# --- startup ------------------------------------------------------------------------------------


def test_startup_timeout_applies_before_the_first_mark() -> None:
    detector = _detector()
    detector.start(0, at=100.0)

    assert detector.overdue(now=130.0) == []  # exactly at the deadline is not late
    (late,) = detector.overdue(now=130.5)
    assert late == heartbeat.Overdue(rank=0, silent_seconds=30.5, deadline_seconds=30.0,
                                     waiting_for="first mark")
    assert late.describe() == (
        "no mark for 30.5 s while waiting for first mark; deadline 30.0 s")


def test_first_mark_ends_the_startup_wait() -> None:
    detector = _detector()
    detector.start(0, at=100.0)
    detector.mark(0, BEGIN, at=125.0)

    # No intervals yet, so the step deadline is the cap (60 s) from the last mark.
    assert detector.overdue(now=184.0) == []
    (late,) = detector.overdue(now=186.0)
    assert (late.waiting_for, late.deadline_seconds, late.silent_seconds) == (
        "end of step", 60.0, 61.0)


def test_unknown_rank_is_ignored() -> None:
    detector = _detector()

    detector.mark(7, BEGIN, at=1.0)
    detector.activity(7, CHECKPOINT, True, at=1.0)

    assert detector.overdue(now=10_000.0) == []
    assert detector.step_deadline() == SETTINGS.cap


# --- adaptive deadline --------------------------------------------------------------------------


def test_deadline_is_the_cap_before_any_interval() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    detector.mark(0, BEGIN, at=1.0)
    detector.mark(0, END, at=1.5)

    assert detector.step_deadline() == 60.0


def test_deadline_is_factor_times_the_longest_interval() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    _steps(detector, 0, [0.0, 0.5, 1.0, 1.75, 2.0])  # intervals 0.5, 0.5, 0.75, 0.25

    assert detector.step_deadline() == pytest.approx(7.5)
    assert detector.overdue(now=2.0 + 7.5) == []
    (late,) = detector.overdue(now=2.0 + 7.6)
    assert late.deadline_seconds == pytest.approx(7.5)
    assert late.waiting_for == "end of step"


def test_deadline_is_clamped_to_the_floor() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    _steps(detector, 0, [0.0, 0.01, 0.02, 0.03])

    assert detector.step_deadline() == 2.0
    assert detector.overdue(now=1.5) == []
    assert [o.rank for o in detector.overdue(now=2.04)] == [0]


def test_deadline_is_clamped_to_the_cap() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    _steps(detector, 0, [0.0, 30.0])  # 10 x 30 s = 300 s > cap

    assert detector.step_deadline() == 60.0


def test_between_steps_the_idle_timeout_applies() -> None:
    settings = heartbeat.HeartbeatSettings(floor=2.0, cap=60.0, factor=10.0, window=5,
                                           idle_timeout=300.0)
    detector = _detector(settings)
    detector.start(0, at=0.0)
    _steps(detector, 0, [0.0, 1.0])  # interval 1 s: step deadline 10 s
    detector.mark(0, END, at=9.0)

    assert detector.step_deadline() == 10.0
    assert detector.overdue(now=300.0) == []  # a final save after the last step is no hang
    (late,) = detector.overdue(now=309.5)
    assert (late.waiting_for, late.deadline_seconds) == ("next step", 300.0)


def test_a_rank_stuck_between_steps_is_caught_through_the_peers_it_holds_up() -> None:
    detector = _detector()
    for rank in (0, 1):
        detector.start(rank, at=0.0)
        _steps(detector, rank, [0.0, 1.0])  # step deadline 10 s
    detector.mark(0, END, at=1.5)  # rank 0 stops between steps
    detector.mark(1, END, at=1.5)
    detector.mark(1, BEGIN, at=2.0)  # rank 1 waits for it inside the next step

    (late,) = detector.overdue(now=12.5)
    assert (late.rank, late.waiting_for) == (1, "end of step")


def test_a_starting_or_busy_rank_suspends_the_step_deadline_of_the_others() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    _steps(detector, 0, [0.0, 1.0, 2.0])  # step deadline 10 s
    detector.start(1, at=2.0)  # a new process, still importing
    assert detector.overdue(now=20.0) == []  # rank 0 waits for it in the step: no hang
    detector.mark(1, BEGIN, at=20.0)
    detector.activity(1, messages.ActivityKind.USER, True, at=21.0)  # declared evaluation
    assert detector.overdue(now=100.0) == []
    detector.activity(1, messages.ActivityKind.USER, False, at=100.0)
    (late,) = detector.overdue(now=101.0)
    assert (late.rank, late.waiting_for) == (0, "end of step")


def test_only_the_last_window_intervals_count() -> None:
    detector = _detector()  # window 5
    detector.start(0, at=0.0)
    _steps(detector, 0, [0.0, 5.0])  # one long interval: deadline 50 s
    assert detector.step_deadline() == 50.0

    _steps(detector, 0, [5.5, 6.0, 6.5, 7.0, 7.5])  # five short ones push it out

    assert detector.step_deadline() == 5.0


def test_intervals_are_shared_by_every_rank_and_survive_a_restart() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    detector.start(1, at=0.0)
    _steps(detector, 0, [0.0, 4.0])  # rank 0: 4 s interval
    _steps(detector, 1, [0.0, 0.5])

    assert detector.step_deadline() == 40.0

    detector.start(0, at=50.0)  # a new generation
    assert detector.step_deadline() == 40.0


# --- busy activity ------------------------------------------------------------------------------


def test_busy_activity_uses_the_busy_timeout() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    _steps(detector, 0, [0.0, 1.0])  # step deadline 10 s
    detector.activity(0, CHECKPOINT, True, at=1.5)

    assert detector.overdue(now=1.5 + 120.0) == []
    (late,) = detector.overdue(now=1.5 + 121.0)
    assert late == heartbeat.Overdue(rank=0, silent_seconds=121.0, deadline_seconds=120.0,
                                     waiting_for="checkpoint")


def test_busy_before_the_first_mark_uses_the_busy_timeout() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    detector.activity(0, messages.ActivityKind.RESTORE, True, at=1.0)

    assert detector.overdue(now=100.0) == []  # past startup_timeout (30 s), within busy
    (late,) = detector.overdue(now=122.0)
    assert late.waiting_for == "restore"


def test_end_of_activity_returns_to_the_step_deadline_from_its_end() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    _steps(detector, 0, [0.0, 1.0])  # deadline 10 s
    detector.activity(0, messages.ActivityKind.USER, True, at=2.0)
    detector.activity(0, messages.ActivityKind.USER, False, at=90.0)

    detector.mark(0, BEGIN, at=90.5)  # 1.5 s of step time since the last start: 15 s deadline

    assert detector.overdue(now=105.0) == []
    (late,) = detector.overdue(now=106.0)
    assert (late.waiting_for, late.silent_seconds) == ("end of step", 15.5)


def test_busy_time_is_excluded_from_the_step_interval() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    detector.mark(0, BEGIN, at=0.0)
    detector.activity(0, CHECKPOINT, True, at=0.5)
    detector.activity(0, CHECKPOINT, False, at=50.5)  # 50 s checkpoint
    detector.mark(0, BEGIN, at=51.0)  # 51 s since the last begin, 1 s of it stepping

    assert detector.step_deadline() == 10.0


def test_two_busy_periods_in_one_step_are_both_excluded() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    detector.mark(0, BEGIN, at=0.0)
    detector.activity(0, CHECKPOINT, True, at=0.2)
    detector.activity(0, CHECKPOINT, False, at=20.2)
    detector.activity(0, messages.ActivityKind.USER, True, at=20.5)
    detector.activity(0, messages.ActivityKind.USER, False, at=40.5)
    detector.mark(0, BEGIN, at=41.0)  # 41 s, 40 s busy

    assert detector.step_deadline() == pytest.approx(10.0)


def test_busy_time_counts_only_for_the_step_it_fell_in() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    detector.mark(0, BEGIN, at=0.0)
    detector.activity(0, CHECKPOINT, True, at=0.5)
    detector.activity(0, CHECKPOINT, False, at=30.5)
    detector.mark(0, BEGIN, at=31.0)  # 1 s
    detector.mark(0, BEGIN, at=34.0)  # 3 s, nothing to exclude

    assert detector.step_deadline() == 30.0


def _busy(detector: heartbeat.HangDetector, rank: int, kind: messages.ActivityKind,
          start: float, seconds: float) -> None:
    detector.activity(rank, kind, True, at=start)
    detector.activity(rank, kind, False, at=start + seconds)


def test_busy_deadline_adapts_to_the_periods_of_its_kind() -> None:
    settings = dataclasses.replace(SETTINGS, busy_floor=5.0, busy_timeout=1800.0)
    detector = _detector(settings)
    detector.start(0, at=0.0)
    detector.mark(0, BEGIN, at=0.0)
    assert detector.busy_deadline(CHECKPOINT) == 1800.0  # nothing seen yet: the cap
    _busy(detector, 0, CHECKPOINT, 1.0, 0.2)  # 10 x 0.2 s = 2 s: the floor, 5 s
    _busy(detector, 0, messages.ActivityKind.USER, 2.0, 40.0)  # 400 s, for user work only

    assert detector.busy_deadline(CHECKPOINT) == 5.0
    assert detector.busy_deadline(messages.ActivityKind.USER) == 400.0
    assert detector.busy_deadline(messages.ActivityKind.RESTORE) == 1800.0
    detector.activity(0, CHECKPOINT, True, at=50.0)
    assert detector.overdue(now=55.0) == []
    (late,) = detector.overdue(now=55.5)
    assert late == heartbeat.Overdue(rank=0, silent_seconds=5.5, deadline_seconds=5.0,
                                     waiting_for="checkpoint")


def test_busy_deadline_is_capped_by_the_busy_timeout_and_survives_a_restart() -> None:
    detector = _detector()  # busy_timeout 120 s, busy_floor 60 s
    detector.start(0, at=0.0)
    _busy(detector, 0, messages.ActivityKind.RESTORE, 0.0, 30.0)  # 10 x 30 s = 300 s
    assert detector.busy_deadline(messages.ActivityKind.RESTORE) == 120.0

    detector.start(0, at=100.0)  # a new process: the job's restores took that long before
    detector.activity(0, messages.ActivityKind.RESTORE, True, at=101.0)
    (late,) = detector.overdue(now=222.0)
    assert (late.waiting_for, late.deadline_seconds) == ("restore", 120.0)


def test_busy_work_cut_short_makes_the_next_deadline_grow() -> None:
    detector = _detector(dataclasses.replace(SETTINGS, busy_floor=5.0, busy_timeout=1000.0))
    detector.start(0, at=0.0)
    _busy(detector, 0, messages.ActivityKind.RESTORE, 0.0, 0.3)  # from memory: 5 s deadline
    detector.start(0, at=10.0)
    detector.activity(0, messages.ActivityKind.RESTORE, True, at=11.0)  # from disk, slower
    assert [o.rank for o in detector.overdue(now=16.5)] == [0]

    detector.forget(0, at=16.5)  # the agent ended it: it lasted at least 5.5 s
    assert detector.busy_deadline(messages.ActivityKind.RESTORE) == 55.0
    detector.start(0, at=20.0)
    detector.activity(0, messages.ActivityKind.RESTORE, True, at=21.0)  # the same work again
    detector.start(0, at=40.0)  # replaced while busy counts as well: 19 s
    assert detector.busy_deadline(messages.ActivityKind.RESTORE) == 190.0


# --- stopped processes --------------------------------------------------------------------------

STOPPED = heartbeat.HeartbeatSettings(floor=2.0, cap=60.0, stopped_timeout=1.0)


@pytest.mark.parametrize(("prepare", "doing"), [
    (lambda d: None, "start-up"),
    (lambda d: d.mark(0, BEGIN, at=1.0), "a step"),
    (lambda d: (d.mark(0, BEGIN, at=1.0), d.mark(0, END, at=1.5)), "the time between steps"),
    (lambda d: d.activity(0, CHECKPOINT, True, at=1.0), "checkpoint"),
    (lambda d: d.activity(0, messages.ActivityKind.RESTORE, True, at=1.0), "restore"),
    (lambda d: d.activity(0, messages.ActivityKind.USER, True, at=1.0), "user"),
])
def test_a_stopped_process_is_a_hang_whatever_it_was_doing(
        prepare: Callable[[heartbeat.HangDetector], object], doing: str) -> None:
    detector = _detector(STOPPED)
    detector.start(0, at=0.0)
    detector.start(1, at=0.0)  # still starting: holds everyone's step deadline up
    prepare(detector)
    detector.stopped(0, True, at=2.0)
    detector.stopped(0, True, at=2.5)  # still stopped: the stop began at 2.0

    assert detector.overdue(now=3.0) == []
    (late,) = detector.overdue(now=3.1)
    assert late.rank == 0
    assert late.deadline_seconds == 1.0
    assert late.describe() == (f"no mark for 1.1 s while waiting for its stopped process to "
                               f"continue (in {doing}); deadline 1.0 s")


def test_a_process_that_continued_is_judged_as_before() -> None:
    detector = _detector(STOPPED)
    detector.start(0, at=0.0)
    detector.activity(0, CHECKPOINT, True, at=1.0)
    detector.stopped(0, True, at=2.0)
    detector.stopped(0, False, at=2.9)  # continued (a profiler's short stop)
    detector.stopped(0, True, at=3.5)  # a new stop counts from its own start

    assert detector.overdue(now=4.4) == []
    assert [o.rank for o in detector.overdue(now=4.6)] == [0]


def test_stopped_reports_for_unknown_ranks_are_ignored() -> None:
    detector = _detector(STOPPED)
    detector.stopped(3, True, at=0.0)

    assert detector.overdue(now=100.0) == []


# --- forget, start, ordering --------------------------------------------------------------------


def test_forget_stops_watching_a_rank() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    detector.start(1, at=0.0)

    detector.forget(0, at=0.0)
    detector.forget(5, at=0.0)  # unknown: nothing happens

    assert [o.rank for o in detector.overdue(now=1000.0)] == [1]
    detector.mark(0, BEGIN, at=1000.0)  # marks of a forgotten rank are ignored
    assert [o.rank for o in detector.overdue(now=1000.0)] == [1]


def test_start_resets_a_rank() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    detector.mark(0, BEGIN, at=1.0)
    detector.activity(0, CHECKPOINT, True, at=2.0)

    detector.start(0, at=200.0)  # the old process was replaced

    assert detector.overdue(now=229.0) == []
    (late,) = detector.overdue(now=231.0)
    assert (late.waiting_for, late.silent_seconds) == ("first mark", 31.0)


def test_start_forgets_the_last_begin_of_the_old_process() -> None:
    detector = _detector()
    detector.start(0, at=0.0)
    detector.mark(0, BEGIN, at=0.0)
    detector.start(0, at=500.0)
    detector.mark(0, BEGIN, at=505.0)  # first begin of the new process: no 505 s interval

    assert detector.step_deadline() == 60.0  # still no interval: the cap
    detector.mark(0, BEGIN, at=505.5)
    assert detector.step_deadline() == 5.0


def test_overdue_lists_the_longest_silent_first() -> None:
    detector = _detector()
    for rank in range(4):
        detector.start(rank, at=0.0)
    detector.mark(0, BEGIN, at=5.0)  # cap 60 s, silent from 5
    detector.mark(2, BEGIN, at=1.0)  # silent from 1
    detector.activity(3, CHECKPOINT, True, at=0.0)  # busy: 120 s allowed
    # rank 1 never marked: startup 30 s, silent from 0

    late = detector.overdue(now=70.0)

    # Ranks 1 (starting) and 3 (busy) hold the others up: 0 and 2 are not judged meanwhile.
    assert [(o.rank, o.silent_seconds) for o in late] == [(1, 70.0)]
    detector.mark(1, BEGIN, at=70.0)
    detector.activity(3, CHECKPOINT, False, at=70.0)
    late = detector.overdue(now=71.0)
    assert [(o.rank, o.silent_seconds) for o in late] == [(2, 70.0), (0, 66.0)]


def test_ranks_told_to_leave_get_the_deadline_of_what_they_are_doing() -> None:
    # A rank leaves at its step's next collective, or at its next step boundary.
    settings = dataclasses.replace(SETTINGS, idle_timeout=300.0)
    detector = _detector(settings)
    for rank in range(4):
        detector.start(rank, at=0.0)
    assert detector.leave_deadline([0, 1]) == 30.0  # starting: the startup timeout
    _steps(detector, 0, [0.0, 0.01, 0.02])  # in a step of 10 ms ones: the floor
    assert detector.leave_deadline([0]) == 2.0
    _steps(detector, 1, [0.0, 1.0])  # in a step, the longest interval 1 s
    assert detector.leave_deadline([0, 1]) == 10.0
    detector.mark(2, BEGIN, at=0.0)
    detector.mark(2, END, at=0.5)  # between steps: the idle timeout
    assert detector.leave_deadline([0, 2]) == 300.0
    detector.activity(3, CHECKPOINT, True, at=1.0)  # busy: its kind's deadline
    assert detector.leave_deadline([0, 3]) == 120.0
    detector.forget(0, at=2.0)
    assert detector.leave_deadline([0]) == 60.0  # none watched: the cap
    assert detector.leave_deadline([]) == 60.0


# --- properties ---------------------------------------------------------------------------------

positive = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def settings_strategy(draw: st.DrawFn) -> heartbeat.HeartbeatSettings:
    floor = draw(positive)
    cap = floor + draw(st.floats(min_value=0.0, max_value=1e6))
    factor = draw(st.floats(min_value=1.0, max_value=100.0))
    window = draw(st.integers(min_value=1, max_value=20))
    return heartbeat.HeartbeatSettings(floor=floor, cap=cap, factor=factor, window=window,
                                       startup_timeout=draw(positive),
                                       busy_timeout=draw(positive), busy_floor=draw(positive),
                                       stopped_timeout=draw(positive))


@given(settings=settings_strategy(), intervals=st.lists(positive, max_size=30))
def test_step_deadline_is_always_within_floor_and_cap(
    settings: heartbeat.HeartbeatSettings, intervals: list[float]
) -> None:
    detector = heartbeat.HangDetector(settings)
    detector.start(0, at=0.0)
    at = 0.0
    detector.mark(0, BEGIN, at=at)
    for interval in intervals:
        at += interval
        detector.mark(0, BEGIN, at=at)

    deadline = detector.step_deadline()

    assert settings.floor <= deadline <= settings.cap


@given(settings=settings_strategy(), period_fraction=st.floats(min_value=1e-3, max_value=1.0),
       steps=st.integers(min_value=1, max_value=30), ranks=st.integers(min_value=1, max_value=4))
def test_a_rank_marking_regularly_is_never_overdue(
    settings: heartbeat.HeartbeatSettings, period_fraction: float, steps: int, ranks: int
) -> None:
    period = settings.cap * period_fraction  # a step no longer than the cap
    assume(period > 0)
    detector = heartbeat.HangDetector(settings)
    for rank in range(ranks):
        detector.start(rank, at=0.0)
    for step in range(steps):
        at = step * period
        for rank in range(ranks):
            detector.mark(rank, BEGIN, at=at)
        # Between this step's begin and the next one, nobody is late.
        assert detector.overdue(now=at + period * 0.25) == []
        assert detector.overdue(now=at + period * 0.99) == []


# --- which rank hung ----------------------------------------------------------------------------


def _overdue(*ranks_and_silence: tuple[int, float]) -> list[heartbeat.Overdue]:
    return [heartbeat.Overdue(rank, silent, 2.0, "end of step")
            for rank, silent in ranks_and_silence]


def test_a_stopped_process_is_the_hung_rank_even_if_others_went_silent_first() -> None:
    suspects = [heartbeat.Suspect(0, 10, False), heartbeat.Suspect(1, 10, False),
                heartbeat.Suspect(2, 9, True)]
    rank, deadline = heartbeat.hung_rank(suspects, _overdue((0, 3.0), (1, 2.5)))
    assert rank == 2
    assert deadline.rank == 0  # it had not broken its own deadline yet: the first one broken


def test_else_the_rank_furthest_behind() -> None:
    suspects = [heartbeat.Suspect(0, 10, False), heartbeat.Suspect(1, 9, False),
                heartbeat.Suspect(2, 10, False)]
    rank, deadline = heartbeat.hung_rank(suspects, _overdue((0, 3.0), (1, 2.1), (2, 2.9)))
    assert (rank, deadline.rank) == (1, 1)


def test_among_equals_the_longest_silent() -> None:
    suspects = [heartbeat.Suspect(0, 10, False), heartbeat.Suspect(1, 10, False)]
    rank, _ = heartbeat.hung_rank(suspects, _overdue((0, 2.1), (1, 2.9)))
    assert rank == 1


def test_a_rank_that_never_marked_is_furthest_behind() -> None:
    suspects = [heartbeat.Suspect(0, 3, False), heartbeat.Suspect(1, None, False)]
    rank, _ = heartbeat.hung_rank(suspects, _overdue((1, 700.0)))
    assert rank == 1


busy_kinds = st.sampled_from(list(messages.ActivityKind))


@given(settings=settings_strategy(),
       periods=st.lists(st.tuples(busy_kinds, positive), max_size=30), kind=busy_kinds)
def test_busy_deadline_is_within_floor_and_busy_timeout(
    settings: heartbeat.HeartbeatSettings, periods: list[tuple[messages.ActivityKind, float]],
    kind: messages.ActivityKind,
) -> None:
    detector = heartbeat.HangDetector(settings)
    detector.start(0, at=0.0)
    at = 0.0
    for period_kind, seconds in periods:
        _busy(detector, 0, period_kind, at, seconds)
        at += seconds

    deadline = detector.busy_deadline(kind)

    assert min(settings.busy_floor, settings.busy_timeout) <= deadline <= settings.busy_timeout
    if not any(period_kind is kind for period_kind, _ in periods):
        assert deadline == settings.busy_timeout


@given(settings=settings_strategy(), kind=busy_kinds,
       fractions=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=10))
def test_busy_work_no_longer_than_recent_work_is_never_overdue(
    settings: heartbeat.HeartbeatSettings, kind: messages.ActivityKind, fractions: list[float],
) -> None:
    detector = heartbeat.HangDetector(settings)
    detector.start(0, at=0.0)
    detector.mark(0, BEGIN, at=0.0)
    recent = collections.deque([settings.busy_timeout * 0.9], maxlen=settings.window)
    _busy(detector, 0, kind, 0.0, recent[0])
    # Every period starts at 0, so that its length is exact in floating point: the property
    # is about lengths, and (at + s) - at may exceed s by one unit in the last place.
    for fraction in fractions:  # each period at most the longest of the last window ones
        seconds = max(recent) * fraction
        detector.activity(0, kind, True, at=0.0)
        assert detector.overdue(now=seconds) == []
        detector.activity(0, kind, False, at=seconds)
        recent.append(seconds)


@given(settings=settings_strategy(), stop_at=positive, ranks=st.integers(1, 4),
       busy=st.one_of(st.none(), busy_kinds), starting=st.booleans())
def test_a_rank_stopped_past_the_stopped_timeout_is_always_overdue(
    settings: heartbeat.HeartbeatSettings, stop_at: float, ranks: int,
    busy: messages.ActivityKind | None, starting: bool,
) -> None:
    detector = heartbeat.HangDetector(settings)
    for rank in range(ranks):
        detector.start(rank, at=0.0)
        if not starting:
            detector.mark(rank, BEGIN, at=0.0)
    if busy is not None:
        detector.activity(0, busy, True, at=0.0)
    detector.stopped(0, True, at=stop_at)

    late = detector.overdue(now=stop_at + settings.stopped_timeout * 1.01 + 1e-6)

    assert 0 in [o.rank for o in late]
