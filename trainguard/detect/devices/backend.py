"""What a device backend is: the one small interface between a driver and the detector (SPEC D1).

A backend knows its host's devices (:class:`Inventory`: each device's physical and logic id, and
the host's place in a super pod) and reports their faults as
:class:`~trainguard.faults.device.device_events.DeviceFaultEvent` named ``device-<physical
id>``, with the wall time they were seen, in one or both of two ways:

* **subscription**: the driver pushes events; the backend calls the detector's sink from a
  thread of its own as they come (:meth:`DeviceBackend.subscribe`);
* **polling**: the detector asks, at a fixed period, what is present now
  (:meth:`DeviceBackend.poll`, a :class:`Reading`); :class:`Presence` turns the difference
  from the last reading into events: a new code *occurs*, a code gone *recovers*. The detector
  owns the presence, so a backend that restarts does not raise its faults a second time.

A backend that cannot work (its library or tool missing, its driver failing) raises
:class:`BackendError`, whose message starts with the backend's name
(``"nvml: libnvidia-ml.so.1 not found"``); so does a subscription that dies, through the
failure sink. Backends are independent of each other and import their drivers only when opened.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping
from typing import ClassVar

from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.device.fault_codes import Severity

__all__ = [
    "NOT_SET",
    "UNKNOWN",
    "BackendError",
    "DeviceBackend",
    "DeviceIdentity",
    "EventSink",
    "FailureSink",
    "Inventory",
    "Presence",
    "Reading",
    "device_name",
    "super_pod_value",
]

NOT_SET = -1
"""SuperPodID or ServerIndex when the driver reports 0xffffffff (the host is in no super pod)."""
UNKNOWN = -2
"""SuperPodID or ServerIndex when it cannot be queried (unsupported, or the driver failed)."""
_DRIVER_NOT_SET = 0xFFFFFFFF


def super_pod_value(raw: int | None) -> int:
    """The document's value for what the driver said: ``None`` (no answer) is -2, 0xffffffff
    is -1, anything else itself."""
    if raw is None:
        return UNKNOWN
    return NOT_SET if raw == _DRIVER_NOT_SET else raw


def device_name(physical_id: int) -> str:
    """The name events carry: ``device-<physical id>`` (the agent prefixes ``<node>/``)."""
    return f"device-{physical_id}"


class BackendError(RuntimeError):
    """A backend cannot load, or stopped working; the message says which and why."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"{backend}: {reason}")
        self.backend = backend
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class DeviceIdentity:
    physical_id: int  # fixed by the hardware: /dev/davinci<N>, /dev/nvidia<N>
    logic_id: int  # the driver's enumeration index

    @property
    def name(self) -> str:
        return device_name(self.physical_id)


@dataclasses.dataclass(frozen=True)
class Inventory:
    """A host's devices, by physical id, and its place in a super pod."""

    devices: tuple[DeviceIdentity, ...]
    super_pod_id: int = UNKNOWN
    server_index: int = UNKNOWN

    def __post_init__(self) -> None:
        physical = [device.physical_id for device in self.devices]
        if len(set(physical)) != len(physical):
            raise ValueError(f"devices: physical ids repeat: {physical}")
        if physical != sorted(physical):
            object.__setattr__(self, "devices",
                               tuple(sorted(self.devices, key=lambda d: d.physical_id)))
        for field in ("super_pod_id", "server_index"):
            if getattr(self, field) < UNKNOWN:
                raise ValueError(f"{field}: {getattr(self, field)} is below {UNKNOWN}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(device.name for device in self.devices)

    def device(self, name: str) -> DeviceIdentity:
        """The device an event names (``device-3``).

        Raises:
            KeyError: no device of this host has that name.
        """
        for device in self.devices:
            if device.name == name:
                return device
        raise KeyError(f"{name!r} is not a device of this host ({', '.join(self.names)})")


@dataclasses.dataclass(frozen=True)
class Reading:
    """What one poll found: the codes present on each device now (a device left out has
    none), and the time, wall seconds."""

    time: float
    present: Mapping[str, frozenset[str]]
    severity: Mapping[str, Severity] = dataclasses.field(default_factory=dict)
    """The severity a device reports with its codes (Ascend's health status); it decides the
    level of a code the table does not know."""
    notices: tuple[DeviceFaultEvent, ...] = ()
    """One-off events seen since the last poll (``once``): they have no presence to compare."""


class Presence:
    """The codes the last reading held, turned into occur and recover events by the next."""

    def __init__(self) -> None:
        self._held: dict[str, frozenset[str]] = {}

    def changes(self, reading: Reading) -> list[DeviceFaultEvent]:
        """The events from the last reading to this one: recoveries first, in device order."""
        events: list[DeviceFaultEvent] = []
        for device in sorted(self._held.keys() | reading.present.keys()):
            before = self._held.get(device, frozenset())
            now = reading.present.get(device, frozenset())
            severity = reading.severity.get(device)
            events.extend(DeviceFaultEvent(device, code, Assertion.RECOVER, reading.time)
                          for code in sorted(before - now))
            events.extend(DeviceFaultEvent(device, code, Assertion.OCCUR, reading.time, severity)
                          for code in sorted(now - before))
        self._held = {device: codes for device, codes in reading.present.items() if codes}
        return [*events, *reading.notices]


EventSink = Callable[[DeviceFaultEvent], None]
"""Takes an event pushed by a driver; thread-safe, never blocks."""
FailureSink = Callable[[BackendError], None]
"""Told, once, that a subscription stopped working; thread-safe, never blocks."""


class DeviceBackend(abc.ABC):
    """One kind of device driver. Methods other than the sinks are called from one thread at a
    time; :meth:`open` may be called again after :meth:`close`, to restart a failed backend."""

    name: ClassVar[str]
    polls_while_subscribed: ClassVar[bool] = False
    """Whether part of what this backend sees is only ever polled, even while the driver
    pushes events (NVML's memory and link state)."""

    @abc.abstractmethod
    def open(self) -> Inventory:
        """Load the driver and list the devices.

        Raises:
            BackendError: the backend cannot work on this host.
        """

    @abc.abstractmethod
    def subscribe(self, events: EventSink, failed: FailureSink) -> bool:
        """Have the driver push events to ``events`` from now on, until :meth:`close`.

        Returns:
            False when this backend, or this host's driver, cannot push events: the detector
            polls instead.

        Raises:
            BackendError: the driver failed while subscribing.
        """

    @abc.abstractmethod
    def poll(self) -> Reading:
        """What the devices hold now.

        Raises:
            BackendError: the driver failed; the detector restarts the backend.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Stop any subscription and release the driver; safe to call twice."""
