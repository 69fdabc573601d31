"""The FaultEngine hand-over: what a device's health says (the device-info ConfigMap's entries,
its level, reset policy and upgrade reasons) as events come, time passes and operators act."""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.faults.device import customization as customizations
from trainguard.faults.device import device_health, fault_codes, replay
from trainguard.faults.device.device_events import (
    Assertion,
    DeviceFaultEvent,
    UpgradeReason,
    UpgradeType,
)
from trainguard.faults.device.fault_codes import Severity
from trainguard.faults.levels import FaultType, Level, ResetPolicy

DEVICE = "npu-0"
LINK_DOWN = "81078603"  # network code; FaultDuration 20 s -> PreSeparateNPU; 5 in 24 h -> MS
UCE = "80E01801"  # RestartBusiness; twice in 24 h -> ManuallySeparateNPU
SEPARATE = "80E3A201"  # SeparateNPU, no escalation rule
RESTART_NPU = "80E18005"  # RestartNPU; three times in 24 h -> ManuallySeparateNPU
RESTART_REQUEST = "80C98002"  # RestartRequest, no escalation rule
GRACE = {"WaitProcessReadCMTime": 30, "WaitDeviceResetTime": 150, "WaitFaultSelfHealingTime": 15}


def _default_document() -> dict[str, Any]:
    text = resources.files("trainguard.faults").joinpath("data",
                                                         "faultCustomization.json").read_text()
    document: dict[str, Any] = json.loads(text)
    return document


GRACE = {"WaitProcessReadCMTime": 30, "WaitDeviceResetTime": 150, "WaitFaultSelfHealingTime": 15}


def _customization(document: dict[str, Any]) -> customizations.Customization:
    chosen, problems = customizations.Customization.from_document(document)
    assert problems == []
    return chosen


def _event(time: float, code: str, assertion: str = "occur",
           device: str = DEVICE) -> DeviceFaultEvent:
    return DeviceFaultEvent(device, code, Assertion(assertion), time)


def _codes(health: device_health.DeviceHealth) -> dict[str, dict[str, Any]]:
    """fault_type -> the entry's fault_time_and_level_map."""
    result: dict[str, dict[str, Any]] = {}
    for entry in health.entries:
        data: dict[str, Any] = entry.to_data()
        result[str(data["fault_type"])] = data["fault_time_and_level_map"]
    return result


def _kinds(reasons: Sequence[UpgradeReason]) -> list[tuple[str, Level, UpgradeType]]:
    return [(reason.fault_code, reason.fault_level, reason.upgrade_type) for reason in reasons]


# --- entries ----------------------------------------------------------------------------------


def test_a_healthy_device_has_no_entries() -> None:
    health = device_health.FaultEngine().health(DEVICE, 0.0)

    assert health.level is Level.NORMAL_NPU
    assert (health.chip_level, health.network_level) == (Level.NORMAL_NPU, Level.NORMAL_NETWORK)
    assert health.entries == ()
    assert health.fault_type is None
    assert health.reset_policy is ResetPolicy.EMPTY
    assert health.allows_in_place
    assert not health.manually_separated


def test_a_chip_code_is_card_unhealthy() -> None:
    health = device_health.FaultEngine().report(_event(5.0, SEPARATE))

    assert health.level is Level.SEPARATE_NPU
    assert health.chip_level is Level.SEPARATE_NPU
    assert health.network_level is Level.NORMAL_NETWORK
    assert health.fault_type is FaultType.CARD_UNHEALTHY
    (entry,) = health.entries
    assert entry.fault_type is FaultType.CARD_UNHEALTHY
    assert entry.npu_name == DEVICE
    assert entry.fault_level is Level.SEPARATE_NPU


def test_link_down_is_card_network_unhealthy() -> None:
    health = device_health.FaultEngine().report(_event(5.0, LINK_DOWN))

    assert health.level is Level.NOT_HANDLE_FAULT  # the default file lists it there
    assert health.chip_level is Level.NORMAL_NPU
    assert health.network_level is Level.NOT_HANDLE_FAULT
    assert health.fault_type is FaultType.CARD_NETWORK_UNHEALTHY
    (entry,) = health.entries
    assert entry.fault_type is FaultType.CARD_NETWORK_UNHEALTHY


