"""Every host's devices as its reports say (``Control.ReportDevices``: on each change and every
5 s), graded as they change, and the host's documents kept.

A report carries the events since the last (each with the device's own time, so that how long
a fault lasted is the device's measure, not the network's) and each device's codes now. Only a
change does work: the events are graded in order, then any difference between the codes held
and the codes the events left is graded at the report's time (a report was lost, or this
controller is new): a code that appears is an ``occur``, one that went a ``recover``. Each
grade goes through the job on that device, if one runs there, so that an isolating level
moves its rank. A host's devices and codes are kept in the store as ``nodes/<node>``, and the
documents its agent wrote (device info, node info, switch info) as ``documents/<name>``, all
written as they change (trailing writes: a report never waits for the store). A report that
changes nothing costs a comparison per device, so that a controller takes tens of thousands of
hosts' reports on one core.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping

from trainguard import clock as clocks
from trainguard import names
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level
from trainguard.proto import control_pb2 as pb
from trainguard.store import trailing

__all__ = ["DEVICE_INFO", "DOCUMENTS", "NODE_INFO", "PREFIX", "SWITCH_INFO", "DeviceReports",
           "Grader"]

PREFIX = "nodes/"
DOCUMENTS = "documents/"
DEVICE_INFO = "mindx-dl-deviceinfo-"  # the original's ConfigMap names, with the node's after
NODE_INFO = "mindx-dl-nodeinfo-"
SWITCH_INFO = "mindx-dl-switchinfo-"

Grader = Callable[[DeviceFaultEvent], Awaitable[device_health.DeviceHealth]]
"""Grades one event of a host's device (and acts on it); its device's health."""


class DeviceReports:
    def __init__(self, grade: Grader, writer: trailing.TrailingWriter, *,
                 clock: clocks.Clock) -> None:
        self._grade = grade
        self._writer = writer
        self._clock = clock
        self.on_documents: Callable[[str, Mapping[str, str]], None] | None = None
        """Told a host's documents that changed: ``(node, {name prefix: text})``."""
        self._held: dict[str, dict[int, frozenset[str]]] = {}
        self._devices: dict[str, frozenset[int]] = {}
        self._documents: dict[str, str] = {}

    def held(self, node: str) -> dict[int, frozenset[str]]:
        """The codes each device of ``node`` held at its last report."""
        return dict(self._held.get(node, {}))

    def devices(self, node: str) -> frozenset[int] | None:
        """The devices ``node``'s last report listed (None: no report from it)."""
        return self._devices.get(node)

    def nodes(self) -> list[str]:
        """Every host that reported its devices, by name."""
        return sorted(self._devices)

    async def take(self, report: pb.DeviceReport) -> pb.DeviceReportAck:
        """Raises:
            names.InvalidNameError: the node's name is no node name.
            ValueError: an event's assertion is none of occur, recover, once.
        """
        node = names.node_name(report.node, what="node")
        events = [(event.device, DeviceFaultEvent(
            f"{node}/device-{event.device}", event.code, _assertion(event, number), event.time,
            level=_level(event, number))) for number, event in enumerate(report.events)]
        held = self._held.setdefault(node, {})
        if report.devices or node not in self._devices:
            self._devices[node] = frozenset(device.device for device in report.devices)
        graded: dict[int, device_health.DeviceHealth] = {}
        for index, event in events:
            graded[index] = await self._grade(event)
            codes = held.get(index, frozenset())
            if event.assertion is Assertion.OCCUR:
                held[index] = codes | {event.code}
            elif event.assertion is Assertion.RECOVER:
                held[index] = codes - {event.code}
        now = None
        for device in report.devices:
            codes = frozenset(device.codes)
            before = held.get(device.device, frozenset())
            if codes == before:
                continue
            held[device.device] = codes
            now = now if now is not None else self._clock.wall()
            name = f"{node}/device-{device.device}"
            for code, assertion in (*((c, Assertion.OCCUR) for c in sorted(codes - before)),
                                    *((c, Assertion.RECOVER) for c in sorted(before - codes))):
                graded[device.device] = await self._grade(
                    DeviceFaultEvent(name, code, assertion, now))
        ack = pb.DeviceReportAck()
        for index, health in sorted(graded.items()):
            ack.changed.add(device=index, level=str(health.level))
        if graded:
            self._writer.set(PREFIX + node, json.dumps(
                {str(device): sorted(codes) for device, codes in sorted(held.items())
                 if codes}).encode())
        changed = {}
        for name, document in ((DEVICE_INFO, report.device_info),
                               (NODE_INFO, report.node_info), (SWITCH_INFO, report.switch_info)):
            if document and self._documents.get(name + node) != document:
                self._documents[name + node] = changed[name] = document
                self._writer.set(DOCUMENTS + name + node, document.encode())
        if changed and self.on_documents is not None:
            self.on_documents(node, changed)
        return ack

    def documents(self) -> dict[str, str]:
        """The hosts' documents by name (``mindx-dl-deviceinfo-<node>``, ...), as last reported."""
        return dict(self._documents)


def _assertion(event: pb.DeviceEvent, number: int) -> Assertion:
    try:
        return Assertion(event.assertion)
    except ValueError:
        raise ValueError(f"events[{number}].assertion is {event.assertion!r}, expected one of "
                         f"{', '.join(member.value for member in Assertion)}") from None


def _level(event: pb.DeviceEvent, number: int) -> Level | None:
    if not event.level:
        return None
    try:
        return Level(event.level)
    except ValueError:
        raise ValueError(f"events[{number}].level is {event.level!r}, not a fault level"
                         ) from None
