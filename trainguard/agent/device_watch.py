"""The host's devices, watched while the job runs (SPEC D1): the device detector's events go to
the controller as they happen, and the host's device document is kept current.

The detector (:mod:`trainguard.detect.devices`) grades each event as the original's device
plugin does, for the document ``mindx-dl-deviceinfo-<node>``; the controller grades the same
events, with the devices' own times, to decide (its history spans hosts and restarts). A report
goes out at once after an event, so that a fault reaches the controller within a second under
subscription, and every :data:`REFRESH` seconds in any case, carrying the codes each device
holds: a report lost, or a controller new since, is made good by the next. Events not yet taken
by the controller are sent again with the next report (at most :data:`HELD_EVENTS` of them, the
newest: the codes held carry the rest). Each event is also recorded as the fault notice the
original records (``device-fault-noticed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from trainguard import clock as clocks
from trainguard.agent import fault_injection
from trainguard.detect.devices import backend as backends
from trainguard.detect.devices import detector as detectors
from trainguard.detect.devices import device_info, fault_notices, naming, sim
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion
from trainguard.job import events
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel, grpc_security

__all__ = ["HELD_EVENTS", "REFRESH", "DeviceWatch", "ReportSink", "to_controllers"]

logger = logging.getLogger(__name__)

REFRESH = 5.0
"""Seconds between reports when nothing happens: the original's document refresh."""
HELD_EVENTS = 1000
OPENING = 0.1
"""Seconds between looks for the backend's devices until it has opened."""

ReportSink = Callable[[pb.DeviceReport], Awaitable[object]]
"""Takes a report to the controller; raises when it could not."""


def to_controllers(endpoints: Sequence[str], security: grpc_security.ClientSecurity, *,
                   timeout: float = REFRESH) -> ReportSink:
    """Reports to whichever of the job's controllers takes them (the leader: a standby does
    not listen), trying the one that took the last first."""
    order = list(endpoints)

    async def send(report: pb.DeviceReport) -> object:
        errors = []
        for endpoint in list(order):
            try:
                ack = await grpc_channel.report_devices(endpoint, report, timeout=timeout,
                                                        security=security)
            except grpc_channel.CallRefusedError as error:
                errors.append(f"{endpoint}: {error}")
                continue
            order.remove(endpoint)
            order.insert(0, endpoint)
            return ack
        raise ConnectionError("; ".join(errors))

    return send


class DeviceWatch:
    def __init__(self, backend: backends.DeviceBackend, *, node: str,
                 engine: device_health.FaultEngine, names: naming.DeviceNaming,
                 send: ReportSink, publish: Callable[[str, dict[str, Any]], None],
                 record: Callable[[events.Event], object], clock: clocks.Clock, job: str,
                 settings: detectors.DetectorSettings | None = None) -> None:
        self._backend = backend
        self._node = node
        self._engine = engine
        self._names = names
        self._send = send
        self._publish = publish
        self._record = record
        self._clock = clock
        self._job = job
        self.detector = detectors.DeviceDetector(backend, engine=engine, on_update=self._updated,
                                                 clock=clock, settings=settings)
        self._events: list[pb.DeviceEvent] = []
        self._changed = asyncio.Event()
        self._sent_document = ""

    @property
    def node(self) -> str:
        return self._node

    @property
    def engine(self) -> device_health.FaultEngine:
        """The grader of the host's devices (the original device plugin's), for the document."""
        return self._engine

    def state(self) -> dict[str, object]:
        """The detector's state, for status."""
        return self.detector.state.to_data()

    def inject(self, device: int, code: str, assertion: Assertion) -> str:
        """A fault event of a simulated device, as its driver would push it.

        Raises:
            fault_injection.InjectionError: the devices are not simulated, or there is no such
                device or code.
        """
        if not isinstance(self._backend, sim.SimBackend):
            raise fault_injection.InjectionError(
                f"the devices here are watched by the {self._backend.name} backend, not "
                f"simulated: a fault cannot be injected into them")
        try:
            event = self._backend.inject(device, code, assertion)
        except sim.SimFaultError as error:
            raise fault_injection.InjectionError(str(error)) from error
        return f"{self._node}/{event.device}: {event.code} {event.assertion}"

    async def run(self) -> None:
        """Watch and report until cancelled."""
        watching = asyncio.create_task(self.detector.run(), name="trainguard-device-detector")
        try:
            while True:
                # Until the backend has opened, look often: its devices go out at once.
                wait = REFRESH if self.detector.inventory is not None else OPENING
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait)
                self._changed.clear()
                await self._report()
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)

    def _updated(self, update: detectors.DeviceUpdate) -> None:
        event = update.event
        inventory = self.detector.inventory
        if event is not None and inventory is not None:
            physical = {device.name: device.physical_id for device in inventory.devices}
            self._events.append(pb.DeviceEvent(device=physical[event.device], code=event.code,
                                               assertion=str(event.assertion), time=event.time))
            del self._events[:-HELD_EVENTS]
            notice = fault_notices.fault_notice(
                event, table=self._engine.table, node=self._node,
                device=self._names.public_name(physical[event.device]),
                instance=f"trainguard-agent-{self._node}")
            self._record(events.DeviceFaultNoticed(
                job=self._job, node=self._node, device=notice.device, code=notice.code,
                reason=str(notice.reason), level=str(notice.action), notice=notice.to_data()))
        self._changed.set()

    async def _report(self) -> None:
        inventory = self.detector.inventory
        if inventory is None:
            return
        healths = self.detector.healths
        document = device_info.device_info(node=self._node, inventory=inventory,
                                           healths=healths, naming=self._names,
                                           now=self._clock.wall()).to_data()
        text = json.dumps(document, sort_keys=True)
        report = pb.DeviceReport(node=self._node, events=self._events)
        for device in inventory.devices:
            health = healths.get(device.name)
            report.devices.add(device=device.physical_id, codes=[
                code.spelling for code in (health.codes if health is not None else ())])
        if text != self._sent_document:
            report.device_info = text
            self._publish(device_info.document_name(self._node), document)
        try:
            await self._send(report)
        except Exception as error:  # the controller away: the next report carries it all
            logger.warning("the device report of %s was not taken: %s", self._node, error)
            return
        self._events = self._events[len(report.events):]
        if report.device_info:
            self._sent_document = text