def test_to_data_has_the_device_info_configmap_shape() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1744167455.784, RESTART_REQUEST))
    health = engine.report(_event(1744167456.5, SEPARATE))

    (entry,) = health.entries
    assert entry.to_data() == {
        "fault_type": "CardUnhealthy", "npu_name": DEVICE,
        "large_model_fault_level": "SeparateNPU", "fault_level": "SeparateNPU",
        "fault_handling": "SeparateNPU", "fault_code": f"{RESTART_REQUEST},{SEPARATE}",
        "fault_time_and_level_map": {
            RESTART_REQUEST: {"fault_time": 1744167455784, "fault_level": "RestartRequest"},
            SEPARATE: {"fault_time": 1744167456500, "fault_level": "SeparateNPU"}}}
    json.dumps(entry.to_data())  # plain JSON


def test_a_device_with_chip_and_network_codes_has_two_entries() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(0.0, LINK_DOWN))
    health = engine.report(_event(1.25, RESTART_REQUEST))

    assert health.level is Level.RESTART_REQUEST
    assert health.fault_type is FaultType.CARD_UNHEALTHY
    assert _codes(health) == {
        "CardUnhealthy": {RESTART_REQUEST: {"fault_time": 1250,
                                            "fault_level": "RestartRequest"}},
        "CardNetworkUnhealthy": {LINK_DOWN: {"fault_time": 0,
                                             "fault_level": "NotHandleFault"}}}


def test_a_duration_raised_code_has_the_raised_level_in_the_map() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(0.0, LINK_DOWN))
    engine.report(_event(1.25, RESTART_REQUEST))

    assert engine.health(DEVICE, 20.0).level is Level.RESTART_REQUEST  # not above 20 s yet
    health = engine.health(DEVICE, 21.0)

    assert health.level is Level.PRE_SEPARATE_NPU
    assert health.network_level is Level.PRE_SEPARATE_NPU
    assert health.chip_level is Level.RESTART_REQUEST
    assert health.fault_type is FaultType.CARD_NETWORK_UNHEALTHY
    assert health.reset_policy is ResetPolicy.ISOLATE
    assert _codes(health) == {
        "CardUnhealthy": {RESTART_REQUEST: {"fault_time": 1250,
                                            "fault_level": "RestartRequest"}},
        "CardNetworkUnhealthy": {LINK_DOWN: {"fault_time": 0,
                                             "fault_level": "PreSeparateNPU"}}}
    assert _kinds(health.added) == [(LINK_DOWN, Level.PRE_SEPARATE_NPU,
                                     UpgradeType.FAULT_DURATION)]
    assert health.added[0].upgrade_time == 20.0  # the outage's start plus FaultTimeout


def test_each_code_has_its_own_level_and_the_entry_the_most_serious() -> None:
    engine = device_health.FaultEngine()
    for time, code in enumerate(["8C1F860B", RESTART_REQUEST, RESTART_NPU]):
        health = engine.report(_event(float(time), code))

    (entry,) = health.entries
    assert entry.fault_level is Level.RESTART_NPU
    assert {code: level for code, (_, level) in entry.codes.items()} == {
        "8C1F860B": Level.NOT_HANDLE_FAULT, RESTART_REQUEST: Level.RESTART_REQUEST,
        RESTART_NPU: Level.RESTART_NPU}


def test_an_occur_repeated_keeps_its_first_time() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, SEPARATE))
    health = engine.report(_event(9.0, SEPARATE))

    assert _codes(health)["CardUnhealthy"][SEPARATE]["fault_time"] == 1000


def test_an_entry_shows_the_configured_spelling() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, "80e3a201"))
    health = engine.report(_event(2.0, "20001002"))  # configured as 020001002

    assert set(_codes(health)["CardUnhealthy"]) == {"80E3A201", "020001002"}


