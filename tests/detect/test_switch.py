from __future__ import annotations

import asyncio
import json
import sys
import types
from typing import Any

import pytest

from tests.detect.detector_fixtures import FakeClock
from trainguard.clock import SystemClock
from trainguard.detect.switch import (
    SimSwitchSource,
    SwitchDetector,
    SwitchSettings,
    parse_switch_timeline,
)
from trainguard.detect.switch_nvlink import NvLinkSource
from trainguard.faults.device.device_events import Assertion
from trainguard.faults.device.fault_codes import Severity
from trainguard.faults.device.replay import TimelineError
from trainguard.faults.node.switch_faults import NodeStatus, SwitchFault, SwitchInfo, SwitchLevel

TIMELINE = [
    '{"time": 0, "EventType": "0x08520003", "SubType": "na", "PeerPortDevice": 1,'
    ' "PeerPortId": 3, "SwitchChipId": 0, "SwitchPortId": 5, "Severity": 2,'
    ' "Assertion": "occur"}',
    "# a sub-health alarm of a whole chip, by its code",
    '{"time": 0.01, "EventType": 15859458, "AssembledFaultCode": "[0x00f1ff06,155910,na,na]",'
    ' "SwitchChipId": 1, "SwitchPortId": 4294967295, "Assertion": 1}',
    '{"time": 0.02, "EventType": "0x08520003", "PeerPortDevice": 1, "PeerPortId": 3,'
    ' "SwitchChipId": 0, "SwitchPortId": 5, "Severity": 2, "Assertion": "recover"}',
]


def test_timeline_is_parsed_with_codes_assembled() -> None:
    records = parse_switch_timeline(TIMELINE)
    assert [(time, fault.code, fault.assertion) for time, fault in records] == [
        (0.0, "[0x08520003,na,npu,na]", Assertion.OCCUR),
        (0.01, "[0x00f1ff06,155910,na,na]", Assertion.OCCUR),
        (0.02, "[0x08520003,na,npu,na]", Assertion.RECOVER)]
    assert records[1][1].severity is Severity.MAJOR
    assert records[1][1].peer_port_device == 0xFFFF


@pytest.mark.parametrize(("line", "message"), [
    ('{"time": 0, "EventType": 1, "SwitchChipId": 0, "SwitchPortId": 0, "Colour": 1}',
     "line 1: Colour: not a field"),
    ('{"time": 0, "EventType": 1, "SwitchChipId": 0, "SwitchPortId": 0, "Assertion": "gone"}',
     "line 1: Assertion: 'gone' is not one of"),
    ('{"time": 0, "EventType": 1, "SwitchChipId": 0, "SwitchPortId": 0, "Severity": 4}',
     "line 1: Severity: 4 is not in 0..3"),
    ('{"time": 0, "EventType": "x", "SwitchChipId": 0, "SwitchPortId": 0}',
     "line 1: EventType: expected a non-negative integer"),
    ('{"time": 0, "EventType": 1, "SwitchChipId": 0, "SwitchPortId": 0,'
     ' "AssembledFaultCode": "0x1,na"}', "line 1: AssembledFaultCode: not enclosed"),
    ('{"EventType": 1}', "line 1: time: missing"),
])
def test_bad_timeline_lines_name_line_and_field(line: str, message: str) -> None:
    with pytest.raises(TimelineError, match=message):
        parse_switch_timeline([line])


def test_timeline_out_of_order_is_refused() -> None:
    with pytest.raises(TimelineError, match="line 2: time"):
        parse_switch_timeline([TIMELINE[2], TIMELINE[0]])


def test_sim_timeline_and_injection_make_the_switch_document() -> None:
    clock = FakeClock()
    documents: list[SwitchInfo] = []

    async def scenario() -> None:
        source = SimSwitchSource(clock=clock, timeline=parse_switch_timeline(TIMELINE[:1]))
        detector = SwitchDetector(source, clock=clock, on_change=documents.append)
        assert detector.status.mode == "subscribes to switch events"
        first = await detector.step()
        assert first is not None
        data = first.to_data()
        assert [json.loads(text) for text in data["FaultCode"]] == [{  # type: ignore[attr-defined]
            "EventType": 0x08520003, "AssembledFaultCode": "[0x08520003,na,npu,na]",
            "PeerPortDevice": 1, "PeerPortId": 3, "SwitchChipId": 0, "SwitchPortId": 5,
            "Severity": 2, "Assertion": 1, "AlarmRaisedTime": round(clock.wall_now * 1000)}]
        assert data["FaultLevel"] == "Separate"
        assert data["NodeStatus"] == "UnHealthy"
        assert data["UpdateTime"] == int(clock.wall_now)
        assert data["FaultTimeAndLevelMap"] == {"[0x08520003,na,npu,na]_0_5": {
            "fault_time": round(clock.wall_now * 1000), "fault_level": "Separate"}}
        occurred = first.faults[0]
        clock.advance(3)
        source.inject(SwitchFault(occurred.code, occurred.event_type, 1, 3, 0, 5,
                                  Severity.MAJOR, Assertion.RECOVER, clock.wall_now))
        healed = await detector.step()
        assert healed is not None
        assert healed.to_data()["FaultCode"] == []
        assert healed.node_status is NodeStatus.HEALTHY
        assert healed.fault_level is None
        sub_health = parse_switch_timeline(TIMELINE[2:3])[0][1]
        source.inject(sub_health)
        source.inject(SwitchFault("[0x00f1fef5,155913,cpu,na]", 0x00F1FEF5, 0, 0, 2, 1,
                                  Severity.MINOR, Assertion.ONCE, clock.wall_now))
        both = await detector.step()
        assert both is not None
        assert both.fault_level is SwitchLevel.SUB_HEALTH_FAULT
        assert len(both.faults) == 2
        assert detector.apply([]) is not None  # the notification is gone after one document
        assert detector.info.node_status is NodeStatus.SUB_HEALTHY
        assert len(detector.info.faults) == 1

    asyncio.run(scenario())
    assert len(documents) == 4


