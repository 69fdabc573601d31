"""Replaying a timeline of device fault events (``trainguard faults replay``): parsing, and the
level changes a realistic timeline gives with the original's default configuration."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from trainguard.faults.config_problems import Action
from trainguard.faults.device import device_health, replay
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent, UpgradeType
from trainguard.faults.levels import FaultType, Level, ResetPolicy

LINK_DOWN = "81078603"
HOURS_4 = 4 * 3600.0
RELEASE_WINDOW = 172800.0  # the default rule of 81078603
RECOVER_TIMEOUT = 60.0  # the default FaultDuration of 81078603
FAULT_TIMEOUT = 20.0


def _lines(*records: dict[str, Any] | str) -> list[str]:
    return [record if isinstance(record, str) else json.dumps(record) + "\n"
            for record in records]


def _parse_error(*records: dict[str, Any] | str) -> str:
    with pytest.raises(replay.TimelineError) as caught:
        replay.parse_timeline(_lines(*records))
    return str(caught.value)


def _replay(records: Iterable[dict[str, Any] | str], *, period: float = 1.0,
            until: float | None = None) -> list[replay.LevelChange]:
    parsed = replay.parse_timeline(_lines(*records))
    return list(replay.replay(parsed, engine=device_health.FaultEngine(), period=period,
                              until=until))


def _level_at(changes: Sequence[replay.LevelChange], time: float,
              device: str = "npu-0") -> Level:
    level = Level.NORMAL_NPU
    for change in changes:
        if change.device == device and change.time <= time:
            level = change.after
    return level


# --- parsing ----------------------------------------------------------------------------------


def test_an_event_record() -> None:
    (record,) = replay.parse_timeline(_lines(
        {"time": 12.5, "device": "npu-3", "code": "80e01801", "assertion": "once"}))

    assert record == replay.TimelineRecord(
        1, 12.5, event=DeviceFaultEvent("npu-3", "80e01801", Assertion.ONCE, 12.5))


def test_the_assertion_defaults_to_occur() -> None:
    (record,) = replay.parse_timeline(_lines({"time": 1, "device": "d", "code": "80E01801"}))

    assert record.event is not None
    assert record.event.assertion is Assertion.OCCUR
    assert record.time == 1.0


def test_a_release_record_and_a_tick() -> None:
    release, tick = replay.parse_timeline(_lines({"time": 9, "device": "npu-0", "release": True},
                                                 {"time": 10}))

    assert release == replay.TimelineRecord(1, 9.0, release="npu-0")
    assert tick == replay.TimelineRecord(2, 10.0)


def test_a_customization_record() -> None:
    (record,) = replay.parse_timeline(_lines({"time": 5, "customization": {
        "FaultFrequency": [{"EventId": ["80E18005"], "TimeWindow": 30, "Times": 2,
                            "FaultHandling": "ManuallySeparateNPU"}]}}))

    assert record.customization is not None
    assert record.event is None
    assert record.customization.frequency == {}  # the rule's TimeWindow is out of range
    where = [(p.file, p.entry, p.field, p.action) for p in record.problems]
    assert ("line 1 customization", "FaultFrequency[0]", "TimeWindow",
            Action.IGNORED) in where
    assert ("line 1 customization", "GraceTolerance", "", Action.DEFAULT_USED) in where


def test_comments_and_blank_lines_are_skipped_and_still_counted() -> None:
    records = replay.parse_timeline([
        "# a link that flaps\n", "\n", "   \n", "  # indented comment\n",
        json.dumps({"time": 0, "device": "npu-0", "code": LINK_DOWN}) + "\n",
        "\n",
        json.dumps({"time": 30, "device": "npu-0", "code": LINK_DOWN,
                    "assertion": "recover"}),
    ])

    assert [record.line for record in records] == [5, 7]


def test_an_empty_timeline() -> None:
    assert replay.parse_timeline([]) == []
    assert replay.parse_timeline(["# nothing\n", "\n"]) == []
    assert _replay([], until=100.0) == []


@pytest.mark.parametrize(("value", "seconds"), [
    ("2025-01-01T00:00:00Z", 1735689600.0),
    ("2025-01-01T00:00:00+00:00", 1735689600.0),
    ("2025-01-01T01:00:00+01:00", 1735689600.0),
    ("2025-01-01T00:00:00", 1735689600.0),  # UTC unless it says
    ("2025-01-01 00:00:01.5", 1735689601.5),
    (1735689600, 1735689600.0),
    (0.25, 0.25),
])
def test_parse_time(value: object, seconds: float) -> None:
    assert replay.parse_time(value, line=1) == seconds


def test_iso_times_in_a_timeline() -> None:
    first, second = replay.parse_timeline(_lines(
        {"time": "2025-04-09T03:14:28Z", "device": "npu-0", "code": LINK_DOWN},
        {"time": "2025-04-09T03:14:58.259Z", "device": "npu-0", "code": LINK_DOWN,
         "assertion": "recover"}))

    assert second.time - first.time == pytest.approx(30.259)
    assert second.event is not None
    assert second.event.time == second.time


@pytest.mark.parametrize(("records", "message"), [
    (("{\"time\": 0, \"device\": \"npu-0\", \"code\": \"81078603\"\n",),
     r"line 1: not JSON \(.+\)"),
    (({"time": 0}, "[1, 2]\n"), r"line 2: expected a JSON object"),
    (({"device": "npu-0", "code": LINK_DOWN},), r"line 1: time: missing"),
    (({"time": None, "device": "npu-0", "code": LINK_DOWN},),
     r"line 1: time: expected seconds or an ISO-8601 time, got None"),
    (({"time": True, "device": "npu-0", "code": LINK_DOWN},),
     r"line 1: time: expected seconds or an ISO-8601 time, got True"),
    (({"time": "2025-13-01T00:00:00Z", "device": "npu-0", "code": LINK_DOWN},),
     r"line 1: time: '2025-13-01T00:00:00Z' is not an ISO-8601 time"),
    (({"time": "yesterday", "device": "npu-0", "code": LINK_DOWN},),
     r"line 1: time: 'yesterday' is not an ISO-8601 time"),
    (("{\"time\": Infinity, \"device\": \"npu-0\", \"code\": \"81078603\"}\n",),
     r"line 1: time: inf is not a finite number"),
    (({"time": 0, "code": LINK_DOWN},), r"line 1: device: expected a device name, got None"),
    (({"time": 0, "device": "", "code": LINK_DOWN},),
     r"line 1: device: expected a device name, got ''"),
    (({"time": 0, "device": 3, "code": LINK_DOWN},),
     r"line 1: device: expected a device name, got 3"),
    (({"time": 0, "device": "npu-0"},), r"line 1: code: expected a fault code, got None"),
    (({"time": 0, "device": "npu-0", "code": " "},),
     r"line 1: code: expected a fault code, got ' '"),
    (({"time": 0, "device": "npu-0", "code": 5},),
     r"line 1: code: expected a fault code, got 5"),
    (({"time": 0, "device": "npu-0", "release": False},),
     r"line 1: code: expected a fault code, got None"),
    (({"time": 0, "device": "npu-0", "code": LINK_DOWN, "assertion": "sometimes"},),
     r"line 1: assertion: 'sometimes' is not one of occur, recover, once"),
    (({"time": 0, "device": "npu-0", "code": LINK_DOWN, "assertion": "OCCUR"},),
     r"line 1: assertion: 'OCCUR' is not one of occur, recover, once"),
])
def test_parse_errors_name_the_line_and_the_field(records: tuple[dict[str, Any] | str, ...],
                                                  message: str) -> None:
    assert re.fullmatch(message, _parse_error(*records))


def test_a_time_going_back_is_refused_with_both_times() -> None:
    message = _parse_error({"time": 0}, "# a comment\n", {"time": 10}, {"time": 5})

    assert message == ("line 4: time: 5.0 is earlier than the line before (10.0); a timeline "
                       "is in time order")


def test_equal_times_are_in_order() -> None:
    records = replay.parse_timeline(_lines({"time": 5}, {"time": 5},
                                           {"time": "1970-01-01T00:00:05Z"}))

    assert [record.time for record in records] == [5.0, 5.0, 5.0]


def test_a_bad_line_after_good_ones_names_its_own_number() -> None:
    message = _parse_error({"time": 0}, "\n", {"time": 1, "device": "npu-0", "code": LINK_DOWN},
                           {"time": 2, "device": "npu-0"})

    assert message.startswith("line 4: code: ")


def test_a_code_that_is_not_a_fault_code_is_refused() -> None:
    assert _parse_error({"time": 0, "device": "npu-0", "code": "80E0 1801"}).startswith(
        "line 1: code: ")


def test_replay_refuses_a_period_not_above_zero() -> None:
    with pytest.raises(ValueError, match="period must be > 0 seconds, got 0"):
        list(replay.replay([], engine=device_health.FaultEngine(), period=0.0))


# --- replaying --------------------------------------------------------------------------------


def test_each_change_names_its_cause() -> None:
    changes = _replay([
        {"time": 0, "device": "npu-0", "code": "80E3A201"},
        {"time": 5, "device": "npu-0", "code": "80E3A201", "assertion": "recover"},
    ])

    assert [(c.time, c.before, c.after, c.fault_type, c.reset_policy, c.cause)
            for c in changes] == [
        (0.0, Level.NORMAL_NPU, Level.SEPARATE_NPU, FaultType.CARD_UNHEALTHY,
         ResetPolicy.ISOLATE, "line 1: 80E3A201 occur"),
        (5.0, Level.SEPARATE_NPU, Level.NORMAL_NPU, None, ResetPolicy.EMPTY,
         "line 2: 80E3A201 recover"),
    ]
    assert changes[1].to_data() == {
        "time": 5.0, "device": "npu-0", "before": "SeparateNPU", "after": "NormalNPU",
        "fault_type": None, "reset_policy": "empty", "cause": "line 2: 80E3A201 recover",
        "added": [], "removed": []}


def test_nothing_changes_nothing_is_reported() -> None:
    changes = _replay([
        {"time": 0, "device": "npu-0", "code": "80E3A201"},
        {"time": 1, "device": "npu-0", "code": "80E3A201"},  # already there
        {"time": 2},
    ], until=50.0)

    assert len(changes) == 1


def test_period_one_gives_the_change_times_to_within_a_second() -> None:
    changes = _replay([
        {"time": 0, "device": "npu-0", "code": LINK_DOWN},
        {"time": 100, "device": "npu-0", "code": LINK_DOWN, "assertion": "recover"},
    ], period=1.0, until=400.0)

    assert [(c.before, c.after, c.cause) for c in changes] == [
        (Level.NORMAL_NPU, Level.NOT_HANDLE_FAULT, f"line 1: {LINK_DOWN} occur"),
        (Level.NOT_HANDLE_FAULT, Level.PRE_SEPARATE_NPU, "time passed"),
        (Level.PRE_SEPARATE_NPU, Level.NORMAL_NPU, "time passed"),
    ]
    # Above FaultTimeout (20 s) after the occur; above RecoverTimeout (60 s) after the recover.
    assert FAULT_TIMEOUT < changes[1].time <= FAULT_TIMEOUT + 1.0
    assert 100.0 + RECOVER_TIMEOUT < changes[2].time <= 100.0 + RECOVER_TIMEOUT + 1.0


def test_a_longer_period_sees_the_changes_later() -> None:
    changes = _replay([
        {"time": 0, "device": "npu-0", "code": LINK_DOWN},
        {"time": 100, "device": "npu-0", "code": LINK_DOWN, "assertion": "recover"},
    ], period=30.0, until=400.0)

    assert [c.time for c in changes] == [0.0, 30.0, 190.0]


def test_a_tick_record_evaluates_at_its_time() -> None:
    changes = _replay([
        {"time": 0, "device": "npu-0", "code": LINK_DOWN},
        {"time": 25},
    ], period=1000.0)

    assert [(c.time, c.after, c.cause) for c in changes][-1] == (
        25.0, Level.PRE_SEPARATE_NPU, "line 2")


def test_release_by_an_operator() -> None:
    changes = _replay([
        {"time": 0, "device": "npu-0", "code": "80E01801", "assertion": "once"},
        {"time": 10, "device": "npu-0", "code": "80E01801", "assertion": "once"},
        {"time": 100, "device": "npu-0", "release": True},
    ], until=200.0)

    separated = [c for c in changes if c.after is Level.MANUALLY_SEPARATE_NPU]
    assert [(c.time, c.cause) for c in separated] == [(10.0, "line 2: 80E01801 once")]
    released = changes[-1]
    assert (released.time, released.before, released.after) == (
        100.0, Level.MANUALLY_SEPARATE_NPU, Level.NORMAL_NPU)
    assert released.cause == "line 3: released by an operator"
    assert [(r.fault_code, r.upgrade_type) for r in released.removed] == [
        ("80E01801", UpgradeType.FAULT_FREQUENCY)]


def test_a_customization_record_takes_effect_from_its_time() -> None:
    raise_on_first = {"GraceTolerance": {"WaitProcessReadCMTime": 30,
                                         "WaitDeviceResetTime": 150,
                                         "WaitFaultSelfHealingTime": 15},
                      "FaultFrequency": [{"EventId": ["80C98002"], "TimeWindow": 3600,
                                          "Times": 2, "FaultHandling": "SeparateNPU",
                                          "ReleaseTimeWindow": 600}]}
    changes = _replay([
        {"time": 0, "device": "npu-0", "code": "80C98002", "assertion": "once"},
        {"time": 10, "device": "npu-0", "code": "80C98002", "assertion": "once"},
        {"time": 20, "customization": raise_on_first},
        {"time": 30, "device": "npu-0", "code": "80C98002", "assertion": "once"},
        {"time": 40, "device": "npu-0", "code": "80C98002", "assertion": "once"},
    ], until=2000.0)

    raised = [c for c in changes if c.after is Level.SEPARATE_NPU]
    assert [c.time for c in raised] == [40.0]  # the first two came before the rule
    assert [(r.fault_code, r.upgrade_type) for r in raised[0].added] == [
        ("80C98002", UpgradeType.FAULT_FREQUENCY)]
    lowered = changes[-1]  # 600 s after the last (once, so recovered) occurrence
    assert lowered.after is Level.NORMAL_NPU
    assert 640.0 < lowered.time <= 641.0
    assert [r.fault_code for r in lowered.removed] == ["80C98002"]


# --- the realistic flapping link ------------------------------------------------------------


def _flapping_timeline() -> list[dict[str, Any]]:
    """Five outages of the parameter-plane link of 25 s each, 4 h apart, and between the
    second and the third one of 10 s, shorter than FaultTimeout, which must not count."""
    records: list[dict[str, Any]] = [{"time": 0}]
    for outage in range(5):
        start = outage * HOURS_4
        records.append({"time": start, "device": "npu-0", "code": LINK_DOWN,
                        "assertion": "occur"})
        records.append({"time": start + 25, "device": "npu-0", "code": LINK_DOWN,
                        "assertion": "recover"})
        if outage == 1:
            records.append({"time": start + 7200, "device": "npu-0", "code": LINK_DOWN,
                            "assertion": "occur"})
            records.append({"time": start + 7210, "device": "npu-0", "code": LINK_DOWN,
                            "assertion": "recover"})
    return records


@pytest.fixture(scope="module")
def flapping() -> list[replay.LevelChange]:
    last_recovery = 4 * HOURS_4 + 25
    return _replay(_flapping_timeline(), period=1.0,
                   until=last_recovery + RECOVER_TIMEOUT + RELEASE_WINDOW + 600)


def test_flapping_link_is_pre_separated_while_each_long_outage_lasts(
        flapping: list[replay.LevelChange]) -> None:
    for outage in range(4):
        start = outage * HOURS_4
        assert _level_at(flapping, start + 1) is Level.NOT_HANDLE_FAULT
        assert _level_at(flapping, start + 20) is Level.NOT_HANDLE_FAULT
        assert _level_at(flapping, start + 21) is Level.PRE_SEPARATE_NPU
        assert _level_at(flapping, start + 25) is Level.PRE_SEPARATE_NPU
        # The duration reason goes once the link has been up more than RecoverTimeout.
        assert _level_at(flapping, start + 25 + RECOVER_TIMEOUT) is Level.PRE_SEPARATE_NPU
        assert _level_at(flapping, start + 25 + RECOVER_TIMEOUT + 1) is Level.NORMAL_NPU
        raised = [c for c in flapping
                  if start <= c.time < start + 3600 and c.after is Level.PRE_SEPARATE_NPU]
        (change,) = raised
        assert change.fault_type is FaultType.CARD_NETWORK_UNHEALTHY
        assert change.reset_policy is ResetPolicy.ISOLATE
        assert [(r.fault_code, r.fault_level, r.upgrade_type) for r in change.added] == [
            (LINK_DOWN, Level.PRE_SEPARATE_NPU, UpgradeType.FAULT_DURATION)]


def test_flapping_link_short_outage_does_not_count(flapping: list[replay.LevelChange]) -> None:
    start = HOURS_4 + 7200
    during = [c for c in flapping if start <= c.time <= start + 3600]

    assert [(c.after, c.cause) for c in during] == [
        (Level.NOT_HANDLE_FAULT, f"line 6: {LINK_DOWN} occur"),
        (Level.NORMAL_NPU, f"line 7: {LINK_DOWN} recover")]
    # Had it counted, the fourth long outage would have been the fifth.
    assert _level_at(flapping, 3 * HOURS_4 + 30) is Level.PRE_SEPARATE_NPU


def test_flapping_link_is_manually_separated_at_the_fifth_long_outage(
        flapping: list[replay.LevelChange]) -> None:
    separated = [c for c in flapping if c.after is Level.MANUALLY_SEPARATE_NPU
                 and c.before is not Level.MANUALLY_SEPARATE_NPU]

    (change,) = separated
    fifth = 4 * HOURS_4
    assert fifth + FAULT_TIMEOUT < change.time <= fifth + FAULT_TIMEOUT + 1
    assert change.cause == "time passed"
    assert change.reset_policy is ResetPolicy.ISOLATE
    assert sorted((r.upgrade_type, r.fault_level) for r in change.added) == [
        (UpgradeType.FAULT_DURATION, Level.PRE_SEPARATE_NPU),
        (UpgradeType.FAULT_FREQUENCY, Level.MANUALLY_SEPARATE_NPU)]
    assert {r.fault_code for r in change.added} == {LINK_DOWN}
    # It stays after the link is back, and the duration reason goes as before.
    assert _level_at(flapping, fifth + 3600) is Level.MANUALLY_SEPARATE_NPU
    duration_gone = [c for c in flapping if fifth < c.time < fifth + 3600
                     and [r.upgrade_type for r in c.removed] == [UpgradeType.FAULT_DURATION]]
    assert len(duration_gone) == 1


def test_flapping_link_is_released_after_the_release_window_without_a_new_fault(
        flapping: list[replay.LevelChange]) -> None:
    released = flapping[-1]
    recovered = 4 * HOURS_4 + 25 + RECOVER_TIMEOUT  # the duration's flip back to healthy

    assert (released.before, released.after) == (Level.MANUALLY_SEPARATE_NPU, Level.NORMAL_NPU)
    assert released.cause == "time passed"
    assert recovered + RELEASE_WINDOW < released.time <= recovered + RELEASE_WINDOW + 1
    assert [(r.fault_code, r.fault_level, r.upgrade_type) for r in released.removed] == [
        (LINK_DOWN, Level.MANUALLY_SEPARATE_NPU, UpgradeType.FAULT_FREQUENCY)]
    assert released.added == ()
    assert _level_at(flapping, recovered + RELEASE_WINDOW - 1) is Level.MANUALLY_SEPARATE_NPU


def test_flapping_link_is_not_released_without_until() -> None:
    changes = _replay(_flapping_timeline(), period=1.0)

    assert changes[-1].after is Level.MANUALLY_SEPARATE_NPU


@pytest.mark.parametrize(("seconds", "released"), [(25, False), (5, True)])
def test_flapping_link_release_waits_for_a_window_without_a_counted_fault(
        seconds: int, released: bool) -> None:
    # A day after the fifth outage, one more: a long one is a fault for FaultFrequency and
    # starts the release window again; a short one is not (the rule has a FaultDuration).
    records = _flapping_timeline()
    again = 4 * HOURS_4 + 86400
    records += [{"time": again, "device": "npu-0", "code": LINK_DOWN},
                {"time": again + seconds, "device": "npu-0", "code": LINK_DOWN,
                 "assertion": "recover"}]
    first_release = 4 * HOURS_4 + 25 + RECOVER_TIMEOUT + RELEASE_WINDOW
    changes = _replay(records, period=60.0, until=first_release + 600)

    assert (_level_at(changes, first_release + 600) is Level.NORMAL_NPU) is released