def test_an_unknown_code_is_graded_by_the_severity_the_device_reports() -> None:
    engine = device_health.FaultEngine()

    minor = engine.report(DeviceFaultEvent("npu-1", "DEADBEEF", Assertion.OCCUR, 1.0,
                                           Severity.MINOR))
    assert minor.level is Level.NOT_HANDLE_FAULT
    major = engine.report(DeviceFaultEvent("npu-2", "0BADC0DE", Assertion.OCCUR, 1.0,
                                           Severity.MAJOR))
    assert major.level is Level.SEPARATE_NPU
    unrated = engine.report(_event(1.0, "0DDC0DE5", device="npu-3"))
    assert unrated.level is Level.SEPARATE_NPU
    assert _codes(unrated) == {"CardUnhealthy": {"0DDC0DE5": {"fault_time": 1000,
                                                              "fault_level": "SeparateNPU"}}}


def test_an_unknown_code_is_ignored_beside_a_known_one() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, "0DDC0DE5"))

    health = engine.report(_event(2.0, RESTART_REQUEST))
    assert health.level is Level.RESTART_REQUEST
    assert health.chip_level is Level.RESTART_REQUEST
    # The entry still lists both, each with its own level.
    assert {code: level["fault_level"] for code, level
            in _codes(health)["CardUnhealthy"].items()} == {
        "0DDC0DE5": "SeparateNPU", RESTART_REQUEST: "RestartRequest"}
    assert engine.report(_event(3.0, RESTART_REQUEST, "recover")).level is Level.SEPARATE_NPU


def test_an_unlisted_network_code_is_pre_separate() -> None:
    table, _ = fault_codes.CodeTable.from_document({})
    engine = device_health.FaultEngine(table=table)

    health = engine.report(_event(1.0, "81078607"))
    assert health.level is Level.PRE_SEPARATE_NPU
    assert health.network_level is Level.PRE_SEPARATE_NPU
    assert health.chip_level is Level.NORMAL_NPU
    assert health.fault_type is FaultType.CARD_NETWORK_UNHEALTHY


# --- once, recover ----------------------------------------------------------------------------


def test_once_counts_for_one_evaluation() -> None:
    engine = device_health.FaultEngine()

    health = engine.report(_event(10.0, SEPARATE, "once"))
    assert health.level is Level.SEPARATE_NPU
    assert _codes(health) == {"CardUnhealthy": {SEPARATE: {"fault_time": 10000,
                                                           "fault_level": "SeparateNPU"}}}
    later = engine.health(DEVICE, 11.0)
    assert later.level is Level.NORMAL_NPU
    assert later.entries == ()
    assert engine.health(DEVICE, 12.0).level is Level.NORMAL_NPU


def test_once_beside_a_current_fault_leaves_the_current_one() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, RESTART_REQUEST))
    assert engine.report(_event(2.0, SEPARATE, "once")).level is Level.SEPARATE_NPU

    health = engine.health(DEVICE, 3.0)
    assert health.level is Level.RESTART_REQUEST
    assert list(_codes(health)["CardUnhealthy"]) == [RESTART_REQUEST]


def test_recover_removes_the_code() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, SEPARATE))
    engine.report(_event(2.0, RESTART_REQUEST))

    health = engine.report(_event(3.0, SEPARATE, "recover"))
    assert health.level is Level.RESTART_REQUEST
    assert list(_codes(health)["CardUnhealthy"]) == [RESTART_REQUEST]
    health = engine.report(_event(4.0, "80c98002", "recover"))  # any case
    assert health.level is Level.NORMAL_NPU
    assert health.entries == ()


def test_a_recover_without_an_occur_is_harmless() -> None:
    health = device_health.FaultEngine().report(_event(1.0, SEPARATE, "recover"))

    assert health.level is Level.NORMAL_NPU
    assert health.entries == ()


def test_devices_are_kept_apart() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, SEPARATE, device="npu-1"))
    engine.report(_event(1.0, RESTART_REQUEST, device="npu-2"))

    assert engine.health("npu-1", 2.0).level is Level.SEPARATE_NPU
    assert engine.health("npu-2", 2.0).level is Level.RESTART_REQUEST
    assert engine.health("npu-3", 2.0).level is Level.NORMAL_NPU
    assert {"npu-1", "npu-2"} <= set(engine.devices())


