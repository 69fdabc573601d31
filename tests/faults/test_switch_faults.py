from __future__ import annotations

import json
from importlib import resources
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.device.device_events import Assertion
from trainguard.faults.device.fault_codes import Severity
from trainguard.faults.node.switch_faults import (
    MAX_CODE_LENGTH,
    FaultTimeAndLevel,
    NodeStatus,
    SwitchCode,
    SwitchCodeTable,
    SwitchFault,
    SwitchLevel,
    aggregate,
    apply_event,
    default_switch_table,
)

FILE = "SwitchFaultCode.json"
NOT_HANDLE = "[0x00f1fef5,155913,cpu,na]"
SUB_HEALTH = "[0x00f103b6,155908,na,na]"
RESTART_REQUEST = "[0x00f1fef5,155914,npu,na]"
SEPARATE = "[0x00f103b0,155907,na,na]"
UNKNOWN = "[0x00000001,1,na,na]"


def fault(code: str, *, chip: int = 0, port: int = 0, time: float = 100.0,
          assertion: Assertion = Assertion.OCCUR) -> SwitchFault:
    return SwitchFault(code=code, event_type=0x00F1FEF5, peer_port_device=1, peer_port_id=7,
                       switch_chip_id=chip, switch_port_id=port, severity=Severity.MAJOR,
                       assertion=assertion, time=time)


# The shipped defaults


def test_the_shipped_defaults_load_with_no_problems_and_the_documented_counts() -> None:
    text = resources.files("trainguard.faults").joinpath("data").joinpath(FILE).read_text()
    document = json.loads(text)
    table, problems = SwitchCodeTable.from_document(document)
    assert problems == []
    assert {name: len(codes) for name, codes in document.items()} == {
        "NotHandleFaultCodes": 12, "SubHealthFaultCodes": 8, "ResetFaultCodes": 0,
        "RestartRequestFaultCodes": 1, "SeparateFaultCodes": 9}
    counts = {level: list(table.levels.values()).count(level) for level in SwitchLevel}
    assert counts == {SwitchLevel.NOT_HANDLE: 12, SwitchLevel.SUB_HEALTH_FAULT: 8,
                      SwitchLevel.RESTART_REQUEST: 1, SwitchLevel.PRE_SEPARATE: 0,
                      SwitchLevel.SEPARATE: 9}
    assert default_switch_table() == table
    assert default_switch_table() is default_switch_table()


# Levels and node status


def test_levels_are_ordered_least_serious_first_with_the_documents_names() -> None:
    assert [str(level) for level in sorted(SwitchLevel, key=lambda level: level.severity)] == [
        "NotHandle", "SubHealthFault", "RestartRequest", "PreSeparate", "Separate"]


@pytest.mark.parametrize(("level", "status"), [
    (SwitchLevel.NOT_HANDLE, NodeStatus.HEALTHY),
    (SwitchLevel.SUB_HEALTH_FAULT, NodeStatus.SUB_HEALTHY),
    (SwitchLevel.RESTART_REQUEST, NodeStatus.UNHEALTHY),
    (SwitchLevel.PRE_SEPARATE, NodeStatus.HEALTHY),
    (SwitchLevel.SEPARATE, NodeStatus.UNHEALTHY),
])
def test_each_level_maps_to_the_node_status_of_the_document(level: SwitchLevel,
                                                            status: NodeStatus) -> None:
    assert level.node_status is status


# Code format


@pytest.mark.parametrize("text", [NOT_HANDLE, "[0x08520003,na,L2,na]", "[,,,]"])
def test_a_code_with_brackets_and_four_parts_is_valid_and_round_trips(text: str) -> None:
    assert str(SwitchCode.parse(text)) == text


def test_a_code_is_split_into_its_parts() -> None:
    assert SwitchCode.parse(RESTART_REQUEST) == SwitchCode("0x00f1fef5", "155914", "npu", "na")


def test_a_code_of_exactly_the_maximum_length_is_valid() -> None:
    text = "[" + "x" * (MAX_CODE_LENGTH - 8) + ",a,b,c]"
    assert len(text) == MAX_CODE_LENGTH
    assert str(SwitchCode.parse(text)) == text


