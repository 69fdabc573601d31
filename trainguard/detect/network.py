"""Parameter-plane network faults of the training interfaces (SPEC D4).

Each configured training interface serves some devices. The detector probes the interface's
gateway every ``probe_period`` seconds (2.5 s, the original's) and reads its link state every
``link_period`` seconds; an interface is faulty while its link is down or its last probe failed.
It reports that as the original's device plugin does, as the parameter-plane link-down code
``81078603`` on each device the interface serves: ``occur`` when the interface becomes faulty,
``recover`` when it is healthy again. The fault engine's FaultDuration rule for that code (20 s
by default) then keeps a short outage at NotHandleFault and raises a longer one to its
configured level, marking the devices' network unhealthy (CardNetworkUnhealthy).

The detector only says what changed; it keeps no durations (the engine does) and reads no
clock but the injected one.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

from trainguard.clock import Clock
from trainguard.detect import network_probe, periodic
from trainguard.detect.detector_status import DetectorStatus, StatusRecorder
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent

__all__ = ["LINK_DOWN_CODE", "InterfaceState", "NetworkDetector", "NetworkSettings",
           "TrainingInterface", "device_name"]

LINK_DOWN_CODE = "81078603"
"""The parameter-plane link-down code (RoCE link down in the original)."""


def device_name(device_id: int) -> str:
    """The name a device's fault events carry: ``device-<id>``."""
    return f"device-{device_id}"


@dataclasses.dataclass(frozen=True)
class TrainingInterface:
    name: str
    """The interface, as ``ip link`` names it."""
    device_ids: tuple[int, ...]
    """The physical ids of the devices whose traffic it carries (at least one)."""
    gateway: str | None = None
    """The address to probe; None: the interface's gateway in ``/proc/net/route``."""

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or len(self.name) > 15:
            raise ValueError(f"training interface name {self.name!r} is not an interface name "
                             "(1 to 15 characters, no '/')")
        if not self.device_ids:
            raise ValueError(f"training interface {self.name}: device_ids is empty; it must "
                             "name the devices the interface serves")
        if any(device < 0 for device in self.device_ids):
            raise ValueError(f"training interface {self.name}: device_ids {self.device_ids} "
                             "must be >= 0")


@dataclasses.dataclass(frozen=True)
class NetworkSettings:
    probe_period: float = 2.5
    """Seconds between two probes of a gateway (> 0); 2.5 s as the original's."""
    probe_timeout: float = 1.0
    """Seconds a probe waits for the reply (> 0, <= probe_period). 1 s: a gateway on the same
    link answers within milliseconds, even loaded."""
    link_period: float = 0.2
    """Seconds between two reads of the link state (> 0); a link change is seen this fast."""

    def __post_init__(self) -> None:
        for name in ("probe_period", "probe_timeout", "link_period"):
            if not getattr(self, name) > 0:
                raise ValueError(f"network {name} must be > 0 seconds, got {getattr(self, name)}")
        if self.probe_timeout > self.probe_period:
            raise ValueError(f"network probe_timeout ({self.probe_timeout} s) must be <= "
                             f"probe_period ({self.probe_period} s)")


@dataclasses.dataclass(frozen=True)
class InterfaceState:
    """What was last seen of one interface; None: not seen yet."""

    interface: str
    link_up: bool | None
    probe_ok: bool | None
    gateway: str | None
    last_error: str | None  # why the last probe failed or could not run

    @property
    def faulty(self) -> bool:
        return self.link_up is False or self.probe_ok is False


class Prober(Protocol):
    def __call__(self, interface: str, gateway: str, *, timeout: float) -> Awaitable[None]: ...


