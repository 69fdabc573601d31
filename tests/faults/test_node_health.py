"""A node's faults (NodeD, switch, public) handed over as its devices' levels."""

from __future__ import annotations

import pytest

from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.device.fault_codes import Severity
from trainguard.faults.levels import FaultType, Level, ResetPolicy
from trainguard.faults.node import node_faults, node_health, switch_faults
from trainguard.faults.public import public_messages

SEPARATE_IPMI = "2C000031"  # NodeDConfiguration.json SeparateFaultCodes
PRE_SEPARATE_IPMI = "0000001D"
SWITCH_RESTART_REQUEST = "[0x00f1fef5,155914,npu,na]"


def _node(*codes: str) -> node_faults.NodeInfo:
    return node_faults.node_info([node_faults.NodeFaultDevice("CPU", 0, codes)],
                                 table=node_faults.default_node_table())


def _switch(code: str) -> switch_faults.SwitchInfo:
    fault = switch_faults.SwitchFault(code, 0xF1FEF5, 1, 0, 2, 7, Severity.MAJOR,
                                      Assertion.OCCUR, 100.0)
    return switch_faults.aggregate([fault], table=switch_faults.default_switch_table(),
                                   update_time=100.0)


def _public(fault_type: public_messages.PublicFaultType, level: Level, devices: tuple[int, ...],
            code: str = "220001001") -> public_messages.NodePublicFault:
    return public_messages.NodePublicFault("pingmesh", "fault-0001", fault_type, code, level,
                                           1_744_168_468_259, devices)


def _healthy(device: str = "device-0") -> device_health.DeviceHealth:
    return device_health.FaultEngine().health(device, 0.0)


def test_no_node_fault_gives_no_entry() -> None:
    assert node_health.node_entry() is None
    assert node_health.node_entry(node=_node()) is None


@pytest.mark.parametrize(("code", "level"), [(SEPARATE_IPMI, Level.SEPARATE_NPU),
                                             (PRE_SEPARATE_IPMI, Level.PRE_SEPARATE_NPU)])
def test_a_node_d_fault_is_a_node_unhealthy_entry(code: str, level: Level) -> None:
    entry = node_health.node_entry(node=_node(code))

    assert entry is not None
    assert (entry.fault_type, entry.npu_name, entry.fault_level) == (
        FaultType.NODE_UNHEALTHY, "", level)
    assert entry.codes[code][1] is level


def test_the_node_entry_takes_the_most_serious_of_node_d_and_switch() -> None:
    entry = node_health.node_entry(node=_node(PRE_SEPARATE_IPMI),
                                   switch=_switch(SWITCH_RESTART_REQUEST))

    assert entry is not None
    assert entry.fault_level is Level.PRE_SEPARATE_NPU
    assert entry.codes[f"{SWITCH_RESTART_REQUEST}_2_7"] == (100.0, Level.RESTART_REQUEST)


def test_every_switch_and_node_level_has_a_chip_level() -> None:
    assert set(node_health.SWITCH_LEVELS) == set(switch_faults.SwitchLevel)
    assert set(node_health.NODE_LEVELS) == set(node_faults.NodeFaultLevel)


def test_a_device_on_a_separated_node_is_taken_out_of_use() -> None:
    entry = node_health.node_entry(node=_node(SEPARATE_IPMI))
    assert entry is not None

    health = node_health.with_node(_healthy(), [entry])

    assert health.level is Level.SEPARATE_NPU
    assert health.reset_policy is ResetPolicy.ISOLATE
    assert health.fault_type is FaultType.NODE_UNHEALTHY
    assert health.allows_in_place is False
    assert health.entries == (entry,)


def test_a_chip_fault_worse_than_the_node_keeps_its_level() -> None:
    engine = device_health.FaultEngine()
    chip = engine.report(DeviceFaultEvent("device-1", "80E3A201", Assertion.OCCUR, 5.0))
    entry = node_health.node_entry(switch=_switch(SWITCH_RESTART_REQUEST))
    assert entry is not None

    health = node_health.with_node(chip, [entry])

    assert health.level is Level.SEPARATE_NPU
    assert health.fault_type is FaultType.CARD_UNHEALTHY
    assert [e.fault_type for e in health.entries] == [FaultType.CARD_UNHEALTHY,
                                                      FaultType.NODE_UNHEALTHY]


def test_without_node_entries_the_health_is_unchanged() -> None:
    health = _healthy()

    assert node_health.with_node(health, []) is health


def test_public_faults_hit_the_devices_they_name_or_the_whole_node() -> None:
    faults = [
        _public(public_messages.PublicFaultType.NPU, Level.SEPARATE_NPU, (3,)),
        _public(public_messages.PublicFaultType.NETWORK, Level.SUB_HEALTH_FAULT, (1, 3),
                code="210001007"),
        _public(public_messages.PublicFaultType.STORAGE, Level.SUB_HEALTH_FAULT, (0,),
                code="310001005"),
    ]

    on_three = node_health.public_entries(faults, device=3)
    on_two = node_health.public_entries(faults, device=2)

    assert {(e.fault_type, e.fault_level) for e in on_three} == {
        (FaultType.CARD_UNHEALTHY, Level.SEPARATE_NPU),
        (FaultType.CARD_NETWORK_UNHEALTHY, Level.SUB_HEALTH_FAULT),
        (FaultType.NODE_UNHEALTHY, Level.SUB_HEALTH_FAULT)}
    assert [(e.fault_type, e.npu_name) for e in on_two] == [(FaultType.NODE_UNHEALTHY, "")]
    (card,) = (e for e in on_three if e.fault_type is FaultType.CARD_UNHEALTHY)
    assert card.codes == {"220001001": (1_744_168_468.259, Level.SEPARATE_NPU)}
    assert node_health.with_node(_healthy("device-3"), on_three).level is Level.SEPARATE_NPU
    assert node_health.with_node(_healthy("device-2"), on_two).allows_in_place is True
