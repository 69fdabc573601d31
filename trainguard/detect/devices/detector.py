"""One host's device detector: runs a backend, grades what it sees, and keeps going when the
backend fails (SPEC D1; issue 13 §1).

The detector subscribes where the backend's driver can push events, and polls every
``period`` seconds otherwise (and, for backends whose memory or link state is only polled,
while subscribed too); :attr:`DeviceDetector.state` says which. Every event goes to the
:class:`~trainguard.faults.device.device_health.FaultEngine` (the device plugin's grading) and,
with the device's health after it, to ``on_update``. Every ``sweep_period`` seconds the engine
evaluates the devices whose level time alone can change, so FaultDuration and FaultFrequency
raise and lower levels while faults last; each change goes to ``on_update`` too.

A backend that cannot open, whose poll fails or whose subscription dies is closed and opened
again after 1, 2, 4 ... seconds (up to ``retry_cap``); the agent's other detectors keep
running, and :attr:`DeviceDetector.state` shows the error and the retries for ``trainguard
status``. Codes a poll found stay held across a restart until a poll says they are gone.

Two ways to drive it: ``await detector.run()`` as one task of the agent's loop (backend calls
run in a worker thread; events pushed from the driver's thread wake the loop at once), or
:meth:`DeviceDetector.tick` from a test with a fake clock. ``on_update`` is called on the
loop's thread (the caller's, with ``tick``), never on a driver's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import queue
from collections.abc import Callable, Mapping

from trainguard import clock as clocks
from trainguard.detect.devices import backend as backends
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent

__all__ = ["DetectorSettings", "DetectorState", "DeviceDetector", "DeviceUpdate", "Mode",
           "Status", "UpdateSink"]

logger = logging.getLogger(__name__)


class Mode(enum.StrEnum):
    """How the detector learns of faults."""

    SUBSCRIPTION = "subscription"  # the driver pushes events
    POLLING = "polling"  # the detector asks every period


class Status(enum.StrEnum):
    STARTING = "starting"  # not opened yet
    RUNNING = "running"
    FAILED = "failed"  # waiting to open the backend again


@dataclasses.dataclass(frozen=True)
class DetectorSettings:
    period: float = 5.0
    """Seconds between polls (> 0). 5 s: the original device plugin's ``-listWatchPeriod``
    default."""
    sweep_period: float = 1.0
    """Seconds between evaluations of faults that time alone changes (> 0). 1 s, finer than
    the original's 5 s period, so that a FaultDuration acts within a second of its timeout;
    each sweep touches only those devices."""
    retry_initial: float = 1.0
    """Seconds before the first retry of a failed backend (> 0); doubled at each failure."""
    retry_cap: float = 60.0
    """Longest wait between retries, seconds (>= retry_initial): a host whose driver comes
    back is seen again within a minute."""

    def __post_init__(self) -> None:
        for field in ("period", "sweep_period", "retry_initial"):
            if not getattr(self, field) > 0:
                raise ValueError(f"{field} must be > 0 seconds, got {getattr(self, field)}")
        if self.retry_cap < self.retry_initial:
            raise ValueError(f"retry_cap ({self.retry_cap} s) must be >= retry_initial "
                             f"({self.retry_initial} s)")


@dataclasses.dataclass(frozen=True)
class DetectorState:
    """What ``trainguard status`` shows of a device detector."""

    backend: str
    status: Status
    mode: Mode | None  # None until the backend has opened
    devices: int  # the devices the backend listed when it last opened
    last_error: str  # "" when the backend never failed
    retries: int  # failed attempts since the backend last ran
    retry_in: float | None  # seconds until the next attempt, while failed

    def to_data(self) -> dict[str, object]:
        return {"backend": self.backend, "status": str(self.status),
                "mode": str(self.mode) if self.mode else None, "devices": self.devices,
                "last_error": self.last_error, "retries": self.retries,
                "retry_in": self.retry_in}


@dataclasses.dataclass(frozen=True)
class DeviceUpdate:
    """A device's health after an event, or after time alone changed it (``event`` None)."""

    health: device_health.DeviceHealth
    event: DeviceFaultEvent | None = None