# --- reset policy -----------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "level", "policy", "in_place"), [
    ("80E21007", Level.NOT_HANDLE_FAULT, ResetPolicy.EMPTY, True),
    ("81A3880C", Level.SUB_HEALTH_FAULT, ResetPolicy.EMPTY, True),
    ("80C98002", Level.RESTART_REQUEST, ResetPolicy.RESTART_REQUEST, True),
    ("8C204E00", Level.RESTART_BUSINESS, ResetPolicy.RESTART, True),
    ("8C0E4E00", Level.FREE_RESTART_NPU, ResetPolicy.FREE_RESET, False),
    ("8C03A000", Level.RESTART_NPU, ResetPolicy.RESET, False),
    ("8118043C", Level.PRE_SEPARATE_NPU, ResetPolicy.ISOLATE, False),
    ("80E3A201", Level.SEPARATE_NPU, ResetPolicy.ISOLATE, False),
])
def test_reset_policy_per_level(code: str, level: Level, policy: ResetPolicy,
                                in_place: bool) -> None:
    health = device_health.FaultEngine().report(_event(1.0, code))

    assert health.level is level
    assert health.reset_policy is policy
    assert health.allows_in_place is in_place
    assert device_health.allows_in_place(level) is in_place


def test_manually_separated_isolates() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, UCE, "once"))
    health = engine.report(_event(2.0, UCE, "once"))

    assert health.level is Level.MANUALLY_SEPARATE_NPU
    assert health.reset_policy is ResetPolicy.ISOLATE
    assert not health.allows_in_place


# --- frequency: ManuallySeparateNPU and its release -------------------------------------------


def test_the_memory_error_twice_manually_separates_the_device() -> None:
    engine = device_health.FaultEngine()

    first = engine.report(_event(100.0, UCE, "once"))
    assert first.level is Level.RESTART_BUSINESS
    assert (first.added, first.reasons, first.manually_separated) == ((), (), False)
    assert engine.health(DEVICE, 101.0).level is Level.NORMAL_NPU

    second = engine.report(_event(200.0, UCE, "once"))
    expected = UpgradeReason(UCE, Level.MANUALLY_SEPARATE_NPU, UpgradeType.FAULT_FREQUENCY, 200.0)
    assert second.level is Level.MANUALLY_SEPARATE_NPU
    assert second.chip_level is Level.MANUALLY_SEPARATE_NPU
    assert second.manually_separated
    assert second.added == (expected,)
    assert second.reasons == (expected,)
    assert second.fault_type is FaultType.CARD_UNHEALTHY
    assert _codes(second) == {"CardUnhealthy": {UCE: {"fault_time": 200000,
                                                      "fault_level": "ManuallySeparateNPU"}}}
    assert expected.to_data() == {"fault_code": UCE, "fault_level": "ManuallySeparateNPU",
                                  "upgrade_type": "FaultFrequency", "upgrade_time": 200.0}

    # The code is gone (once), the separation stays; only the evaluation that added it says so.
    later = engine.health(DEVICE, 300.0)
    assert later.level is Level.MANUALLY_SEPARATE_NPU
    assert later.manually_separated
    assert later.added == ()
    assert later.removed == ()
    assert later.reasons == (expected,)
    assert later.reset_policy is ResetPolicy.ISOLATE
    # No release window: it stays however long.
    assert engine.health(DEVICE, 300.0 + 10 * 86400).level is Level.MANUALLY_SEPARATE_NPU


def test_the_memory_error_twice_but_a_day_apart_does_not_separate() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(0.0, UCE, "once"))

    health = engine.report(_event(86400.5, UCE, "once"))
    assert health.level is Level.RESTART_BUSINESS
    assert health.reasons == ()


def test_the_memory_error_on_two_devices_does_not_separate_either() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(0.0, UCE, "once", device="npu-1"))

    assert engine.report(_event(1.0, UCE, "once", device="npu-2")).level \
        is Level.RESTART_BUSINESS


