"""The device document, field by field against the original's example (NOTES §6.3, from the
original's documentation): the same faults give the same text and the same CheckCode."""

from __future__ import annotations

import json

import pytest

from trainguard import names
from trainguard.detect.devices import backend, device_info, naming
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.device.device_health import DeviceHealth, FaultEngine

EIGHT = backend.Inventory(tuple(backend.DeviceIdentity(i, i) for i in range(8)))
# The original's example, as its documentation shows it (an A3 node, abbreviated in NOTES).
EXAMPLE_FAULT = (
    '[{"fault_type":"CardNetworkUnhealthy","npu_name":"Ascend910-0",'
    '"large_model_fault_level":"PreSeparateNPU","fault_level":"PreSeparateNPU",'
    '"fault_handling":"PreSeparateNPU","fault_code":"81078603","fault_time_and_level_map":'
    '{"81078603":{"fault_time":1744168468259,"fault_level":"PreSeparateNPU"}}},'
    '{"fault_type":"CardUnhealthy","npu_name":"Ascend910-4",'
    '"large_model_fault_level":"SeparateNPU","fault_level":"SeparateNPU",'
    '"fault_handling":"SeparateNPU","fault_code":"A8028801,A4028801,80E18402,80E18401",'
    '"fault_time_and_level_map":{'
    '"80E18401":{"fault_time":1744167455784,"fault_level":"NotHandleFault"},'
    '"80E18402":{"fault_time":1744167455784,"fault_level":"SeparateNPU"},'
    '"A4028801":{"fault_time":1744167455784,"fault_level":"NotHandleFault"},'
    '"A8028801":{"fault_time":1744167455784,"fault_level":"SeparateNPU"}}}]')
EXAMPLE_CHECK_CODE = "a550811fdfafb5717555526816af2ca4ac6c3e102f5907574048578e0c8fcc73"


def _example_healths() -> dict[str, DeviceHealth]:
    """Device 4's chip faults, then device 0's link down lasting past its 20 s."""
    engine = FaultEngine()
    healths = {}
    for code in ("A8028801", "A4028801", "80E18402", "80E18401"):
        healths["device-4"] = engine.report(
            DeviceFaultEvent("device-4", code, Assertion.OCCUR, 1744167455.784))
    engine.report(DeviceFaultEvent("device-0", "81078603", Assertion.OCCUR, 1744168468.259))
    for health in engine.sweep(1744182144.0):
        healths[health.device] = health
    return healths


def test_the_original_example_is_reproduced_to_its_check_code() -> None:
    document = device_info.device_info(node="node-1", inventory=EIGHT,
                                       healths=_example_healths(),
                                       naming=naming.ASCEND_NAMING, now=1744182144.9)
    assert document.name == "mindx-dl-deviceinfo-node-1"
    data = document.to_data()
    assert list(data) == ["DeviceInfoCfg", "ManuallySeparateNPU", "UpgradeFaultReason"]
    config = json.loads(data["DeviceInfoCfg"])
    assert list(config) == ["DeviceInfo", "SuperPodID", "ServerIndex", "CheckCode"]
    assert list(config["DeviceInfo"]) == ["DeviceList", "UpdateTime"]
    device_list = config["DeviceInfo"]["DeviceList"]
    assert list(device_list) == [
        "huawei.com/Ascend910", "huawei.com/Ascend910-Fault",
        "huawei.com/Ascend910-NetworkUnhealthy", "huawei.com/Ascend910-Recovering",
        "huawei.com/Ascend910-Unhealthy"]
    assert device_list["huawei.com/Ascend910"] == (
        "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3,Ascend910-5,Ascend910-6,Ascend910-7")
    assert device_list["huawei.com/Ascend910-Fault"] == EXAMPLE_FAULT  # a JSON string
    assert device_list["huawei.com/Ascend910-NetworkUnhealthy"] == "Ascend910-0"
    assert device_list["huawei.com/Ascend910-Recovering"] == ""
    assert device_list["huawei.com/Ascend910-Unhealthy"] == "Ascend910-4"
    assert config["DeviceInfo"]["UpdateTime"] == 1744182144
    assert (config["SuperPodID"], config["ServerIndex"]) == (-2, -2)
    assert config["CheckCode"] == document.check_code == EXAMPLE_CHECK_CODE
    assert data["ManuallySeparateNPU"] == ""
    reasons = json.loads(data["UpgradeFaultReason"])
    assert list(reasons) == ["Ascend910-0"]
    assert reasons["Ascend910-0"] == [{"fault_code": "81078603", "fault_level": "PreSeparateNPU",
                                       "upgrade_type": "FaultDuration",
                                       "upgrade_time": pytest.approx(1744168488.259)}]


def test_manual_separation_recovering_devices_gpu_names_and_the_super_pod() -> None:
    engine = FaultEngine()
    for time in (0.0, 10.0):  # 80E18005 three times in 24 h: ManuallySeparateNPU
        engine.report(DeviceFaultEvent("device-2", "80E18005", Assertion.ONCE, time))
    health = engine.report(DeviceFaultEvent("device-2", "80E18005", Assertion.ONCE, 20.0))
    health = engine.health("device-2", 21.0)
    assert health.manually_separated
    inventory = backend.Inventory(tuple(backend.DeviceIdentity(i, 3 - i) for i in range(4)),
                                  super_pod_id=1, server_index=-1)
    document = device_info.device_info(node="gpu-host", inventory=inventory,
                                       healths={"device-2": health},
                                       naming=naming.GPU_NAMING, now=100.0, recovering={1})
    assert document.device_list() == {
        "nvidia.com/gpu": "gpu-0,gpu-3", "nvidia.com/gpu-Fault": json.dumps([{
            "fault_type": "CardUnhealthy", "npu_name": "gpu-2",
            "large_model_fault_level": "ManuallySeparateNPU",
            "fault_level": "ManuallySeparateNPU", "fault_handling": "ManuallySeparateNPU",
            "fault_code": "", "fault_time_and_level_map": {}}], separators=(",", ":")),
        "nvidia.com/gpu-NetworkUnhealthy": "", "nvidia.com/gpu-Recovering": "gpu-1",
        "nvidia.com/gpu-Unhealthy": "gpu-2"}
    data = document.to_data()
    config = json.loads(data["DeviceInfoCfg"])
    assert (config["SuperPodID"], config["ServerIndex"]) == (1, -1)
    assert data["ManuallySeparateNPU"] == "gpu-2"
    assert [r["upgrade_type"] for r in json.loads(data["UpgradeFaultReason"])["gpu-2"]] == [
        "FaultFrequency"]


def test_a_healthy_host_lists_every_device_as_available() -> None:
    document = device_info.device_info(node="n", inventory=EIGHT, healths={},
                                       naming=naming.ASCEND_NAMING, now=5.0)
    assert document.device_list()["huawei.com/Ascend910-Fault"] == "[]"
    assert document.available == tuple(f"Ascend910-{i}" for i in range(8))
    assert document.to_data()["UpgradeFaultReason"] == "{}"


def test_the_document_refuses_a_bad_node_name() -> None:
    with pytest.raises(names.InvalidNameError, match="node name 'Node_1' is not valid"):
        device_info.document_name("Node_1")
