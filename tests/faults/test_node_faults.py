from __future__ import annotations

import hashlib
import json
import re
from importlib import resources
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.node.node_faults import (
    FaultDevice,
    NodeCodeTable,
    NodeFaultDevice,
    NodeFaultLevel,
    NodeInfo,
    default_node_table,
    node_info,
)
from trainguard.faults.node.switch_faults import NodeStatus

FILE = "NodeDConfiguration.json"
NOT_HANDLE = "0100000D"
PRE_SEPARATE = "0000001D"
SEPARATE = "2C000031"
UNKNOWN = "FFFFFFFF"
TABLE = NodeCodeTable({NOT_HANDLE: NodeFaultLevel.NOT_HANDLE_FAULT,
                       PRE_SEPARATE: NodeFaultLevel.PRE_SEPARATE_FAULT,
                       SEPARATE: NodeFaultLevel.SEPARATE_FAULT})


def configuration(**lists: object) -> dict[str, object]:
    return {"FaultTypeCode": lists}


# The shipped defaults


def test_the_shipped_defaults_load_with_no_problems_and_the_documented_counts() -> None:
    text = resources.files("trainguard.faults").joinpath("data").joinpath(FILE).read_text()
    table, problems = NodeCodeTable.from_document(json.loads(text))
    assert problems == []
    assert table is not None
    counts = {level: list(table.levels.values()).count(level) for level in NodeFaultLevel}
    assert counts == {NodeFaultLevel.NOT_HANDLE_FAULT: 7, NodeFaultLevel.PRE_SEPARATE_FAULT: 51,
                      NodeFaultLevel.SEPARATE_FAULT: 1}
    assert table.level_of(SEPARATE) is NodeFaultLevel.SEPARATE_FAULT
    assert default_node_table() == table
    assert default_node_table() is default_node_table()


# Levels


def test_levels_are_ordered_least_serious_first_with_the_documents_names() -> None:
    assert [str(level) for level in sorted(NodeFaultLevel, key=lambda level: level.severity)] == [
        "NotHandleFault", "PreSeparateFault", "SeparateFault"]
    assert [level.severity for level in NodeFaultLevel] == [0, 1, 2]


@pytest.mark.parametrize(("level", "status"), [
    (NodeFaultLevel.NOT_HANDLE_FAULT, NodeStatus.HEALTHY),
    (NodeFaultLevel.PRE_SEPARATE_FAULT, NodeStatus.PRE_SEPARATE),
    (NodeFaultLevel.SEPARATE_FAULT, NodeStatus.UNHEALTHY),
])
def test_each_level_maps_to_a_node_status(level: NodeFaultLevel, status: NodeStatus) -> None:
    assert level.node_status is status
    assert str(status) in ("Healthy", "PreSeparate", "UnHealthy")


# Loading a table


def test_every_list_gives_its_level_and_codes_are_compared_ignoring_case() -> None:
    table, problems = NodeCodeTable.from_document(configuration(
        NotHandleFaultCodes=["0100000d"], PreSeparateFaultCodes=[PRE_SEPARATE],
        SeparateFaultCodes=[SEPARATE]))
    assert problems == []
    assert table is not None
    assert table.level_of(NOT_HANDLE) is NodeFaultLevel.NOT_HANDLE_FAULT
    assert table.level_of("0000001d") is NodeFaultLevel.PRE_SEPARATE_FAULT
    assert table.level_of(SEPARATE) is NodeFaultLevel.SEPARATE_FAULT
    assert table.level_of(UNKNOWN) is None


def test_a_missing_list_is_empty() -> None:
    table, problems = NodeCodeTable.from_document(configuration(SeparateFaultCodes=[SEPARATE]))
    assert problems == []
    assert table == NodeCodeTable({SEPARATE: NodeFaultLevel.SEPARATE_FAULT})


def test_a_code_in_two_lists_rejects_the_configuration() -> None:
    table, problems = NodeCodeTable.from_document(configuration(
        NotHandleFaultCodes=[SEPARATE], SeparateFaultCodes=[PRE_SEPARATE, SEPARATE]))
    assert table is None
    assert problems == [ConfigProblem(
        FILE, "FaultTypeCode.SeparateFaultCodes", SEPARATE,
        "also listed in NotHandleFaultCodes; a code must be in exactly one list, so the "
        "configuration is rejected", Action.KEPT_LAST_GOOD)]


def test_a_code_twice_in_one_list_rejects_the_configuration() -> None:
    table, problems = NodeCodeTable.from_document(configuration(
        PreSeparateFaultCodes=[PRE_SEPARATE, "0000001d"]))
    assert table is None
    assert [(problem.entry, problem.field, problem.action) for problem in problems] == [
        ("FaultTypeCode.PreSeparateFaultCodes", "0000001d", Action.KEPT_LAST_GOOD)]


