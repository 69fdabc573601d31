"""Shards of the cluster documents, their write plan, and the node entries field by field."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.controller.fault_centre import node_documents
from trainguard.controller.fault_centre.fault_ranks import FaultRanks
from trainguard.controller.fault_centre.shards import OversizedEntryError, ShardAssignment
from trainguard.controller.fault_centre.write_plan import DocumentWrite, WritePlanner
from trainguard.faults import go_json
from trainguard.faults.node import node_faults
from trainguard.faults.node.switch_faults import NodeStatus


def test_go_json_sorts_maps_keeps_struct_order_and_escapes_html() -> None:
    value = {"b": go_json.GoMap({"z": 1, "a": "<&>"}), "a": ["é"]}
    assert go_json.dumps(value) == '{"b":{"a":"\\u003c\\u0026\\u003e","z":1},"a":["é"]}'


def test_a_shard_stays_within_the_limit_and_entries_stay_put() -> None:
    shards = ShardAssignment(limit=100)
    for index in range(6):
        shards.put(f"node-{index}", json.dumps("x" * 20))
    texts = shards.texts()
    assert all(len(text.encode()) <= 100 for text in texts)
    assert len(texts) == 2  # 26 bytes an entry: three to a shard
    before = shards.export()
    shards.remove("node-1")
    shards.put("node-9", json.dumps("y" * 20))  # takes the freed room
    assert shards.shard_of("node-9") == before["node-1"]
    assert {key: shards.shard_of(key) for key in before if key != "node-1"} == {
        key: index for key, index in before.items() if key != "node-1"}


def test_a_grown_entry_moves_only_when_its_shard_is_full() -> None:
    shards = ShardAssignment(limit=100)
    shards.put("a", json.dumps("x" * 20))
    shards.put("b", json.dumps("x" * 20))
    shards.put("a", json.dumps("x" * 30))
    assert shards.shard_of("a") == 0
    shards.put("a", json.dumps("x" * 80))
    assert (shards.shard_of("a"), shards.shard_of("b")) == (1, 0)


def test_an_entry_larger_than_a_shard_is_refused_by_name() -> None:
    shards = ShardAssignment(limit=50)
    with pytest.raises(OversizedEntryError, match=r"^big: its entry is 59 bytes"):
        shards.put("big", json.dumps("x" * 49))
    assert shards.texts() == []


def test_emptied_shards_at_the_end_go_and_in_the_middle_stay() -> None:
    shards = ShardAssignment(limit=40)
    for key in "abc":
        shards.put(key, json.dumps("x" * 25))
    shards.remove("b")
    assert shards.texts()[1] == "{}"
    shards.remove("c")
    assert len(shards.texts()) == 1


def test_preferred_shards_come_back_after_a_restart() -> None:
    shards = ShardAssignment(limit=100)
    for index in range(6):
        shards.put(f"node-{index}", json.dumps("x" * 20))
    again = ShardAssignment(limit=100)
    again.prefer(json.loads(json.dumps(shards.export())))
    for index in reversed(range(6)):
        again.put(f"node-{index}", json.dumps("x" * 20))
    assert again.export() == shards.export()
    with pytest.raises(ValueError, match=r"shard of 'n': expected a shard number >= 0"):
        again.prefer({"n": -1})


@settings(max_examples=40)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 200)), max_size=60))
def test_every_shard_within_the_limit_whatever_comes_and_goes(
        steps: list[tuple[int, int]]) -> None:
    shards = ShardAssignment(limit=400)
    present: dict[str, int] = {}
    for node, size in steps:
        key = f"node-{node}"
        if size > 150:
            shards.remove(key)
            present.pop(key, None)
        else:
            shards.put(key, json.dumps("x" * size))
            present[key] = size
    texts = shards.texts()
    assert all(len(text.encode()) <= 400 for text in texts)
    assert not texts or texts[-1] != "{}"
    merged = {}
    for text in texts:
        merged.update(json.loads(text))
    assert merged == {key: "x" * size for key, size in present.items()}


def test_writes_on_change_refresh_every_5_s_and_at_most_5_a_second() -> None:
    planner = WritePlanner()
    documents = {f"d{index}": {f"d{index}": "{}"} for index in range(7)}
    planner.want(documents)
    first = planner.plan(0.0)
    assert [w.name for w in first] == ["d0", "d1", "d2", "d3", "d4"]
    assert planner.plan(0.5) == []
    assert planner.next_due(0.5) == 1.0
    assert [w.name for w in planner.plan(1.0)] == ["d5", "d6"]
    assert planner.plan(2.0) == []
    assert planner.next_due(2.0) == 5.0
    assert [w.name for w in planner.plan(5.0)] == ["d0", "d1", "d2", "d3", "d4"]
    planner.want({**documents, "d1": {"d1": '{"x":1}'}})
    del documents["d6"]
    planner.want({**documents, "d1": {"d1": '{"x":1}'}})
    assert planner.plan(6.0) == [DocumentWrite("d1", {"d1": '{"x":1}'}),
                                 DocumentWrite("d6", None), DocumentWrite("d5", documents["d5"])]


def test_a_failed_write_is_planned_again() -> None:
    planner = WritePlanner()
    planner.want({"d": {"d": "{}"}})
    (write,) = planner.plan(0.0)
    planner.failed(write.name)
    assert planner.plan(0.1) == [write]
    assert planner.next_due(0.2) == 5.1


def device_info_document(*, faults: list[dict[str, object]] | None = None) -> dict[str, object]:
    device_list = {
        "huawei.com/Ascend910": "Ascend910-0,Ascend910-1,Ascend910-2",
        "huawei.com/Ascend910-Fault": json.dumps(faults or [], separators=(",", ":")),
        "huawei.com/Ascend910-NetworkUnhealthy": "",
        "huawei.com/Ascend910-Recovering": "",
        "huawei.com/Ascend910-Unhealthy": "Ascend910-3",
    }
    info = {"DeviceList": device_list, "UpdateTime": 1744182144}
    return {"DeviceInfo": info, "SuperPodID": -2, "ServerIndex": -2,
            "CheckCode": go_json.check_code(
                {"DeviceList": go_json.GoMap(device_list), "UpdateTime": 1744182144})}


UCE_FAULT: dict[str, object] = {"fault_type": "CardUnhealthy", "npu_name": "Ascend910-1",
             "large_model_fault_level": "SeparateNPU", "fault_level": "SeparateNPU",
             "fault_handling": "SeparateNPU", "fault_code": "80E01801,80C98009",
             "fault_time_and_level_map": {
                 "80C98009": {"fault_time": 1000, "fault_level": "SeparateNPU"},
                 "80E01801": {"fault_time": 1000, "fault_level": "RestartBusiness"}}}


def test_the_device_entry_field_by_field() -> None:
    entry = node_documents.device_entry("n1", device_info_document())
    assert list(entry) == ["DeviceList", "UpdateTime", "CmName", "SuperPodID", "ServerIndex"]
    assert entry["CmName"] == "mindx-dl-deviceinfo-n1"
    assert (entry["UpdateTime"], entry["SuperPodID"], entry["ServerIndex"]) == (
        1744182144, -2, -2)
    info = device_info_document()["DeviceInfo"]
    assert isinstance(info, dict)
    assert entry["DeviceList"] == info["DeviceList"]


def test_the_device_entry_hides_held_codes_and_shows_separated_devices() -> None:
    entry = node_documents.device_entry("n1", device_info_document(faults=[UCE_FAULT]),
                                        hidden={1: {"80C98009"}}, separated={2})
    devices = entry["DeviceList"]
    assert isinstance(devices, dict)
    faults = json.loads(devices["huawei.com/Ascend910-Fault"])
    assert faults[0]["fault_code"] == "80E01801"
    assert faults[0]["fault_handling"] == "RestartBusiness"
    assert list(faults[0]["fault_time_and_level_map"]) == ["80E01801"]
    assert faults[1] == {"fault_type": "CardUnhealthy", "npu_name": "Ascend910-2",
                         "large_model_fault_level": "ManuallySeparateNPU",
                         "fault_level": "ManuallySeparateNPU",
                         "fault_handling": "ManuallySeparateNPU", "fault_code": "",
                         "fault_time_and_level_map": {}}
    assert devices["huawei.com/Ascend910-Unhealthy"] == "Ascend910-3,Ascend910-2"


def test_an_entry_left_without_codes_goes() -> None:
    entry = node_documents.device_entry("n1", device_info_document(faults=[UCE_FAULT]),
                                        hidden={1: {"80C98009", "80E01801"}})
    devices = entry["DeviceList"]
    assert isinstance(devices, dict)
    assert devices["huawei.com/Ascend910-Fault"] == "[]"


@pytest.mark.parametrize(("change", "message"), [
    ({"CheckCode": "0" * 64}, "CheckCode '0000000000000000000000000000000000000000000000000000"
                              "000000000000' does not match"),
    ({"SuperPodID": "x"}, "field 'SuperPodID' must be an integer, got str"),
    ({"DeviceInfo": None}, "field 'DeviceInfo' must be a JSON object, got NoneType"),
])
def test_a_bad_device_document_is_refused_by_field(change: dict[str, object],
                                                   message: str) -> None:
    with pytest.raises(node_documents.DocumentError, match=r"^mindx-dl-deviceinfo-n1: "):
        node_documents.device_entry("n1", {**device_info_document(), **change})
    with pytest.raises(node_documents.DocumentError) as raised:
        node_documents.device_entry("n1", {**device_info_document(), **change})
    assert message in str(raised.value)


def test_the_node_entry_checks_what_the_node_detector_writes() -> None:
    info = node_faults.NodeInfo((node_faults.FaultDevice("CPU", 0, ("00000001",),
                                                         node_faults.NodeFaultLevel.SEPARATE_FAULT),),
                                NodeStatus.UNHEALTHY)
    entry = node_documents.node_entry("n1", json.loads(json.dumps(info.to_data())))
    assert entry == {"FaultDevList": [{"DeviceType": "CPU", "DeviceId": 0,
                                       "FaultCode": ["00000001"],
                                       "FaultLevel": "SeparateFault"}],
                     "NodeStatus": "UnHealthy", "CmName": "mindx-dl-nodeinfo-n1"}


def test_the_switch_entry_field_by_field() -> None:
    document = {"FaultCode": ['{"AssembledFaultCode":"[0x08520003,na,L2,na]"}'],
                "FaultLevel": "SubHealthFault", "UpdateTime": 5, "NodeStatus": "SubHealthy",
                "FaultTimeAndLevelMap": {"k": {"fault_time": 1, "fault_level": "x"}}}
    entry = node_documents.switch_entry("n1", document)
    assert list(entry) == ["FaultCode", "FaultLevel", "UpdateTime", "NodeStatus",
                           "FaultTimeAndLevelMap", "CmName"]
    assert entry["CmName"] == "mindx-dl-switchinfo-n1"
    with pytest.raises(node_documents.DocumentError, match="field 'NodeStatus' is missing"):
        node_documents.switch_entry("n1", {k: v for k, v in document.items()
                                           if k != "NodeStatus"})


def test_the_fault_ranks_document_field_by_field() -> None:
    ranks = FaultRanks("job", (), 0.0).updated([11, 3, 3], 1700000000.9)
    data = ranks.data()
    assert ranks.name == "fault-config-job"
    assert data["fault-npus"] == '{"FaultRankIds":["3","11"],"CreatTime":1700000000}'
    assert data["checkCode"] == hashlib.sha256(data["fault-npus"].encode()).hexdigest()
    assert ranks.updated([3, 11], 1800000000.0) is ranks
