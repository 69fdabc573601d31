"""The fault centre as the controller drives it: events and documents in, decisions out."""

from __future__ import annotations

import json

import pytest

from trainguard.controller.fault_centre.api import JobPlacement, split_device
from trainguard.controller.fault_centre.centre import FaultCentre
from trainguard.controller.fault_centre.relation_config import Strategy
from trainguard.controller.fault_centre.separation_policy import SeparationPolicy
from trainguard.controller.fault_centre.shards import SHARD_LIMIT
from trainguard.faults import go_json
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level

UCE, AIC, HCCL_RETRY, LINK_DOWN = "80E01801", "80C98009", "8C1F860B", "81078603"


def centre_with_job(*, retries_steps: bool = False,
                    policy: SeparationPolicy | None = None) -> FaultCentre:
    centre = FaultCentre(policy=policy)
    centre.place_job(JobPlacement("job", {f"n{node}/device-{device}": node * 2 + device
                                          for node in (0, 1) for device in (0, 1)},
                                  retries_steps=retries_steps))
    return centre


def occur(code: str, time: float, device: str = "n0/device-0") -> DeviceFaultEvent:
    return DeviceFaultEvent(device, code, Assertion.OCCUR, time)


def recover(code: str, time: float, device: str = "n0/device-0") -> DeviceFaultEvent:
    return DeviceFaultEvent(device, code, Assertion.RECOVER, time)


def delivered(centre: FaultCentre, now: float) -> list[tuple[str | None, str, str]]:
    return [(d.job, d.event.code, str(d.event.assertion))
            for d in centre.evaluate(now).deliveries]


def test_split_device() -> None:
    assert split_device("node-a/device-12") == ("node-a", 12)
    assert split_device("node-a/npu-1") is None


def test_a_uce_companion_is_held_then_dropped_and_its_recovery_never_shown() -> None:
    centre = centre_with_job()
    centre.device_fault(occur(UCE, 100.0))
    centre.device_fault(occur(AIC, 101.0))
    assert delivered(centre, 101.0) == [("job", UCE, "occur")]
    assert delivered(centre, 110.0) == []
    centre.device_fault(recover(AIC, 111.0))
    assert delivered(centre, 111.0) == []


def test_a_companion_without_a_uce_reaches_the_job_after_5_s() -> None:
    centre = centre_with_job()
    centre.device_fault(occur(AIC, 100.0))
    assert delivered(centre, 105.0) == []
    assert delivered(centre, 105.5) == [("job", AIC, "occur")]
    centre.device_fault(recover(AIC, 200.0))
    assert delivered(centre, 200.0) == [("job", AIC, "recover")]


def test_a_retried_uce_stays_hidden_when_the_retry_completes() -> None:
    centre = centre_with_job(retries_steps=True)
    centre.device_fault(occur(UCE, 100.0))
    assert delivered(centre, 100.0) == []
    centre.recovery_report(job="job", device="n0/device-0", recover_time=103.0,
                           complete_time=120.0)
    assert delivered(centre, 200.0) == []


def test_a_retry_that_never_reports_reaches_the_job_after_10_s() -> None:
    centre = centre_with_job(retries_steps=True)
    centre.device_fault(occur(HCCL_RETRY, 100.0))
    assert delivered(centre, 110.0) == []
    assert delivered(centre, 110.5) == [("job", HCCL_RETRY, "occur")]


def test_a_job_that_does_not_retry_sees_a_uce_at_once() -> None:
    centre = centre_with_job(retries_steps=False)
    centre.device_fault(occur(UCE, 100.0))
    assert delivered(centre, 100.0) == [("job", UCE, "occur")]


def test_a_device_in_no_job_is_delivered_to_none() -> None:
    centre = centre_with_job()
    centre.device_fault(occur(UCE, 1.0, device="n9/device-0"))
    assert delivered(centre, 1.0) == [(None, UCE, "occur")]