def test_every_duplicate_is_reported() -> None:
    table, problems = NodeCodeTable.from_document(configuration(
        NotHandleFaultCodes=[NOT_HANDLE, SEPARATE], PreSeparateFaultCodes=[NOT_HANDLE],
        SeparateFaultCodes=[SEPARATE]))
    assert table is None
    assert [problem.describe() for problem in problems] == [
        "NodeDConfiguration.json: FaultTypeCode.PreSeparateFaultCodes: 0100000D: also listed in "
        "NotHandleFaultCodes; a code must be in exactly one list, so the configuration is "
        "rejected [last good configuration kept]",
        "NodeDConfiguration.json: FaultTypeCode.SeparateFaultCodes: 2C000031: also listed in "
        "NotHandleFaultCodes; a code must be in exactly one list, so the configuration is "
        "rejected [last good configuration kept]"]


@pytest.mark.parametrize(("document", "message"), [
    (["FaultTypeCode"], "the file is not a JSON object; the configuration is rejected"),
    ({"faultTypeCode": {}}, "no FaultTypeCode object; the configuration is rejected"),
    ({"FaultTypeCode": [SEPARATE]}, "no FaultTypeCode object; the configuration is rejected"),
])
def test_a_document_without_its_fault_type_code_object_is_rejected(document: object,
                                                                  message: str) -> None:
    table, problems = NodeCodeTable.from_document(document, file="cm:noded")
    assert table is None
    assert problems == [ConfigProblem("cm:noded", "", "", message, Action.KEPT_LAST_GOOD)]


def test_a_list_that_is_not_a_list_rejects_the_configuration() -> None:
    table, problems = NodeCodeTable.from_document(configuration(SeparateFaultCodes=SEPARATE))
    assert table is None
    assert problems == [ConfigProblem(FILE, "FaultTypeCode.SeparateFaultCodes", "",
                                      "not a list; the configuration is rejected",
                                      Action.KEPT_LAST_GOOD)]


def test_malformed_codes_are_ignored_and_reported() -> None:
    table, problems = NodeCodeTable.from_document(configuration(
        SeparateFaultCodes=[SEPARATE, "2C00003", "2C0000311", "2C00003G", 0x2C000031]))
    assert table == NodeCodeTable({SEPARATE: NodeFaultLevel.SEPARATE_FAULT})
    assert [(problem.field, problem.message, problem.action) for problem in problems] == [
        (field, "not an IPMI event code (8 hex digits)", Action.IGNORED)
        for field in ("2C00003", "2C0000311", "2C00003G", "738197553")]


def test_unknown_keys_are_ignored_and_reported() -> None:
    table, problems = NodeCodeTable.from_document(
        {"FaultTypeCode": {"SeparateFaultCodes": [SEPARATE], "SubHealthFaultCodes": []},
         "Version": 1})
    assert table == NodeCodeTable({SEPARATE: NodeFaultLevel.SEPARATE_FAULT})
    assert [problem.describe() for problem in problems] == [
        "NodeDConfiguration.json: Version: unknown key (known: FaultTypeCode) [ignored]",
        "NodeDConfiguration.json: FaultTypeCode.SubHealthFaultCodes: not a list of node fault "
        "codes (known: NotHandleFaultCodes, PreSeparateFaultCodes, SeparateFaultCodes) [ignored]"]


# The node document


def test_no_device_leaves_the_node_healthy() -> None:
    info = node_info([], table=TABLE)
    assert info == NodeInfo((), NodeStatus.HEALTHY)
    assert info.to_data() == {
        "NodeInfo": {"FaultDevList": [], "NodeStatus": "Healthy"},
        "CheckCode": hashlib.sha256(b'{"FaultDevList":[],"NodeStatus":"Healthy"}').hexdigest()}


def test_unknown_codes_are_dropped_and_a_device_left_without_codes_is_left_out() -> None:
    info = node_info([NodeFaultDevice("CPU", 0, (UNKNOWN, NOT_HANDLE, "abcdef01")),
                      NodeFaultDevice("Disk", 1, (UNKNOWN,)),
                      NodeFaultDevice("Memory", 2, ())], table=TABLE)
    assert info.fault_devices == (
        FaultDevice("CPU", 0, (NOT_HANDLE,), NodeFaultLevel.NOT_HANDLE_FAULT),)
    assert info.node_status is NodeStatus.HEALTHY


def test_a_device_takes_its_most_serious_code_keeping_its_codes_as_reported() -> None:
    info = node_info([NodeFaultDevice("CPU", 3, ("2c000031", NOT_HANDLE, PRE_SEPARATE,
                                                 NOT_HANDLE))], table=TABLE)
    assert info.fault_devices == (FaultDevice(
        "CPU", 3, ("2c000031", NOT_HANDLE, PRE_SEPARATE, NOT_HANDLE),
        NodeFaultLevel.SEPARATE_FAULT),)


@pytest.mark.parametrize(("codes", "status"), [
    ([[NOT_HANDLE], [NOT_HANDLE]], NodeStatus.HEALTHY),
    ([[NOT_HANDLE], [PRE_SEPARATE, UNKNOWN]], NodeStatus.PRE_SEPARATE),
    ([[PRE_SEPARATE], [SEPARATE], [NOT_HANDLE]], NodeStatus.UNHEALTHY),
    ([[UNKNOWN], [UNKNOWN]], NodeStatus.HEALTHY),
])
def test_the_node_status_follows_the_most_serious_device(codes: list[list[str]],
                                                         status: NodeStatus) -> None:
    devices = [NodeFaultDevice("CPU", index, tuple(each)) for index, each in enumerate(codes)]
    assert node_info(devices, table=TABLE).node_status is status


