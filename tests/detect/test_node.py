from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.detect.detector_fixtures import FakeClock
from trainguard.detect import node_bmc
from trainguard.detect.node import (
    HOST_DISK_CODE,
    HOST_MEMORY_CODE,
    NodeDetector,
    NodeReport,
    NodeSettings,
)
from trainguard.faults.node.node_faults import NodeFaultDevice
from trainguard.faults.node.switch_faults import NodeStatus

RECORDED = Path(__file__).parent / "recorded" / "ipmitool_sel_verbose.txt"


def test_sensor_type_table_covers_the_standard_types() -> None:
    assert len(node_bmc._SENSOR_TYPES) == 0x2D


def test_recorded_sel_gives_the_alarms_not_deasserted() -> None:
    records = node_bmc.parse_sel_verbose(RECORDED.read_text())
    assert [record.record_id for record in records] == ["0001", "0002", "0003", "0004", "0005",
                                                        "0007"]
    assert [record.code for record in records] == [
        "10000002", "08000001", "08000003", "0D000001", "08000003", "01000009"]
    assert node_bmc.current_alarms(records) == (
        NodeFaultDevice("Event Logging Disabled", 0x72, ("10000002",)),
        NodeFaultDevice("Power Supply", 0x51, ("08000001",)),
        NodeFaultDevice("Drive Slot / Bay", 0x80, ("0D000001",)),
        NodeFaultDevice("Temperature", 0x30, ("01000009",)))


def test_sensor_type_spellings_of_other_releases_and_oem_types() -> None:
    block = (" Sensor Type : {}\n Sensor Number : 01\n Event Direction : Assertion Event\n"
             " Event Data : 01ffff\n")
    text = "\n".join(block.format(name) for name in (
        "Drive Slot (Bay)", "Watchdog 2", "Unknown (0xc1)", "Not a sensor type"))
    assert [record.code for record in node_bmc.parse_sel_verbose(text)] == [
        "0D000001", "23000001", "C1000001"]


def test_malformed_record_names_record_and_field() -> None:
    text = (" SEL Record ID : 00af\n Sensor Type : Fan\n Sensor Number : zz\n"
            " Event Direction : Assertion Event\n Event Data : 01\n")
    with pytest.raises(ValueError, match="SEL record 00af: Sensor Number 'zz'"):
        node_bmc.parse_sel_verbose(text)


def _script(tmp_path: Path, body: str) -> str:
    script = tmp_path / "ipmitool"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def test_ipmitool_output_read_through_the_command(tmp_path: Path) -> None:
    bmc = node_bmc.IpmitoolBmc(command=(_script(tmp_path, f"cat {RECORDED}"),))
    assert len(asyncio.run(bmc.read())) == 4


@pytest.mark.parametrize(("body", "timeout", "message"), [
    ("echo 'Could not open device at /dev/ipmi0' >&2; exit 1", 10.0,
     "exited with 1: Could not open device at /dev/ipmi0"),
    ("exec sleep 30", 0.2, "did not finish within 0.2 s"),
])
def test_ipmitool_failures_are_clear(tmp_path: Path, body: str, timeout: float,
                                     message: str) -> None:
    bmc = node_bmc.IpmitoolBmc(command=(_script(tmp_path, body),), timeout=timeout)
    with pytest.raises(node_bmc.BmcUnavailableError, match=message):
        asyncio.run(bmc.read())


def test_no_ipmitool_is_a_clear_error() -> None:
    bmc = node_bmc.IpmitoolBmc(command=("trainguard-no-such-ipmitool", "sel", "list"))
    with pytest.raises(node_bmc.BmcUnavailableError, match=r"not installed.*node health only"):
        asyncio.run(bmc.read())


class FakeBmc:
    def __init__(self) -> None:
        self.alarms: tuple[NodeFaultDevice, ...] = ()
        self.error: str | None = None
        self.reads = 0

    async def read(self) -> tuple[NodeFaultDevice, ...]:
        self.reads += 1
        if self.error is not None:
            raise node_bmc.BmcUnavailableError(self.error)
        return self.alarms


class Host:
    def __init__(self) -> None:
        self.memory = 40.0
        self.disks = {"/": 50.0, "/data": 50.0}


def make(clock: FakeClock, bmc: FakeBmc, host: Host,
         reports: list[NodeReport]) -> NodeDetector:
    return NodeDetector(NodeSettings("node-7", disk_paths=("/", "/data")), clock=clock,
                        on_report=reports.append, bmc=bmc,
                        memory_percent=lambda: host.memory, disk_percent=host.disks.__getitem__)