def test_repeated_faults_separate_the_device_and_its_rank_is_a_fault_rank() -> None:
    centre = centre_with_job(policy=SeparationPolicy(fault_threshold=2))
    for time in (0.0, 100.0):
        centre.device_fault(occur("80E18005", time, device="n1/device-1"))
        centre.evaluate(time)
        centre.device_fault(recover("80E18005", time + 1, device="n1/device-1"))
        centre.evaluate(time + 1)
    result = centre.evaluate(131.0)
    assert [(c.device, c.separated) for c in result.separations] == [("n1/device-1", True)]
    ranks = {w.name: w.data for w in result.writes}["fault-config-job"]
    assert ranks is not None
    assert json.loads(ranks["fault-npus"])["FaultRankIds"] == ["3"]


def test_the_operator_separates_and_releases() -> None:
    centre = centre_with_job()
    assert [c.separated for c in centre.separate("n0/device-1", 1.0)] == [True]
    assert centre.manual.separated == {"n0/device-1"}
    assert [c.separated for c in centre.release("n0/device-1", 2.0)] == [False]


def test_a_link_down_and_an_hccl_retry_error_separate_the_node() -> None:
    centre = centre_with_job()
    centre.device_fault(occur(LINK_DOWN, 10.0, device="n1/device-0"))
    centre.device_fault(occur(HCCL_RETRY, 11.0, device="n1/device-1"))
    result = centre.evaluate(11.0)
    assert [(d.node, d.strategy) for d in result.relations] == [("n1", Strategy.SEPARATE)]
    ranks = {w.name: w.data for w in result.writes}["fault-config-job"]
    assert ranks is not None
    assert json.loads(ranks["fault-npus"])["FaultRankIds"] == ["2", "3"]


def test_a_switch_link_down_that_times_out_makes_its_node_sub_healthy() -> None:
    centre = centre_with_job()
    fault = {"AssembledFaultCode": "[0x08520003,na,L2,na]", "AlarmRaisedTime": 5000}
    centre.node_documents("n0", switch_info={
        "FaultCode": [json.dumps(fault)], "FaultLevel": "SubHealthFault", "UpdateTime": 5,
        "NodeStatus": "SubHealthy", "FaultTimeAndLevelMap": {}})
    assert centre.evaluate(304.0).relations == ()
    (decision,) = centre.evaluate(305.0).relations
    assert (decision.node, decision.strategy) == ("n0", Strategy.SUB_HEALTH)


def device_info(update_time: int, faults: list[dict[str, object]] | None = None
                ) -> dict[str, object]:
    device_list = {"huawei.com/Ascend910": "Ascend910-0,Ascend910-1",
                   "huawei.com/Ascend910-Fault": json.dumps(faults or []),
                   "huawei.com/Ascend910-Unhealthy": ""}
    return {"DeviceInfo": {"DeviceList": device_list, "UpdateTime": update_time},
            "SuperPodID": -2, "ServerIndex": -2,
            "CheckCode": go_json.check_code(
                {"DeviceList": go_json.GoMap(device_list), "UpdateTime": update_time})}


def test_the_cluster_documents_show_the_centres_view() -> None:
    centre = centre_with_job()
    fault: dict[str, object] = {"fault_type": "CardUnhealthy", "npu_name": "Ascend910-0",
             "large_model_fault_level": "RestartRequest", "fault_level": "RestartRequest",
             "fault_handling": "RestartRequest", "fault_code": AIC,
             "fault_time_and_level_map": {AIC: {"fault_time": 100000,
                                                "fault_level": "RestartRequest"}}}
    centre.node_documents("n0", device_info=device_info(100, [fault]),
                          node_info={"NodeInfo": {"FaultDevList": [], "NodeStatus": "Healthy"},
                                     "CheckCode": go_json.check_code(
                                         {"FaultDevList": [], "NodeStatus": "Healthy"})})
    centre.device_fault(occur(AIC, 100.0))
    writes = {w.name: w.data for w in centre.evaluate(101.0).writes}
    assert sorted(writes) == ["cluster-info-device-0", "cluster-info-node-cm",
                              "fault-config-job"]
    shard = writes["cluster-info-device-0"]
    assert shard is not None
    entry = json.loads(shard["cluster-info-device-0"])["mindx-dl-deviceinfo-n0"]
    assert entry["CmName"] == "mindx-dl-deviceinfo-n0"
    assert json.loads(entry["DeviceList"]["huawei.com/Ascend910-Fault"]) == []  # held
    node_cm = writes["cluster-info-node-cm"]
    assert node_cm is not None
    assert json.loads(node_cm["cluster-info-node-cm"]) == {
        "mindx-dl-nodeinfo-n0": {"FaultDevList": [], "NodeStatus": "Healthy",
                                 "CmName": "mindx-dl-nodeinfo-n0"}}
    writes = {w.name: w.data for w in centre.evaluate(106.0).writes}
    shard = writes["cluster-info-device-0"]
    assert shard is not None
    entry = json.loads(shard["cluster-info-device-0"])["mindx-dl-deviceinfo-n0"]
    assert json.loads(entry["DeviceList"]["huawei.com/Ascend910-Fault"])[0]["fault_code"] == AIC


