"""Every host's devices as its last report said (``Control.ReportDevices``, every 5 s), graded
as they change.

A report lists each device with the fault codes it holds now. Only a change does work: a code
that appears is an ``occur`` event, one that went a ``recover``, each graded at once (through
the job on that device, if one runs there, so that an isolating level moves its rank). A host's
devices and codes are kept in the store as ``nodes/<node>``, written as they change (trailing
writes: a report never waits for the store). A report that changes nothing costs a comparison
per device, so that a controller takes tens of thousands of hosts' reports on one core.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from trainguard import clock as clocks
from trainguard import names
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.proto import control_pb2 as pb
from trainguard.store import trailing

__all__ = ["PREFIX", "DeviceReports", "Grader"]

PREFIX = "nodes/"

Grader = Callable[[DeviceFaultEvent], Awaitable[device_health.DeviceHealth]]
"""Grades one event of a host's device (and acts on it); its device's health."""


class DeviceReports:
    def __init__(self, grade: Grader, writer: trailing.TrailingWriter, *,
                 clock: clocks.Clock) -> None:
        self._grade = grade
        self._writer = writer
        self._clock = clock
        self._held: dict[str, dict[int, frozenset[str]]] = {}

    def held(self, node: str) -> dict[int, frozenset[str]]:
        """The codes each device of ``node`` held at its last report."""
        return dict(self._held.get(node, {}))

    async def take(self, report: pb.DeviceReport) -> pb.DeviceReportAck:
        """Raises: names.InvalidNameError: the node's name is no node name."""
        node = names.node_name(report.node, what="node")
        held = self._held.setdefault(node, {})
        ack = pb.DeviceReportAck()
        now = None
        for device in report.devices:
            codes = frozenset(device.codes)
            before = held.get(device.device, frozenset())
            if codes == before:
                continue
            held[device.device] = codes
            now = now if now is not None else self._clock.wall()
            name = f"{node}/device-{device.device}"
            health = None
            for code, assertion in (*((c, Assertion.OCCUR) for c in sorted(codes - before)),
                                    *((c, Assertion.RECOVER) for c in sorted(before - codes))):
                health = await self._grade(DeviceFaultEvent(name, code, assertion, now))
            assert health is not None
            ack.changed.add(device=device.device, level=str(health.level))
        if ack.changed:
            self._writer.set(PREFIX + node, json.dumps(
                {str(device): sorted(codes) for device, codes in sorted(held.items())
                 if codes}).encode())
        return ack
