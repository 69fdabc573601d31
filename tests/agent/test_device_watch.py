"""The agent's watch over its host's devices: an event reaches the controller at once with the
device's own time and physical id, the device document follows the levels, a report the
controller did not take is carried by the next, and only simulated devices take injections."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from trainguard import clock as clocks
from trainguard.agent import device_watch, fault_injection
from trainguard.detect.devices import backend, naming, sim
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion
from trainguard.job import events
from trainguard.proto import control_pb2 as pb

TIMEOUT = 10.0
SEPARATE = "80E3A201"  # SeparateNPU in faultCode.json


class _Controller:
    def __init__(self) -> None:
        self.reports: list[pb.DeviceReport] = []
        self.refuse = False
        self.arrived = asyncio.Event()

    async def take(self, report: pb.DeviceReport) -> object:
        if self.refuse:
            raise ConnectionError("the controller is away")
        self.reports.append(report)
        self.arrived.set()
        return pb.DeviceReportAck()


def _watch(controller: _Controller
           ) -> tuple[device_watch.DeviceWatch, sim.SimBackend, dict[str, Any], list[events.Event]]:
    clock = clocks.SystemClock()
    simulated = sim.SimBackend(devices=3, clock=clock)
    published: dict[str, Any] = {}
    recorded: list[events.Event] = []
    watch = device_watch.DeviceWatch(
        simulated, node="host-a", engine=device_health.FaultEngine(),
        names=naming.default_naming("sim"), send=controller.take,
        publish=published.__setitem__, record=recorded.append, clock=clock, job="job")
    return watch, simulated, published, recorded


async def _next(controller: _Controller) -> pb.DeviceReport:
    await asyncio.wait_for(controller.arrived.wait(), TIMEOUT)
    controller.arrived.clear()
    return controller.reports[-1]


def test_an_injected_fault_is_reported_at_once_and_the_document_follows() -> None:
    async def scenario() -> None:
        controller = _Controller()
        watch, _, published, recorded = _watch(controller)
        task = asyncio.create_task(watch.run())
        try:
            first = await _next(controller)  # the backend opened: the devices, no events
            assert [d.device for d in first.devices] == [0, 1, 2]
            assert not first.events
            assert watch.inject(1, SEPARATE, Assertion.OCCUR) == \
                f"host-a/device-1: {SEPARATE} occur"
            report = await _next(controller)
            (event,) = report.events
            assert (event.device, event.code, event.assertion) == (1, SEPARATE, "occur")
            assert [list(d.codes) for d in report.devices] == [[], [SEPARATE], []]
            document = json.loads(report.device_info)
            assert published["mindx-dl-deviceinfo-host-a"] == document
            listed = json.loads(document["DeviceInfoCfg"])["DeviceInfo"]["DeviceList"]
            assert listed["huawei.com/Ascend910-Unhealthy"] == "Ascend910-1"
            assert listed["huawei.com/Ascend910"] == "Ascend910-0,Ascend910-2"
            (notice,) = [e for e in recorded if isinstance(e, events.DeviceFaultNoticed)]
            assert (notice.device, notice.reason, notice.level) == (
                "Ascend910-1", "Occur", "SeparateNPU")
            assert watch.states() == {"devices": {
                "backend": "sim", "status": "running", "mode": "subscription", "devices": 3,
                "last_error": "", "retries": 0, "retry_in": None}}
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def test_events_the_controller_did_not_take_go_with_the_next_report() -> None:
    async def scenario() -> None:
        controller = _Controller()
        watch, _, _, _ = _watch(controller)
        task = asyncio.create_task(watch.run())
        try:
            await _next(controller)
            controller.refuse = True
            watch.inject(0, SEPARATE, Assertion.OCCUR)
            await asyncio.sleep(0.2)
            controller.refuse = False
            watch.inject(0, SEPARATE, Assertion.RECOVER)
            report = await _next(controller)
            assert [(e.device, e.assertion) for e in report.events] == [
                (0, "occur"), (0, "recover")]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


class _NotSim(backend.DeviceBackend):
    name = "nvml"

    def open(self) -> backend.Inventory:
        raise backend.BackendError(self.name, "not here")

    def subscribe(self, events: backend.EventSink, failed: backend.FailureSink) -> bool:
        return False

    def poll(self) -> backend.Reading:
        raise backend.BackendError(self.name, "not here")

    def close(self) -> None:
        pass


def test_only_simulated_devices_take_an_injection_and_a_bad_one_says_why() -> None:
    watch, _, _, _ = _watch(_Controller())
    with pytest.raises(fault_injection.InjectionError, match="not a device of this host"):
        watch.inject(7, SEPARATE, Assertion.OCCUR)
    with pytest.raises(fault_injection.InjectionError, match="not in the fault code table"):
        watch.inject(0, "NOPE", Assertion.OCCUR)
    other = device_watch.DeviceWatch(
        _NotSim(), node="host-a", engine=device_health.FaultEngine(),
        names=naming.default_naming("nvml"), send=_Controller().take, publish=lambda n, d: None,
        record=lambda e: None, clock=clocks.SystemClock(), job="job")
    with pytest.raises(fault_injection.InjectionError, match="nvml backend, not simulated"):
        other.inject(0, SEPARATE, Assertion.OCCUR)