def test_sim_source_waits_for_its_timeline() -> None:
    async def scenario() -> list[SwitchFault]:
        source = SimSwitchSource(clock=SystemClock(),
                                 timeline=parse_switch_timeline(TIMELINE[2:]))
        return await asyncio.wait_for(source.next_events(), 5) + await asyncio.wait_for(
            source.next_events(), 5)

    assert [fault.assertion for fault in asyncio.run(scenario())] == [Assertion.OCCUR,
                                                                      Assertion.RECOVER]


class FakeNvml:
    """pynvml's API over a table of links: two GPUs, GPU 0's link 0 to GPU 1, its link 1 to an
    NVSwitch; GPU 1's link 1 never trained."""

    NVML_FEATURE_ENABLED = 1
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_NVLINK_MAX_LINKS = 4

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(f"NVML error {value}")
            self.value = value

    def __init__(self) -> None:
        self.init_error: int | None = None
        self.active = {(0, 0): True, (0, 1): True, (1, 0): True, (1, 1): False}
        self.remote = {(0, 0): (0, "0000:1b:00.0"), (0, 1): (2, "0000:c1:00.0"),
                       (1, 0): (0, "00000000:18:00.0")}

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's name
        if self.init_error is not None:
            raise self.NVMLError(self.init_error)

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802 - pynvml's name
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802 - pynvml's name
        return index

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:  # noqa: N802 - pynvml's name
        return types.SimpleNamespace(busId=[b"00000000:18:00.0", b"00000000:1B:00.0"][handle])

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:  # noqa: N802 - pynvml's name
        if (handle, link) not in self.active:
            raise self.NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return int(self.active[(handle, link)])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:  # noqa: N802 - pynvml's name
        return self.remote[(handle, link)][0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> Any:  # noqa: N802 - pynvml's name
        return types.SimpleNamespace(busId=self.remote[(handle, link)][1])


def test_nvlink_down_and_back_through_a_fake_nvml() -> None:
    clock, nvml = FakeClock(), FakeNvml()
    documents: list[SwitchInfo] = []
    source = NvLinkSource(clock=clock, nvml=nvml)
    detector = SwitchDetector(source, clock=clock, on_change=documents.append,
                              settings=SwitchSettings(poll_period=300))
    assert detector.status.mode == "reads the switches in full every 300 s"
    assert asyncio.run(detector.step()) is None
    nvml.active[(0, 0)] = False
    nvml.active[(0, 1)] = False
    clock.advance(300)
    down = asyncio.run(detector.step())
    assert down is not None
    assert [(f.code, f.switch_chip_id, f.switch_port_id, f.peer_port_device, f.peer_port_id)
            for f in down.faults] == [("[0x08520003,na,npu,na]", 0, 0, 1, 1),
                                      ("[0x08520003,na,L2,na]", 0, 1, 2, 0xFFFF)]
    assert down.fault_level is SwitchLevel.SEPARATE
    assert set(down.fault_time_and_level_map) == {"[0x08520003,na,npu,na]_0_0",
                                                  "[0x08520003,na,L2,na]_0_1"}
    nvml.active[(0, 0)] = True
    clock.advance(300)
    partly = asyncio.run(detector.step())
    assert partly is not None
    assert partly.fault_level is SwitchLevel.NOT_HANDLE
    assert partly.node_status is NodeStatus.HEALTHY
    assert len(documents) == 2


def test_nvml_failures_are_shown_and_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, nvml = FakeClock(), FakeNvml()
    nvml.init_error = 9
    detector = SwitchDetector(NvLinkSource(clock=clock, nvml=nvml), clock=clock,
                              on_change=lambda info: None)
    asyncio.run(detector.step())
    assert detector.status.last_error == "NVML did not initialise: NVML error 9"
    nvml.init_error = None
    asyncio.run(detector.step())
    assert detector.status.working
    monkeypatch.setitem(sys.modules, "pynvml", None)
    missing = SwitchDetector(NvLinkSource(clock=clock), clock=clock,
                             on_change=lambda info: None)
    asyncio.run(missing.step())
    assert "install trainguard[nvidia]" in (missing.status.last_error or "")