def test_a_node_that_leaves_goes_from_the_documents() -> None:
    centre = FaultCentre()
    centre.node_documents("n0", device_info=device_info(1))
    centre.evaluate(0.0)
    centre.forget_node("n0")
    writes = centre.evaluate(10.0).writes
    assert ("cluster-info-device-0", None) in [(w.name, w.data) for w in writes]


def test_a_failed_write_comes_again() -> None:
    centre = FaultCentre()
    (write,) = centre.evaluate(0.0).writes
    centre.write_failed(write)
    assert centre.evaluate(0.1).writes == (write,)


def test_shards_at_scale_stay_under_800_kb() -> None:
    centre = FaultCentre()
    names = ",".join(f"Ascend910-{index}" for index in range(16))
    faults: list[dict[str, object]] = [
        {"fault_type": "CardUnhealthy", "npu_name": f"Ascend910-{index}",
         "fault_code": "80E18005",
         "fault_time_and_level_map": {"80E18005": {"fault_time": 1, "fault_level": "RestartNPU"}}}
        for index in range(16)]
    for node in range(600):
        document = device_info(1, faults)
        info = document["DeviceInfo"]
        assert isinstance(info, dict)
        info["DeviceList"]["huawei.com/Ascend910"] = names
        document["CheckCode"] = go_json.check_code(
            {"DeviceList": go_json.GoMap(info["DeviceList"]), "UpdateTime": 1})
        centre.node_documents(f"node-{node:04d}", device_info=document)
    centre.planner.max_writes_per_second = 100
    writes = [w for w in centre.evaluate(0.0).writes if w.name.startswith("cluster-info-device")]
    sizes = [len(next(iter(w.data.values())).encode()) for w in writes if w.data]
    assert len(sizes) >= 2
    assert all(size <= SHARD_LIMIT for size in sizes)
    assert sum(len(json.loads(next(iter(w.data.values())))) for w in writes if w.data) == 600


def test_export_and_restore_do_not_deliver_or_count_a_fault_twice() -> None:
    centre = centre_with_job(policy=SeparationPolicy(fault_threshold=2))
    centre.device_fault(occur("80E18005", 0.0))
    centre.evaluate(0.0)
    centre.evaluate(31.0)
    data = json.loads(json.dumps(centre.export()))
    again = centre_with_job(policy=SeparationPolicy(fault_threshold=2))
    again.restore(data)
    again.device_fault(occur("80E18005", 0.0))  # the node re-reports what it holds
    assert again.evaluate(40.0).deliveries == ()
    assert again.evaluate(80.0).separations == ()
    again.device_fault(recover("80E18005", 90.0))
    assert [str(d.event.assertion) for d in again.evaluate(90.0).deliveries] == ["recover"]


def test_restore_names_the_bad_field() -> None:
    with pytest.raises(ValueError, match=r"fault centre: field 'shards' is missing"):
        FaultCentre().restore({"manual_separation": FaultCentre().manual.export(),
                               "relations": {}, "fault_ranks": {}, "delivered": {}})


def test_a_given_level_is_used_for_counting() -> None:
    centre = FaultCentre(policy=SeparationPolicy(fault_threshold=1))
    centre.device_fault(occur("81078603", 0.0, device="n5/device-0"), level=Level.SEPARATE_NPU)
    assert [c.device for c in centre.evaluate(0.0).separations] == ["n5/device-0"]