@pytest.mark.parametrize(("text", "message"), [
    ("[" + "x" * (MAX_CODE_LENGTH - 7) + ",a,b,c]", "longer than 50 bytes"),
    ("[" + "é" * 21 + "x,a,b,c]", "longer than 50 bytes"),  # 51 bytes in 30 characters
    ("0x00f1fef5,155914,npu,na]", "not enclosed in '[' and ']'"),
    ("[0x00f1fef5,155914,npu,na", "not enclosed in '[' and ']'"),
    ("", "not enclosed in '[' and ']'"),
    ("[", "not enclosed in '[' and ']'"),
    ("[]", "1 comma-separated parts instead of 4"),
    ("[0x00f1fef5,155914,npu]", "3 comma-separated parts instead of 4"),
    ("[0x00f1fef5,155914,npu,na,na]", "5 comma-separated parts instead of 4"),
])
def test_a_malformed_code_is_refused_naming_the_rule(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[") + "$"):
        SwitchCode.parse(text)


@pytest.mark.parametrize(("sub_type", "device", "port", "expected"), [
    (155914, 1, 3, "[0x00f1fef5,155914,npu,na]"),
    (155913, 0, 0, "[0x00f1fef5,155913,cpu,na]"),
    (155913, 2, 5, "[0x00f1fef5,155913,L2,na]"),
    (155913, 0xFFFF, 5, "[0x00f1fef5,155913,na,na]"),  # no peer device
    (155913, 1, 0xFFFFFFFF, "[0x00f1fef5,155913,na,na]"),  # a fault of the whole chip
    (0xFFFFFFFF, 1, 3, "[0x00f1fef5,na,npu,na]"),  # link down has no fault id
])
def test_a_driver_event_is_assembled_into_its_code(sub_type: int, device: int, port: int,
                                                  expected: str) -> None:
    code = SwitchCode.assemble(event_type=0x00F1FEF5, sub_type=sub_type,
                               peer_port_device=device, switch_port_id=port)
    assert str(code) == expected


def test_an_assembled_code_finds_its_configured_level() -> None:
    code = SwitchCode.assemble(event_type=0x8520003, sub_type=0xFFFFFFFF, peer_port_device=0,
                               switch_port_id=1)
    assert default_switch_table().level_of(code) is SwitchLevel.SEPARATE


# Loading a table


def test_reset_codes_are_merged_into_separate() -> None:
    table, problems = SwitchCodeTable.from_document({"ResetFaultCodes": [SEPARATE]})
    assert problems == []
    assert table.level_of(SEPARATE) is SwitchLevel.SEPARATE


def test_every_list_gives_its_level() -> None:
    table, problems = SwitchCodeTable.from_document({
        "NotHandleFaultCodes": ["[a,1,na,na]"], "SubHealthFaultCodes": ["[b,1,na,na]"],
        "RestartRequestFaultCodes": ["[c,1,na,na]"], "PreSeparateFaultCodes": ["[d,1,na,na]"],
        "SeparateFaultCodes": ["[e,1,na,na]"]})
    assert problems == []
    assert table.levels == {
        "[a,1,na,na]": SwitchLevel.NOT_HANDLE, "[b,1,na,na]": SwitchLevel.SUB_HEALTH_FAULT,
        "[c,1,na,na]": SwitchLevel.RESTART_REQUEST, "[d,1,na,na]": SwitchLevel.PRE_SEPARATE,
        "[e,1,na,na]": SwitchLevel.SEPARATE}


def test_codes_are_compared_as_exact_text() -> None:
    table, _ = SwitchCodeTable.from_document({"SeparateFaultCodes": [SEPARATE]})
    assert table.level_of(SEPARATE.upper()) is None
    assert table.level_of(UNKNOWN) is None


def test_bad_code_strings_are_ignored_and_reported_with_file_list_and_code() -> None:
    table, problems = SwitchCodeTable.from_document(
        {"SeparateFaultCodes": ["0x00f103b0,155907,na,na", SEPARATE, 7]}, file="cm:switch")
    assert table.levels == {SEPARATE: SwitchLevel.SEPARATE}
    assert problems == [
        ConfigProblem("cm:switch", "SeparateFaultCodes", "0x00f103b0,155907,na,na",
                      "not a switch fault code: not enclosed in '[' and ']' (expected e.g. "
                      "[0x00f1fef5,155914,npu,na])", Action.IGNORED),
        ConfigProblem("cm:switch", "SeparateFaultCodes", "7", "not a string", Action.IGNORED),
    ]


def test_a_list_that_is_not_a_list_is_ignored_and_reported() -> None:
    table, problems = SwitchCodeTable.from_document(
        {"SeparateFaultCodes": SEPARATE, "NotHandleFaultCodes": [NOT_HANDLE]})
    assert table.levels == {NOT_HANDLE: SwitchLevel.NOT_HANDLE}
    assert problems == [ConfigProblem(FILE, "SeparateFaultCodes", "", "not a list",
                                      Action.IGNORED)]


def test_unknown_keys_are_reported() -> None:
    _, problems = SwitchCodeTable.from_document({"SeparateNPUCodes": []})
    assert [problem.describe() for problem in problems] == [
        "SwitchFaultCode.json: SeparateNPUCodes: not a list of switch fault codes (known: "
        "NotHandleFaultCodes, PreSeparateFaultCodes, ResetFaultCodes, RestartRequestFaultCodes, "
        "SeparateFaultCodes, SubHealthFaultCodes) [ignored]"]


def test_a_document_that_is_not_an_object_gives_an_empty_table() -> None:
    table, problems = SwitchCodeTable.from_document([SEPARATE])
    assert table.levels == {}
    assert problems == [ConfigProblem(FILE, "", "", "the file is not a JSON object",
                                      Action.IGNORED)]


def test_a_code_in_two_lists_keeps_the_more_serious_level_and_is_reported() -> None:
    table, problems = SwitchCodeTable.from_document(
        {"NotHandleFaultCodes": [SEPARATE], "SeparateFaultCodes": [SEPARATE]})
    assert table.level_of(SEPARATE) is SwitchLevel.SEPARATE
    assert problems == [ConfigProblem(FILE, "NotHandleFaultCodes", SEPARATE,
                                      "also listed as Separate; the more serious level is kept",
                                      Action.IGNORED)]


def test_a_code_in_both_reset_and_separate_is_no_conflict() -> None:
    table, problems = SwitchCodeTable.from_document(
        {"ResetFaultCodes": [SEPARATE], "SeparateFaultCodes": [SEPARATE]})
    assert problems == []
    assert table.level_of(SEPARATE) is SwitchLevel.SEPARATE


# Aggregation

TABLE = SwitchCodeTable({NOT_HANDLE: SwitchLevel.NOT_HANDLE,
                         SUB_HEALTH: SwitchLevel.SUB_HEALTH_FAULT,
                         RESTART_REQUEST: SwitchLevel.RESTART_REQUEST,
                         "[pre,1,na,na]": SwitchLevel.PRE_SEPARATE,
                         SEPARATE: SwitchLevel.SEPARATE})


def test_no_fault_leaves_the_level_empty_and_the_node_healthy() -> None:
    info = aggregate([], table=TABLE, update_time=1744182144.7)
    assert (info.fault_level, info.node_status) == (None, NodeStatus.HEALTHY)
    assert info.to_data() == {"FaultCode": [], "FaultLevel": "", "UpdateTime": 1744182144,
                              "NodeStatus": "Healthy", "FaultTimeAndLevelMap": {}}


def test_an_unconfigured_code_counts_as_not_handle_but_is_not_reported() -> None:
    info = aggregate([fault(UNKNOWN)], table=TABLE, update_time=0.0)
    assert (info.fault_level, info.node_status) == (SwitchLevel.NOT_HANDLE, NodeStatus.HEALTHY)
    assert info.faults == ()
    assert info.fault_time_and_level_map == {}


@pytest.mark.parametrize(("codes", "level", "status"), [
    ([NOT_HANDLE], SwitchLevel.NOT_HANDLE, NodeStatus.HEALTHY),
    ([NOT_HANDLE, SUB_HEALTH], SwitchLevel.SUB_HEALTH_FAULT, NodeStatus.SUB_HEALTHY),
    ([SUB_HEALTH, RESTART_REQUEST, NOT_HANDLE], SwitchLevel.RESTART_REQUEST,
     NodeStatus.UNHEALTHY),
    ([RESTART_REQUEST, "[pre,1,na,na]"], SwitchLevel.PRE_SEPARATE, NodeStatus.HEALTHY),
    ([SEPARATE, RESTART_REQUEST, UNKNOWN], SwitchLevel.SEPARATE, NodeStatus.UNHEALTHY),
])
def test_the_node_takes_the_most_serious_level_present(codes: list[str], level: SwitchLevel,
                                                       status: NodeStatus) -> None:
    info = aggregate([fault(code, port=port) for port, code in enumerate(codes)], table=TABLE,
                     update_time=0.0)
    assert (info.fault_level, info.node_status) == (level, status)


def test_recoveries_are_not_faults_and_notices_are() -> None:
    recovered = aggregate([fault(SEPARATE, assertion=Assertion.RECOVER)], table=TABLE,
                          update_time=0.0)
    assert (recovered.fault_level, recovered.faults) == (None, ())
    notice = aggregate([fault(SEPARATE, assertion=Assertion.ONCE)], table=TABLE,
                       update_time=0.0)
    assert notice.fault_level is SwitchLevel.SEPARATE


def test_each_fault_is_keyed_by_code_chip_and_port_and_keeps_its_earliest_time() -> None:
    info = aggregate([fault(SEPARATE, chip=0, port=3, time=20.0),
                      fault(SEPARATE, chip=0, port=3, time=10.5),
                      fault(SUB_HEALTH, chip=1, port=4294967295, time=30.0)],
                     table=TABLE, update_time=0.0)
    assert info.fault_time_and_level_map == {
        "[0x00f103b0,155907,na,na]_0_3": FaultTimeAndLevel(10.5, SwitchLevel.SEPARATE),
        "[0x00f103b6,155908,na,na]_1_4294967295": FaultTimeAndLevel(
            30.0, SwitchLevel.SUB_HEALTH_FAULT),
    }
    assert len(info.faults) == 3


def test_the_document_has_the_switch_info_shape() -> None:
    info = aggregate([fault(UNKNOWN), fault(RESTART_REQUEST, chip=2, port=5, time=1744167455.784)],
                     table=TABLE, update_time=1744182144.0)
    data = info.to_data()
    assert list(data) == ["FaultCode", "FaultLevel", "UpdateTime", "NodeStatus",
                          "FaultTimeAndLevelMap"]
    assert data["FaultLevel"] == "RestartRequest"
    assert data["NodeStatus"] == "UnHealthy"
    assert data["UpdateTime"] == 1744182144
    assert data["FaultTimeAndLevelMap"] == {
        "[0x00f1fef5,155914,npu,na]_2_5": {"fault_time": 1744167455784,
                                           "fault_level": "RestartRequest"}}
    assert data["FaultCode"] == [
        '{"EventType":15859445,"AssembledFaultCode":"[0x00f1fef5,155914,npu,na]",'
        '"PeerPortDevice":1,"PeerPortId":7,"SwitchChipId":2,"SwitchPortId":5,"Severity":2,'
        '"Assertion":1,"AlarmRaisedTime":1744167455784}']


@pytest.mark.parametrize(("assertion", "number"), [
    (Assertion.RECOVER, 0), (Assertion.OCCUR, 1), (Assertion.ONCE, 2)])
def test_assertions_are_written_as_the_drivers_numbers(assertion: Assertion,
                                                       number: int) -> None:
    assert fault(SEPARATE, assertion=assertion).to_data()["Assertion"] == number


# Applying events


def test_a_recovery_removes_the_faults_it_recovers_only() -> None:
    kept = fault(SEPARATE, port=4)
    current = (fault(SEPARATE, port=3), kept, fault(SEPARATE, port=3, time=200.0))
    after = apply_event(current, fault(SEPARATE, port=3, assertion=Assertion.RECOVER))
    assert after == (kept,)


def test_a_recovery_must_match_the_whole_event() -> None:
    current = (fault(SEPARATE),)
    other = SwitchFault(code=SEPARATE, event_type=1, peer_port_device=1, peer_port_id=7,
                        switch_chip_id=0, switch_port_id=0, severity=Severity.MAJOR,
                        assertion=Assertion.RECOVER, time=0.0)
    assert apply_event(current, other) == current


@pytest.mark.parametrize("assertion", [Assertion.OCCUR, Assertion.ONCE])
def test_other_events_are_added(assertion: Assertion) -> None:
    first, event = fault(SEPARATE), fault(SUB_HEALTH, assertion=assertion)
    assert apply_event((first,), event) == (first, event)


# Properties

CODES = [NOT_HANDLE, SUB_HEALTH, RESTART_REQUEST, "[pre,1,na,na]", SEPARATE, UNKNOWN]
faults_strategy = st.lists(st.builds(
    fault, st.sampled_from(CODES), chip=st.integers(0, 3), port=st.integers(0, 3),
    time=st.floats(0, 1e10), assertion=st.sampled_from(list(Assertion))), max_size=12)


@given(faults_strategy, st.randoms())
def test_aggregation_is_the_most_serious_level_whatever_the_order(
        faults: list[SwitchFault], rng: Random) -> None:
    info = aggregate(faults, table=TABLE, update_time=0.0)
    present = [each for each in faults if each.assertion is not Assertion.RECOVER]
    levels = [TABLE.level_of(each.code) or SwitchLevel.NOT_HANDLE for each in present]
    expected = max(levels, key=lambda level: level.severity, default=None)
    assert info.fault_level is expected
    assert info.node_status is (expected.node_status if expected else NodeStatus.HEALTHY)
    shuffled = list(faults)
    rng.shuffle(shuffled)
    again = aggregate(shuffled, table=TABLE, update_time=0.0)
    assert (again.fault_level, again.node_status) == (info.fault_level, info.node_status)
    assert again.fault_time_and_level_map == info.fault_time_and_level_map
    assert sorted(again.faults, key=repr) == sorted(info.faults, key=repr)
