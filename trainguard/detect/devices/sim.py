"""Simulated devices: the default backend, and what tests and demonstrations use (SPEC D1).

Faults come from a timeline file and from :meth:`SimBackend.inject` (``trainguard fault inject
--device N CODE [--recover]``), and reach the detector exactly as a driver's would: pushed from
the backend's own thread (subscription), or, with ``subscription=False``, found by polling.

A timeline is JSON lines, in time order; ``time`` is seconds since the backend opened:
``{"time": 12.5, "device": 3, "code": "80E01801", "assertion": "occur"}`` (``assertion``:
occur, recover or once; occur when left out). Blank lines and lines starting with ``#`` are
skipped. A code must be one the code table knows, so that a typo is not taken for an unknown
fault (which the original isolates); a malformed line is refused with its line and field.

The simulated host is in no super pod that can be queried: SuperPodID and ServerIndex are -2.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Iterable
from pathlib import Path

from trainguard import clock as clocks
from trainguard.detect.devices import backend
from trainguard.faults.device import fault_codes, replay
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent

__all__ = ["SimBackend", "SimFault", "SimFaultError", "parse_sim_timeline"]

logger = logging.getLogger(__name__)

_FIELDS = ("time", "device", "code", "assertion")


class SimFaultError(ValueError):
    """An injected fault that cannot be: no such device, or a code the table does not know."""


@dataclasses.dataclass(frozen=True)
class SimFault:
    time: float  # seconds since the backend opened
    device: int  # physical id
    code: str
    assertion: Assertion


def _check(device: object, code: object, *, devices: int,
           table: fault_codes.CodeTable) -> str | None:
    """Why a device and code cannot be simulated (naming the field), or None."""
    if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < devices:
        return (f"device: {device!r} is not a device of this host (physical ids 0..{devices - 1})")
    if not isinstance(code, str) or not fault_codes.is_code(code.strip()):
        return f"code: {code!r} is not a fault code (hex digits, or letters, digits, '-', '_')"
    key = fault_codes.code_key(code)
    if key not in table.chip and not table.is_network(key):
        return f"code: {code!r} is not in the fault code table (faultCode.json, gpuFaultCode.json)"
    return None


def parse_sim_timeline(lines: Iterable[str], *, devices: int,
                       table: fault_codes.CodeTable | None = None) -> tuple[SimFault, ...]:
    """The faults of a timeline.

    Raises:
        TimelineError: a line that is not a fault; the message names the line and the field.
    """
    table = table or fault_codes.default_table()
    faults: list[SimFault] = []
    for number, data in replay.timeline_lines(lines):
        if not isinstance(data, dict):
            raise replay.TimelineError(f"line {number}: expected a JSON object")
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise replay.TimelineError(
                f"line {number}: {', '.join(unknown)}: not a field of a simulated fault "
                f"(known: {', '.join(_FIELDS)})")
        time = data.get("time")
        if (isinstance(time, bool) or not isinstance(time, int | float)
                or not math.isfinite(time) or time < 0):
            raise replay.TimelineError(
                f"line {number}: time: expected seconds since start (>= 0), got {time!r}")
        problem = _check(data.get("device"), data.get("code"), devices=devices, table=table)
        if problem:
            raise replay.TimelineError(f"line {number}: {problem}")
        try:
            assertion = Assertion(data.get("assertion", "occur"))
        except ValueError:
            raise replay.TimelineError(
                f"line {number}: assertion: {data.get('assertion')!r} is not one of "
                f"{', '.join(a.value for a in Assertion)}") from None
        if faults and time < faults[-1].time:
            raise replay.out_of_order(number, time, faults[-1].time)
        faults.append(SimFault(float(time), data["device"], data["code"].strip(), assertion))
    return tuple(faults)


class SimBackend(backend.DeviceBackend):
    name = "sim"

    def __init__(self, *, devices: int, clock: clocks.Clock, timeline: Iterable[SimFault] = (),
                 subscription: bool = True, table: fault_codes.CodeTable | None = None) -> None:
        """``subscription=False`` makes the simulated driver one that must be polled."""
        if devices < 1:
            raise ValueError(f"devices: expected at least 1, got {devices}")
        self._devices = devices
        self._clock = clock
        self._timeline = tuple(timeline)
        self._subscription = subscription
        self._table = table or fault_codes.default_table()
        self._lock = threading.Lock()
        self._opened_wall = 0.0
        self._opened_monotonic = 0.0
        self._next = 0  # the first timeline fault not delivered yet
        self._held: dict[str, set[str]] = {}
        self._notices: list[DeviceFaultEvent] = []
        self._sink: backend.EventSink | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_file(cls, path: Path, *, devices: int, clock: clocks.Clock,
                  subscription: bool = True) -> SimBackend:
        """Raises: TimelineError: the file cannot be read, or a line is not a fault."""
        try:
            text = path.read_text()
        except OSError as error:
            raise replay.TimelineError(f"{path}: cannot be read ({error.strerror})") from None
        try:
            timeline = parse_sim_timeline(text.splitlines(), devices=devices)
        except replay.TimelineError as error:
            raise replay.TimelineError(f"{path}: {error}") from None
        return cls(devices=devices, clock=clock, timeline=timeline, subscription=subscription)

    def open(self) -> backend.Inventory:
        self._opened_wall = self._clock.wall()
        self._opened_monotonic = self._clock.monotonic()
        self._next = 0
        self._held.clear()
        self._notices.clear()
        self._stop.clear()
        return backend.Inventory(tuple(backend.DeviceIdentity(index, index)
                                       for index in range(self._devices)))

    def subscribe(self, events: backend.EventSink, failed: backend.FailureSink) -> bool:
        if not self._subscription:
            return False
        self._sink = events
        if self._timeline:
            self._thread = threading.Thread(target=self._play, name="trainguard-sim-driver",
                                            daemon=True)
            self._thread.start()
        return True

    def poll(self) -> backend.Reading:
        with self._lock:
            due = self._due(self._clock.monotonic())
            for event in due:
                self._apply(event)
            notices, self._notices = tuple(self._notices), []
            present = {device: frozenset(codes) for device, codes in self._held.items()}
        return backend.Reading(self._clock.wall(), present, notices=notices)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        self._sink = None

    def inject(self, device: int, code: str, assertion: Assertion = Assertion.OCCUR
               ) -> DeviceFaultEvent:
        """A fault of a simulated device, now; the event it makes.

        Raises:
            SimFaultError: no such device, or a code the table does not know.
        """
        problem = _check(device, code, devices=self._devices, table=self._table)
        if problem:
            raise SimFaultError(problem)
        event = DeviceFaultEvent(backend.device_name(device), code.strip(), assertion,
                                 self._clock.wall())
        with self._lock:
            self._apply(event)
            sink = self._sink
        if sink is not None:
            sink(event)
        return event

    def _apply(self, event: DeviceFaultEvent) -> None:
        """Keep what a poll reports (called with the lock held)."""
        if event.assertion is Assertion.ONCE:
            if not self._subscription:  # pushed events are not polled as well
                self._notices.append(event)
        elif event.assertion is Assertion.OCCUR:
            self._held.setdefault(event.device, set()).add(event.code)
        else:
            held = self._held.get(event.device, set())
            held.discard(event.code)
            if not held:
                self._held.pop(event.device, None)

    def _due(self, now: float) -> list[DeviceFaultEvent]:
        """Timeline faults due by ``now`` (monotonic), as events; called with the lock held."""
        due = []
        while (self._next < len(self._timeline)
               and self._opened_monotonic + self._timeline[self._next].time <= now):
            fault = self._timeline[self._next]
            due.append(DeviceFaultEvent(backend.device_name(fault.device), fault.code,
                                        fault.assertion, self._opened_wall + fault.time))
            self._next += 1
        return due

    def _play(self) -> None:
        """The simulated driver: pushes each timeline fault when it is due."""
        while self._next < len(self._timeline):
            wait = self._opened_monotonic + self._timeline[self._next].time
            if self._stop.wait(max(0.0, wait - self._clock.monotonic())):
                return
            with self._lock:
                due = self._due(self._clock.monotonic())
                for event in due:
                    self._apply(event)
                sink = self._sink
            for event in due:
                if sink is not None:
                    sink(event)
        logger.debug("sim: the timeline is played out")
