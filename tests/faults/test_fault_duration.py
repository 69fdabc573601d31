"""The FaultDuration state machine of one (event id, device), step by step (NOTES §2.3)."""

from __future__ import annotations

from collections.abc import Sequence

from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.device.fault_duration import DurationTrack, Flip

FAULT_TIMEOUT = 20.0
RECOVER_TIMEOUT = 60.0


def track_with(*events: tuple[str, float], timeout: bool = False) -> DurationTrack:
    """A track fed ``("occur" | "recover", time)`` events."""
    track = DurationTrack()
    track.timeout = timeout
    for assertion, time in events:
        track.add(DeviceFaultEvent("npu-0", "81078603", Assertion(assertion), time))
    return track


def advance(track: DurationTrack, now: float) -> Sequence[Flip]:
    return track.advance(now, fault_timeout=FAULT_TIMEOUT, recover_timeout=RECOVER_TIMEOUT)


def test_empty_queue_changes_nothing() -> None:
    track = DurationTrack()

    assert advance(track, 1000.0) == ()
    assert (track.timeout, track.pending) == (False, False)


def test_unpaired_occur_lasting_exactly_the_timeout_does_not_trigger() -> None:
    track = track_with(("occur", 100.0))

    assert advance(track, 120.0) == ()
    assert (track.timeout, track.fault_duration, track.pending) == (False, 20.0, True)


def test_unpaired_occur_lasting_longer_than_the_timeout_triggers_at_start_plus_timeout() -> None:
    track = track_with(("occur", 100.0))

    assert advance(track, 120.5) == [Flip(True, 120.0)]
    assert (track.timeout, track.alarm_time, track.fault_duration) == (True, 120.0, 20.5)
    assert not track.pending


def test_outage_of_exactly_the_timeout_does_not_trigger_and_is_consumed() -> None:
    track = track_with(("occur", 100.0), ("recover", 120.0))

    assert advance(track, 5000.0) == ()
    assert (track.timeout, track.fault_duration, track.pending) == (False, 20.0, False)


def test_first_long_pair_flips_and_the_rest_is_judged_as_recovery() -> None:
    # healthy: (100, 110) is short, (200, 230) is long -> timeout at 220; the recover at 230 is
    # then judged against RecoverTimeout with now
    track = track_with(("occur", 100.0), ("recover", 110.0), ("occur", 200.0),
                       ("recover", 230.0))

    assert advance(track, 240.0) == [Flip(True, 220.0)]
    assert (track.timeout, track.fault_duration, track.recover_duration) == (True, 30.0, 10.0)
    assert track.pending  # the recover at 230 waits for RecoverTimeout

    assert advance(track, 290.0) == ()  # exactly 60 s: still timed out
    assert advance(track, 290.5) == [Flip(False, 290.0)]
    assert (track.timeout, track.recover_duration, track.pending) == (False, 60.5, False)


def test_loop_continues_after_flipping_back_to_healthy() -> None:
    # timed out: recovered at 100 for 100 s (> 60) -> healthy at 160; the occur at 200 is then
    # judged as a new outage against now
    track = track_with(("recover", 100.0), ("occur", 200.0), timeout=True)

    assert advance(track, 215.0) == [Flip(False, 160.0)]
    assert (track.timeout, track.recover_duration, track.fault_duration) == (False, 100.0, 15.0)
    assert advance(track, 221.0) == [Flip(True, 220.0)]


def test_recovery_and_new_timeout_in_one_evaluation_are_both_reported() -> None:
    track = track_with(("occur", 0.0), ("recover", 30.0), ("occur", 100.0))

    assert advance(track, 130.0) == [Flip(True, 20.0), Flip(False, 90.0), Flip(True, 120.0)]
    assert track.timeout


def test_short_recovery_keeps_the_timeout() -> None:
    track = track_with(("recover", 100.0), ("occur", 160.0), ("recover", 170.0), timeout=True)

    assert advance(track, 200.0) == ()  # (100, 160) is exactly 60 s; 170 waits
    assert (track.timeout, track.recover_duration) == (True, 30.0)


def test_leading_recover_is_dropped_while_healthy() -> None:
    track = track_with(("recover", 50.0), ("occur", 100.0))

    assert advance(track, 115.0) == ()
    assert advance(track, 121.0) == [Flip(True, 120.0)]


def test_leading_occur_is_dropped_while_timed_out() -> None:
    track = track_with(("occur", 50.0), ("recover", 100.0), timeout=True)

    assert advance(track, 161.0) == [Flip(False, 160.0)]


def test_repeated_assertions_merge_into_the_first() -> None:
    track = track_with(("occur", 100.0), ("occur", 105.0), ("occur", 110.0), ("recover", 119.0),
                       ("recover", 150.0))

    assert advance(track, 1000.0) == ()  # one outage of 19 s, from the first occur
    assert track.fault_duration == 19.0


def test_events_are_judged_in_time_order() -> None:
    track = track_with(("recover", 130.0), ("occur", 100.0))

    assert advance(track, 131.0) == [Flip(True, 120.0)]
    assert track.pending  # the recover at 130


def test_events_in_the_future_wait() -> None:
    track = track_with(("occur", 100.0))

    assert advance(track, 90.0) == ()
    assert track.pending


def test_zero_thresholds_flip_on_any_duration() -> None:
    track = track_with(("occur", 10.0), ("recover", 10.5))

    flips = track.advance(11.0, fault_timeout=0.0, recover_timeout=0.0)

    assert flips == [Flip(True, 10.0), Flip(False, 10.5)]