class NetworkDetector:
    """Watches the training interfaces; ``on_events`` gets each change as fault events."""

    def __init__(self, interfaces: Sequence[TrainingInterface], *, clock: Clock,
                 on_events: Callable[[list[DeviceFaultEvent]], None],
                 settings: NetworkSettings | None = None, prober: Prober | None = None,
                 link_up: Callable[[str], bool] = network_probe.link_up,
                 route_table: Callable[[], str] = lambda: Path("/proc/net/route").read_text()
                 ) -> None:
        names = [interface.name for interface in interfaces]
        if len(set(names)) != len(names):
            raise ValueError(f"training interfaces {names}: an interface is listed twice")
        self._interfaces = tuple(interfaces)
        self._settings = settings or NetworkSettings()
        self._clock = clock
        self._on_events = on_events
        self._prober: Prober = prober or network_probe.IcmpPinger()
        self._link_up = link_up
        self._route_table = route_table
        self._states = {interface.name: InterfaceState(interface.name, None, None,
                                                       interface.gateway, None)
                        for interface in interfaces}
        self._recorder = StatusRecorder(
            "network", clock=clock,
            mode=f"probes gateways every {self._settings.probe_period:g} s; polls "
                 f"/sys/class/net every {self._settings.link_period:g} s")

    @property
    def status(self) -> DetectorStatus:
        return self._recorder.status

    def states(self) -> list[InterfaceState]:
        return [self._states[interface.name] for interface in self._interfaces]

    def check_links(self) -> list[DeviceFaultEvent]:
        """Read every link state; the events of the interfaces whose faultiness changed."""
        events: list[DeviceFaultEvent] = []
        for interface in self._interfaces:
            try:
                up = self._link_up(interface.name)
            except OSError as error:
                self._recorder.failed(f"link state of {interface.name}: {error}")
                up = False
            events += self._update(interface, link_up=up)
        self._emit(events)
        return events

    async def probe(self) -> list[DeviceFaultEvent]:
        """Probe every gateway once, concurrently; the events of the interfaces whose
        faultiness changed."""
        results = await asyncio.gather(*(self._probe_one(interface)
                                          for interface in self._interfaces))
        events = [event for result in results for event in result]
        self._emit(events)
        return events

    async def run(self) -> None:
        """Watch until cancelled."""
        async def links() -> None:
            self.check_links()

        await asyncio.gather(
            periodic.every(self._settings.link_period, links, clock=self._clock),
            periodic.every(self._settings.probe_period, self.probe, clock=self._clock))

    async def _probe_one(self, interface: TrainingInterface) -> list[DeviceFaultEvent]:
        gateway = self._states[interface.name].gateway
        if gateway is None:
            try:
                gateway = network_probe.gateway_of(interface.name, self._route_table())
            except (OSError, ValueError) as error:
                self._recorder.failed(f"gateway of {interface.name}: {error}")
                return []
            if gateway is None:
                self._recorder.failed(
                    f"training interface {interface.name} has no gateway in /proc/net/route; "
                    "configure one explicitly")
                return []
            # kept: an interface taken down loses its routes, and is probed all the same
            self._states[interface.name] = dataclasses.replace(
                self._states[interface.name], gateway=gateway)
        try:
            await self._prober(interface.name, gateway, timeout=self._settings.probe_timeout)
        except network_probe.ProbeUnavailableError as error:
            self._recorder.failed(str(error))
            return []
        except network_probe.ProbeError as error:
            self._recorder.succeeded()  # the detector works: it saw the fault
            return self._update(interface, probe_ok=False, error=str(error))
        self._recorder.succeeded()
        return self._update(interface, probe_ok=True, error=None)

    def _update(self, interface: TrainingInterface, *, link_up: bool | None = None,
                probe_ok: bool | None = None, error: str | None = None
                ) -> list[DeviceFaultEvent]:
        before = self._states[interface.name]
        after = dataclasses.replace(
            before, link_up=before.link_up if link_up is None else link_up,
            probe_ok=before.probe_ok if probe_ok is None else probe_ok,
            last_error=error if probe_ok is not None else before.last_error)
        self._states[interface.name] = after
        if after.faulty is before.faulty:
            return []
        assertion = Assertion.OCCUR if after.faulty else Assertion.RECOVER
        now = self._clock.wall()
        return [DeviceFaultEvent(device_name(device), LINK_DOWN_CODE, assertion, now)
                for device in interface.device_ids]

    def _emit(self, events: list[DeviceFaultEvent]) -> None:
        if events:
            self._on_events(events)