UpdateSink = Callable[[DeviceUpdate], None]


@dataclasses.dataclass(frozen=True)
class _Opened:
    inventory: backends.Inventory
    subscribed: bool


@dataclasses.dataclass(frozen=True)
class _Failed:
    error: backends.BackendError


_Outcome = _Opened | backends.Reading | _Failed


class DeviceDetector:
    def __init__(self, backend: backends.DeviceBackend, *, engine: device_health.FaultEngine,
                 on_update: UpdateSink, clock: clocks.Clock,
                 settings: DetectorSettings | None = None) -> None:
        self._backend = backend
        self._engine = engine
        self._on_update = on_update
        self._clock = clock
        self._settings = settings or DetectorSettings()
        self._presence = backends.Presence()
        self._pushed: queue.SimpleQueue[tuple[int, DeviceFaultEvent | backends.BackendError]]
        self._pushed = queue.SimpleQueue()
        self._fed: queue.SimpleQueue[DeviceFaultEvent] = queue.SimpleQueue()
        self._generation = 0  # of the backend's opening; late pushes of an older one are dropped
        self._status = Status.STARTING
        self._mode: Mode | None = None
        self._inventory: backends.Inventory | None = None
        self._healths: dict[str, device_health.DeviceHealth] = {}
        self._last_error = ""
        self._retries = 0
        now = clock.monotonic()
        self._next_start: float | None = now
        self._next_poll: float | None = None
        self._next_sweep = now
        self._needs_close = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    @property
    def state(self) -> DetectorState:
        retry_in = None
        if self._status is Status.FAILED and self._next_start is not None:
            retry_in = max(0.0, self._next_start - self._clock.monotonic())
        devices = len(self._inventory.devices) if self._inventory else 0
        return DetectorState(self._backend.name, self._status, self._mode, devices,
                             self._last_error, self._retries, retry_in)

    @property
    def inventory(self) -> backends.Inventory | None:
        """The devices the backend listed when it last opened; None before."""
        return self._inventory

    @property
    def healths(self) -> Mapping[str, device_health.DeviceHealth]:
        """Each device's health as last graded (devices never graded are healthy)."""
        return dict(self._healths)

    def tick(self) -> float:
        """Do what is due now, calling the backend on this thread; the seconds until the next
        thing is due (an event pushed meanwhile is due at once)."""
        now = self._clock.monotonic()
        outcomes = self._backend_work(now) if self._backend_due(now) else []
        return self._advance(outcomes)

    async def run(self) -> None:
        """Run until cancelled; the backend is closed on the way out."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        try:
            while True:
                self._wake.clear()
                now = self._clock.monotonic()
                outcomes = []
                if self._backend_due(now):
                    outcomes = await asyncio.to_thread(self._backend_work, now)
                wait = self._advance(outcomes)
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait)
        finally:
            self._loop = self._wake = None
            await asyncio.to_thread(self._backend.close)

    def close(self) -> None:
        """Close the backend (what :meth:`run` does on its way out)."""
        self._backend.close()

    def feed(self, event: DeviceFaultEvent) -> None:
        """An event of one of these devices seen by another detector (the network plane's
        link down), graded and handed on as the backend's are; from any thread."""
        self._fed.put(event)
        self._wake_loop()

    # What a driver's thread calls.

    def _push(self, generation: int, item: DeviceFaultEvent | backends.BackendError) -> None:
        self._pushed.put((generation, item))
        self._wake_loop()

    def _wake_loop(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(wake.set)

    # Backend calls: may block, run on a worker thread under run().

    def _backend_due(self, now: float) -> bool:
        return self._needs_close or any(
            due is not None and due <= now for due in (self._next_start, self._next_poll))

    def _backend_work(self, now: float) -> list[_Outcome]:
        outcomes: list[_Outcome] = []
        backend = self._backend
        if self._needs_close:
            backend.close()
        if self._next_start is not None and self._next_start <= now:
            generation = self._generation + 1
            try:
                inventory = backend.open()
                subscribed = backend.subscribe(
                    lambda event: self._push(generation, event),
                    lambda error: self._push(generation, error))
            except backends.BackendError as error:
                backend.close()
                return [_Failed(error)]
            except Exception as error:  # a backend's bug must not end the agent's detector
                logger.exception("device backend %s failed to open", backend.name)
                backend.close()
                return [_Failed(backends.BackendError(backend.name, f"unexpected error: "
                                                      f"{type(error).__name__}: {error}"))]
            outcomes.append(_Opened(inventory, subscribed))
            if subscribed and not backend.polls_while_subscribed:
                return outcomes
        elif self._next_poll is None or self._next_poll > now:
            return outcomes
        try:
            outcomes.append(backend.poll())
        except backends.BackendError as error:
            outcomes.append(_Failed(error))
        except Exception as error:  # as above
            logger.exception("device backend %s failed to poll", backend.name)
            outcomes.append(_Failed(backends.BackendError(
                backend.name, f"unexpected error: {type(error).__name__}: {error}")))
        return outcomes

    # The rest runs on the loop's thread (the caller's under tick()).

    def _advance(self, outcomes: list[_Outcome]) -> float:
        now = self._clock.monotonic()
        self._needs_close = False
        for outcome in outcomes:
            if isinstance(outcome, _Opened):
                self._opened(outcome, now)
            elif isinstance(outcome, _Failed):
                self._failed(outcome.error, now)
            else:
                self._next_poll = now + self._settings.period
                for event in self._presence.changes(outcome):
                    self._take(event)
        while not self._pushed.empty():
            generation, item = self._pushed.get_nowait()
            if generation != self._generation or self._status is not Status.RUNNING:
                continue  # from a subscription closed since
            if isinstance(item, backends.BackendError):
                self._failed(item, now)
            else:
                self._take(item)
        while not self._fed.empty():
            self._take(self._fed.get_nowait())
        if self._next_sweep <= now:
            self._next_sweep = now + self._settings.sweep_period
            for health in self._engine.sweep(self._clock.wall(), due_only=True):
                self._healths[health.device] = health
                self._on_update(DeviceUpdate(health))
        due = min(due for due in (self._next_start, self._next_poll, self._next_sweep)
                  if due is not None)
        return max(0.0, due - now)

    def _opened(self, opened: _Opened, now: float) -> None:
        self._generation += 1
        self._inventory = opened.inventory
        self._status = Status.RUNNING
        self._mode = Mode.SUBSCRIPTION if opened.subscribed else Mode.POLLING
        self._retries = 0
        self._next_start = None
        polls = not opened.subscribed or self._backend.polls_while_subscribed
        self._next_poll = now + self._settings.period if polls else None
        logger.info("device backend %s: %d devices, %s", self._backend.name,
                    len(opened.inventory.devices), self._mode)

    def _failed(self, error: backends.BackendError, now: float) -> None:
        self._generation += 1  # drop what the failed subscription may still push
        self._status = Status.FAILED
        self._last_error = str(error)
        self._retries += 1
        settings = self._settings
        delay = min(settings.retry_cap, settings.retry_initial * 2 ** (self._retries - 1))
        self._next_start = now + delay
        self._next_poll = None
        self._needs_close = True
        logger.warning("device backend failed (%s); retrying in %.0f s", error, delay)

    def _take(self, event: DeviceFaultEvent) -> None:
        health = self._engine.report(event)
        self._healths[event.device] = health
        self._on_update(DeviceUpdate(health, event))
        if event.assertion is Assertion.ONCE:  # counted for that evaluation only: re-grade
            after = self._engine.health(event.device, event.time)
            self._healths[event.device] = after
            if after.changed:
                self._on_update(DeviceUpdate(after))