def test_the_document_has_the_node_info_shape_and_a_go_compatible_check_code() -> None:
    info = node_info([NodeFaultDevice("CPU", 0, (SEPARATE,)),
                      NodeFaultDevice("Memory", 12, (PRE_SEPARATE, NOT_HANDLE))], table=TABLE)
    encoded = ('{"FaultDevList":[{"DeviceType":"CPU","DeviceId":0,"FaultCode":["2C000031"],'
               '"FaultLevel":"SeparateFault"},{"DeviceType":"Memory","DeviceId":12,"FaultCode":'
               '["0000001D","0100000D"],"FaultLevel":"PreSeparateFault"}],"NodeStatus":"UnHealthy"}')
    assert info.to_data() == {"NodeInfo": json.loads(encoded),
                              "CheckCode": hashlib.sha256(encoded.encode()).hexdigest()}
    assert list(info.to_data()) == ["NodeInfo", "CheckCode"]


def test_the_check_code_escapes_characters_as_go_does() -> None:
    info = NodeInfo((FaultDevice("a<b>&c\u2028é", 1, (SEPARATE,),
                                 NodeFaultLevel.SEPARATE_FAULT),), NodeStatus.UNHEALTHY)
    encoded = ('{"FaultDevList":[{"DeviceType":"a\\u003cb\\u003e\\u0026c\\u2028é","DeviceId":1,'
               '"FaultCode":["2C000031"],"FaultLevel":"SeparateFault"}],"NodeStatus":"UnHealthy"}')
    assert info.check_code == hashlib.sha256(encoded.encode()).hexdigest()


# Properties

devices_strategy = st.lists(st.builds(
    NodeFaultDevice, st.sampled_from(["CPU", "Memory", "Disk"]), st.integers(0, 64),
    st.lists(st.sampled_from([NOT_HANDLE, PRE_SEPARATE, SEPARATE, UNKNOWN]),
             max_size=4).map(tuple)), max_size=8)


@given(devices_strategy, st.randoms())
def test_the_node_status_is_that_of_the_most_serious_code_whatever_the_order(
        devices: list[NodeFaultDevice], rng: Random) -> None:
    info = node_info(devices, table=TABLE)
    levels = [level for device in devices for code in device.fault_codes
              if (level := TABLE.level_of(code)) is not None]
    expected = max(levels, key=lambda level: level.severity,
                   default=NodeFaultLevel.NOT_HANDLE_FAULT)
    assert info.node_status is expected.node_status
    assert all(UNKNOWN not in device.fault_codes and device.fault_codes
               for device in info.fault_devices)
    shuffled = list(devices)
    rng.shuffle(shuffled)
    assert node_info(shuffled, table=TABLE).node_status is info.node_status


def test_a_node_document_read_back_is_the_one_written_and_says_why_it_is_unhealthy() -> None:
    info = node_info([NodeFaultDevice("Power Supply", 81, (SEPARATE, NOT_HANDLE))], table=TABLE)
    data = info.to_data()["NodeInfo"]
    assert isinstance(data, dict)
    assert NodeInfo.from_data(json.loads(json.dumps(data))) == info
    assert info.describe("n1") == (f"node n1 is UnHealthy: Power Supply 81 {SEPARATE},"
                                   f"{NOT_HANDLE} (SeparateFault)")
    assert node_info([], table=TABLE).describe("n1") == "node n1 is Healthy"


@pytest.mark.parametrize(("info", "message"), [
    ({"NodeStatus": "Healthy"}, "NodeInfo: field 'FaultDevList' must be a list, got NoneType"),
    ({"FaultDevList": [], "NodeStatus": 1}, "NodeInfo: field 'NodeStatus' must be a string"),
    ({"FaultDevList": [], "NodeStatus": "Dead"}, "'Dead' is not a valid NodeStatus"),
    ({"FaultDevList": [3], "NodeStatus": "Healthy"}, "NodeInfo.FaultDevList[0] must be a JSON"),
    ({"FaultDevList": [{"DeviceType": "CPU", "DeviceId": True, "FaultCode": [],
                        "FaultLevel": "SeparateFault"}], "NodeStatus": "UnHealthy"},
     "NodeInfo.FaultDevList[0]: field 'DeviceId' must be an integer, got bool"),
    ({"FaultDevList": [{"DeviceType": "CPU", "DeviceId": 1, "FaultCode": [7],
                        "FaultLevel": "SeparateFault"}], "NodeStatus": "UnHealthy"},
     "NodeInfo.FaultDevList[0]: field 'FaultCode' must be a list of strings"),
])
def test_a_node_document_that_cannot_be_read_back_names_its_field(info: dict[str, object],
                                                                  message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        NodeInfo.from_data(info)
