"""The host's devices, watched while the job runs (SPEC D1, D4-D6): the device detector's
events go to the controller as they happen, and the host's documents are kept current.

The other detectors of the host join here: the network plane's link-down events are graded
with the devices' own (they are faults of the devices whose traffic the link carries), the node
detector's and the switch detector's documents go with the next report, and every detector's
state is published as the document ``detectors-<node>`` for ``trainguard status``.

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
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from trainguard import clock as clocks
from trainguard.agent import fault_injection
from trainguard.detect import detector_status
from trainguard.detect.devices import backend as backends
from trainguard.detect.devices import detector as detectors
from trainguard.detect.devices import device_info, fault_notices, naming, sim
from trainguard.faults import go_json
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.node.node_faults import NodeInfo
from trainguard.faults.node.switch_faults import SwitchInfo
from trainguard.job import events
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel, grpc_security

__all__ = ["DETECTORS", "HELD_EVENTS", "REFRESH", "Detector", "DeviceWatch", "ReportSink",
           "to_controllers"]

logger = logging.getLogger(__name__)

REFRESH = 5.0
"""Seconds between reports when nothing happens: the original's document refresh."""
HELD_EVENTS = 1000
DETECTORS = "detectors-"
"""The prefix of the document of each detector's state, the node's name after it."""
OPENING = 0.1
"""Seconds between looks for the backend's devices until it has opened."""

ReportSink = Callable[[pb.DeviceReport], Awaitable[object]]
"""Takes a report to the controller; raises when it could not."""


@dataclasses.dataclass(frozen=True)
class Detector:
    """Another detector of the host: how it runs, and its state for status."""

    name: str
    run: Callable[[], Coroutine[Any, Any, None]]
    status: Callable[[], detector_status.DetectorStatus]


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
        self._others: list[Detector] = []
        self._node_info = self._switch_info = ""  # the documents not yet sent
        self._states = ""

    @property
    def engine(self) -> device_health.FaultEngine:
        """The grader of the host's devices (the original device plugin's), for the document."""
        return self._engine

    def states(self) -> dict[str, object]:
        """Each detector's state by its name (devices, network, ...), for status."""
        return {"devices": self.detector.state.to_data(),
                **{other.name: dataclasses.asdict(other.status()) for other in self._others}}

    def add(self, detector: Detector) -> None:
        """Run ``detector`` beside the devices' (before :meth:`run`)."""
        self._others.append(detector)

    def network_events(self, events: list[DeviceFaultEvent]) -> None:
        """The network plane's events, faults of the devices the link serves."""
        for event in events:
            self.detector.feed(event)

    def node_document(self, name: str, info: NodeInfo) -> None:
        """The node detector's document, published and sent with the next report."""
        data = info.to_data()
        self._publish(name, data)
        self._node_info = json.dumps(data)
        self._changed.set()

    def switch_document(self, info: SwitchInfo) -> None:
        """The switch detector's document (``SwitchInfoCfg``), sent with the next report."""
        self._switch_info = go_json.dumps(info.to_data())
        self._changed.set()

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
        watching = [asyncio.create_task(self.detector.run(), name="trainguard-device-detector"),
                    *(asyncio.create_task(other.run(), name=f"trainguard-{other.name}-detector")
                      for other in self._others)]
        try:
            while True:
                # Until the backend has opened, look often: its devices go out at once.
                wait = REFRESH if self.detector.inventory is not None else OPENING
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait)
                self._changed.clear()
                await self._report()
        finally:
            for task in watching:
                task.cancel()
            await asyncio.gather(*watching, return_exceptions=True)

    def _updated(self, update: detectors.DeviceUpdate) -> None:
        event = update.event
        inventory = self.detector.inventory
        physical = ({device.name: device.physical_id for device in inventory.devices}
                    if inventory is not None else {})
        if event is not None and event.device not in physical:
            logger.warning("a fault of %s, which is not a device of this host, is left out",
                           event.device)
        elif event is not None:
            self._events.append(pb.DeviceEvent(
                device=physical[event.device], code=event.code, assertion=str(event.assertion),
                time=event.time, level=str(event.level or "")))
            del self._events[:-HELD_EVENTS]
            notice = fault_notices.fault_notice(
                event, table=self._engine.table, node=self._node,
                device=self._names.public_name(physical[event.device]),
                instance=f"trainguard-agent-{self._node}")
            self._record(events.DeviceFaultNoticed(
                job=self._job, node=self._node, device=notice.device, code=notice.code,
                reason=str(notice.reason), level=str(notice.action), notice=notice.to_data()))
        self._changed.set()

    def _publish_states(self) -> None:
        states = self.states()
        text = json.dumps(states, sort_keys=True)
        if text != self._states:
            self._states = text
            self._publish(DETECTORS + self._node, states)

    async def _report(self) -> None:
        self._publish_states()
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
        report.node_info, report.switch_info = self._node_info, self._switch_info
        try:
            await self._send(report)
        except Exception as error:  # the controller away: the next report carries it all
            logger.warning("the device report of %s was not taken: %s", self._node, error)
            return
        self._events = self._events[len(report.events):]
        if report.device_info:
            self._sent_document = text
        if self._node_info == report.node_info:
            self._node_info = ""
        if self._switch_info == report.switch_info:
            self._switch_info = ""