def test_release_clears_manually_separated_and_reports_it_removed() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(100.0, UCE, "once"))
    reason = engine.report(_event(200.0, UCE, "once")).reasons[0]

    released = engine.release(DEVICE, 500.0)
    assert released.level is Level.NORMAL_NPU
    assert not released.manually_separated
    assert released.reasons == ()
    assert released.removed == (reason,)
    assert released.entries == ()

    after = engine.health(DEVICE, 501.0)
    assert (after.level, after.removed, after.added) == (Level.NORMAL_NPU, (), ())
    # The history was cleared with the separation: one more error is the first again.
    assert engine.report(_event(600.0, UCE, "once")).level is Level.RESTART_BUSINESS


def test_release_leaves_the_current_codes() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, UCE, "once"))
    engine.report(_event(2.0, UCE, "once"))
    engine.report(_event(3.0, RESTART_REQUEST))

    released = engine.release(DEVICE, 4.0)
    assert released.level is Level.RESTART_REQUEST
    assert not released.manually_separated


def test_release_of_a_device_that_is_not_separated_changes_nothing() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, SEPARATE))

    released = engine.release(DEVICE, 2.0)
    assert released.level is Level.SEPARATE_NPU
    assert released.removed == ()


# --- reconfiguration ----------------------------------------------------------------------------


def test_reconfigure_dropping_the_duration_rule_removes_its_reason() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(0.0, LINK_DOWN))
    raised = engine.health(DEVICE, 21.0)
    assert raised.level is Level.PRE_SEPARATE_NPU

    document = _default_document()
    del document["FaultDuration"]
    engine.reconfigure(table=engine.table, customization=_customization(document))

    health = engine.health(DEVICE, 22.0)
    assert _kinds(health.removed) == [(LINK_DOWN, Level.PRE_SEPARATE_NPU,
                                       UpgradeType.FAULT_DURATION)]
    assert health.added == ()
    assert health.level is Level.NOT_HANDLE_FAULT  # the code's own level
    assert _codes(health) == {"CardNetworkUnhealthy": {LINK_DOWN: {
        "fault_time": 0, "fault_level": "NotHandleFault"}}}
    assert engine.health(DEVICE, 1000.0).level is Level.NOT_HANDLE_FAULT


def test_reconfigure_dropping_a_frequency_rule_forgets_its_history() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, UCE, "once"))

    document = _default_document()
    del document["FaultFrequency"][0]  # the rule of 80E01801 and 40 more
    engine.reconfigure(table=engine.table, customization=_customization(document))

    assert engine.report(_event(2.0, UCE, "once")).level is Level.RESTART_BUSINESS
    assert engine.report(_event(3.0, UCE, "once")).level is Level.RESTART_BUSINESS


def test_reconfigure_dropping_a_rule_lowers_what_it_raised() -> None:
    rule = {"EventId": [RESTART_NPU], "TimeWindow": 3600, "Times": 1,
            "FaultHandling": "SeparateNPU", "ReleaseTimeWindow": 3600}
    engine = device_health.FaultEngine(
        customization=_customization({"GraceTolerance": GRACE, "FaultFrequency": [rule]}))
    raised = engine.report(_event(1.0, RESTART_NPU))
    assert raised.level is Level.SEPARATE_NPU
    assert _kinds(raised.added) == [(RESTART_NPU, Level.SEPARATE_NPU,
                                     UpgradeType.FAULT_FREQUENCY)]

    engine.reconfigure(table=engine.table,
                       customization=_customization({"GraceTolerance": GRACE}))
    health = engine.health(DEVICE, 2.0)
    assert health.level is Level.RESTART_NPU
    assert _kinds(health.removed) == [(RESTART_NPU, Level.SEPARATE_NPU,
                                       UpgradeType.FAULT_FREQUENCY)]
    assert health.reasons == ()


def test_reconfigure_moves_a_raised_level_to_the_new_handling() -> None:
    rule = {"EventId": [RESTART_NPU], "TimeWindow": 3600, "Times": 1,
            "FaultHandling": "SeparateNPU", "ReleaseTimeWindow": 3600}
    engine = device_health.FaultEngine(
        customization=_customization({"GraceTolerance": GRACE, "FaultFrequency": [rule]}))
    engine.report(_event(1.0, RESTART_NPU))

    moved = {**rule, "FaultHandling": "PreSeparateNPU"}
    engine.reconfigure(table=engine.table, customization=_customization(
        {"GraceTolerance": GRACE, "FaultFrequency": [moved]}))
    health = engine.health(DEVICE, 2.0)
    assert health.level is Level.PRE_SEPARATE_NPU
    assert _kinds(health.removed) == [(RESTART_NPU, Level.SEPARATE_NPU,
                                       UpgradeType.FAULT_FREQUENCY)]
    assert _kinds(health.added) == [(RESTART_NPU, Level.PRE_SEPARATE_NPU,
                                     UpgradeType.FAULT_FREQUENCY)]