def test_bmc_changes_are_reported_at_once_and_unchanged_ones_every_30_minutes() -> None:
    clock, bmc, host = FakeClock(), FakeBmc(), Host()
    reports: list[NodeReport] = []
    detector = make(clock, bmc, host, reports)
    first = asyncio.run(detector.poll())
    assert first is not None
    assert first.document_name == "mindx-dl-nodeinfo-node-7"
    assert first.to_data()["NodeInfo"] == {"FaultDevList": [], "NodeStatus": "Healthy"}
    bmc.alarms = (NodeFaultDevice("Power Supply", 0x51, ("08000001", "FFFF0000")),)
    clock.advance(30)
    assert asyncio.run(detector.poll()) is None  # the BMC is read every 60 s
    clock.advance(30)
    report = asyncio.run(detector.poll())
    assert report is not None
    assert report.time == clock.wall_now
    data = report.to_data()
    assert data["NodeInfo"] == {"FaultDevList": [{
        "DeviceType": "Power Supply", "DeviceId": 0x51, "FaultCode": ["08000001"],
        "FaultLevel": "PreSeparateFault"}], "NodeStatus": "PreSeparate"}
    assert data["CheckCode"] == report.info.check_code
    for _ in range(29):
        clock.advance(60)
        assert asyncio.run(detector.poll()) is None
    clock.advance(60)
    assert asyncio.run(detector.poll()) == NodeReport("node-7", report.info, clock.wall_now)
    assert bmc.reads == 32
    assert len(reports) == 3


def test_host_pressure_is_reported_no_sooner_than_5_s_after_the_last_report() -> None:
    clock, bmc, host = FakeClock(), FakeBmc(), Host()
    reports: list[NodeReport] = []
    detector = make(clock, bmc, host, reports)
    asyncio.run(detector.poll())
    host.memory, host.disks["/data"] = 97.0, 95.0
    clock.advance(4.9)
    assert asyncio.run(detector.poll()) is None  # the host is read every 5 s
    clock.advance(0.1)
    report = asyncio.run(detector.poll())
    assert report is not None
    assert [(d.device_type, d.device_id, d.fault_codes) for d in report.info.fault_devices] == [
        ("HostMemory", 0, (HOST_MEMORY_CODE,)), ("HostDisk", 1, (HOST_DISK_CODE,))]
    host.memory = 10.0
    clock.advance(5)
    changed = asyncio.run(detector.poll())
    assert changed is not None
    assert [d.device_type for d in changed.info.fault_devices] == ["HostDisk"]
    bmc.alarms = (NodeFaultDevice("Processor", 3, ("2C000031",)),)
    clock.advance(55)
    separated = asyncio.run(detector.poll())
    assert separated is not None
    assert separated.info.node_status is NodeStatus.UNHEALTHY
    host.disks["/data"] = 10.0  # a change within 5 s of that report waits for the 5 s
    clock.advance(4.5)
    assert asyncio.run(detector.poll()) is None
    clock.advance(0.5)
    assert asyncio.run(detector.poll()) is not None


def test_an_unreadable_bmc_leaves_node_health_only_and_is_retried() -> None:
    clock, bmc, host = FakeClock(), FakeBmc(), Host()
    reports: list[NodeReport] = []
    bmc.alarms = (NodeFaultDevice("Processor", 3, ("2C000031",)),)
    detector = make(clock, bmc, host, reports)
    assert asyncio.run(detector.poll()) is not None
    assert reports[-1].info.node_status is NodeStatus.UNHEALTHY
    bmc.error = "ipmitool is not installed"
    clock.advance(60)
    report = asyncio.run(detector.poll())
    assert report is not None
    assert report.info.node_status is NodeStatus.HEALTHY
    assert detector.status.last_error == "ipmitool is not installed"
    clock.advance(60)
    asyncio.run(detector.poll())
    assert detector.status.retries == 2
    bmc.error = None
    clock.advance(60)
    asyncio.run(detector.poll())
    assert detector.status.working
    assert detector.status.retries == 0


def test_settings_name_the_bad_field() -> None:
    with pytest.raises(ValueError, match="memory_threshold"):
        NodeSettings("node-1", memory_threshold=0)
    with pytest.raises(ValueError, match="node name"):
        NodeSettings("Node_1")

