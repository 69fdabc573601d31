"""Hosts' device reports (``Control.ReportDevices``) through a real controller: only a change is
graded, a code held twice in a day separates its device, and the hosts' devices are kept in
the store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.controller.test_controller_job_controller import FakeClock
from trainguard.controller import service
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel, grpc_security
from trainguard.store import sqlite_kv

CLIENT = grpc_security.ClientSecurity(insecure=True)
UCE = "80E01801"  # a memory error: held twice in 24 h -> ManuallySeparateNPU


def _report(node: str, codes: dict[int, list[str]]) -> pb.DeviceReport:
    report = pb.DeviceReport(node=node)
    for device in range(16):
        report.devices.add(device=device, codes=codes.get(device, []))
    return report


def test_changes_are_graded_and_the_hosts_devices_kept_in_the_store(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[list[tuple[int, str]]], str]:
        controller = service.ControllerService(
            service.ControllerSettings(run_root=tmp_path / "controller",
                                       security=grpc_security.ServerSecurity(insecure=True)),
            clock=FakeClock())
        port = await controller.start("127.0.0.1:0")
        address = f"127.0.0.1:{port}"
        answers = []
        try:
            for codes in ({}, {3: [UCE]}, {3: [UCE]}, {}, {3: [UCE]}):
                ack = await grpc_channel.report_devices(address, _report("host-a", codes),
                                                        timeout=10, security=CLIENT)
                answers.append([(grade.device, grade.level) for grade in ack.changed])
            with pytest.raises(grpc_channel.CallRefusedError) as refused:
                await grpc_channel.report_devices(address, _report("../etc", {}), timeout=10,
                                                  security=CLIENT)
        finally:
            await controller.stop()
        return answers, str(refused.value)

    answers, refusal = asyncio.run(scenario())
    assert answers[0] == answers[2] == [], "a report that changes nothing grades nothing"
    assert answers[1][0][0] == 3
    assert answers[4] == [(3, "ManuallySeparateNPU")], "the second memory error separates it"
    assert "INVALID_ARGUMENT" in refusal

    async def stored() -> dict[str, list[str]]:
        store = sqlite_kv.SqliteKeyValueStore.open(tmp_path / "controller" / "controller.db")
        try:
            entry = await store.get("nodes/host-a")
            assert entry is not None
            return dict(json.loads(entry.value))
        finally:
            await store.close()

    assert asyncio.run(stored()) == {"3": [UCE]}


def test_events_are_graded_at_the_devices_times_and_the_documents_kept(tmp_path: Path) -> None:
    """An event is graded at the device's time, not the report's (a link down 25 s old is
    NotHandleFault when it occurred; the level watch raises it); the host's device document is
    kept in the store under its original name; a bad assertion is refused, naming it."""
    clock = FakeClock()

    async def scenario() -> tuple[list[tuple[int, str]], str]:
        controller = service.ControllerService(
            service.ControllerSettings(run_root=tmp_path / "controller",
                                       security=grpc_security.ServerSecurity(insecure=True)),
            clock=clock)
        port = await controller.start("127.0.0.1:0")
        try:
            report = _report("host-b", {2: ["81078603"]})
            report.events.add(device=2, code="81078603", assertion="occur",
                              time=clock.wall() - 25.0)
            report.device_info = '{"DeviceInfoCfg": "{}"}'
            ack = await grpc_channel.report_devices(f"127.0.0.1:{port}", report, timeout=10,
                                                    security=CLIENT)
            bad = _report("host-b", {})
            bad.events.add(device=2, code="81078603", assertion="gone", time=clock.wall())
            with pytest.raises(grpc_channel.CallRefusedError) as refused:
                await grpc_channel.report_devices(f"127.0.0.1:{port}", bad, timeout=10,
                                                  security=CLIENT)
        finally:
            await controller.stop()
        return [(grade.device, grade.level) for grade in ack.changed], str(refused.value)

    graded, refusal = asyncio.run(scenario())
    assert graded == [(2, "NotHandleFault")], "graded at the event's time: not yet swept"
    assert "events[0].assertion is 'gone'" in refusal

    async def stored() -> bytes | None:
        store = sqlite_kv.SqliteKeyValueStore.open(tmp_path / "controller" / "controller.db")
        try:
            entry = await store.get("documents/mindx-dl-deviceinfo-host-b")
            return entry.value if entry is not None else None
        finally:
            await store.close()

    assert asyncio.run(stored()) == b'{"DeviceInfoCfg": "{}"}'


def test_an_operator_separates_and_releases_a_reported_device(tmp_path: Path) -> None:
    """Control.SeparateDevice / ReleaseDevice through a real controller: a device of a host
    that reported is separated, shown so in Control.Status, released once; the refusals name
    what is wrong."""

    async def scenario() -> tuple[list[tuple[bool, str]], list[tuple[int, str, bool]]]:
        controller = service.ControllerService(
            service.ControllerSettings(run_root=tmp_path / "controller",
                                       security=grpc_security.ServerSecurity(insecure=True)),
            clock=FakeClock())
        port = await controller.start("127.0.0.1:0")
        address = f"127.0.0.1:{port}"
        answers = []

        async def ask(node: str, device: int, *, separate: bool) -> None:
            answer = await grpc_channel.device_request(
                address, pb.DeviceRequest(node=node, device=device, reason="test"),
                separate=separate, timeout=10, security=CLIENT)
            answers.append((answer.ok, answer.text))

        try:
            await grpc_channel.report_devices(address, _report("host-a", {}), timeout=10,
                                              security=CLIENT)
            await ask("host-a", 3, separate=True)
            status = await grpc_channel.cluster_status(address, timeout=10, security=CLIENT)
            await ask("host-a", 3, separate=False)
            await ask("host-a", 3, separate=False)
            await ask("host-b", 0, separate=True)
            await ask("host-a", 16, separate=True)
        finally:
            await controller.stop()
        shown = [(device.device, device.level, device.separated)
                 for node in status.nodes for device in node.devices if device.device == 3]
        return answers, shown

    answers, shown = asyncio.run(scenario())
    assert answers[0] == (True, "host-a/device-3 separated")
    assert shown == [(3, "ManuallySeparateNPU", True)]
    assert answers[1][0] is True
    assert answers[2] == (False, "device 3 of node host-a is not separated")
    assert answers[3][0] is False
    assert "node 'host-b' is unknown" in answers[3][1]
    assert answers[4][0] is False
    assert "device 16 is unknown on node host-a" in answers[4][1]