def test_reconfigure_leaves_manually_separated_until_released() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, UCE, "once"))
    engine.report(_event(2.0, UCE, "once"))

    engine.reconfigure(table=engine.table,
                       customization=_customization({"GraceTolerance": GRACE}))
    health = engine.health(DEVICE, 3.0)
    assert health.level is Level.MANUALLY_SEPARATE_NPU
    assert health.removed == ()
    assert engine.release(DEVICE, 4.0).level is Level.NORMAL_NPU


def test_reconfigure_with_a_new_table_changes_the_codes_level() -> None:
    engine = device_health.FaultEngine()
    engine.report(_event(1.0, RESTART_REQUEST))
    table, _ = fault_codes.CodeTable.from_document({"SeparateNPUCodes": [RESTART_REQUEST]})

    engine.reconfigure(table=table, customization=customizations.default_customization())
    assert engine.health(DEVICE, 2.0).level is Level.SEPARATE_NPU


# --- determinism --------------------------------------------------------------------------------


_CODES = [LINK_DOWN, UCE, SEPARATE, RESTART_NPU, RESTART_REQUEST, "DEADBEEF", "XID-79"]


@st.composite
def timelines(draw: st.DrawFn) -> list[replay.TimelineRecord]:
    count = draw(st.integers(min_value=1, max_value=25))
    time = 0.0
    records = []
    for line in range(1, count + 1):
        time += draw(st.sampled_from([0.0, 0.5, 3.0, 15.0, 25.0, 70.0, 400.0]))
        device = draw(st.sampled_from(["npu-0", "npu-1"]))
        if draw(st.integers(min_value=0, max_value=15)) == 0:
            records.append(replay.TimelineRecord(line, time, release=device))
            continue
        event = DeviceFaultEvent(device, draw(st.sampled_from(_CODES)),
                                 draw(st.sampled_from(list(Assertion))), time)
        records.append(replay.TimelineRecord(line, time, event=event))
    return records


@settings(max_examples=40, deadline=None)
@given(records=timelines())
def test_replaying_the_same_events_gives_the_same_results(
        records: list[replay.TimelineRecord]) -> None:
    engines = [device_health.FaultEngine(), device_health.FaultEngine()]
    end = records[-1].time + 200.0

    first, second = (list(replay.replay(records, engine=engine, period=5.0, until=end))
                     for engine in engines)

    assert first == second
    for device in ("npu-0", "npu-1"):
        one, other = (engine.health(device, end + 1.0) for engine in engines)
        assert one == other


def test_a_raised_level_moves_to_the_network_when_a_new_table_makes_its_code_one() -> None:
    rules = _customization({"GraceTolerance": GRACE, "FaultFrequency": [{
        "EventId": ["1234ABCD"], "TimeWindow": 3600, "Times": 1, "FaultHandling": "SeparateNPU",
        "ReleaseTimeWindow": 600}]})
    engine = device_health.FaultEngine(customization=rules)
    raised = engine.report(DeviceFaultEvent("npu-0", "1234ABCD", Assertion.ONCE, 10.0))
    assert (raised.chip_level, raised.network_level) == (Level.SEPARATE_NPU,
                                                         Level.NORMAL_NETWORK)
    table, problems = fault_codes.CodeTable.from_document(
        {"NotHandleFaultNetworkCodes": ["1234ABCD"]})
    assert problems == []

    engine.reconfigure(table=table, customization=rules)
    moved = engine.health("npu-0", 20.0)

    assert (moved.chip_level, moved.network_level) == (Level.NORMAL_NPU, Level.SEPARATE_NPU)
