"""The node's switch document (``SwitchInfoCfg``, SPEC D5) from a switch source.

A source either pushes the switch's fault events as they happen (subscription: ``sim``) or is
read in full every ``poll_period`` (5 min, the original's full poll: ``nvlink``), and says which.
The detector applies each event to the present faults (:func:`.switch_faults.apply_event`) and
grades them with the configured switch codes (:func:`.switch_faults.aggregate`): FaultLevel,
NodeStatus, FaultTimeAndLevelMap. ``on_change`` gets the document whenever its content changes;
:attr:`SwitchDetector.info` always holds the latest, its UpdateTime that of the last event or
poll.

The ``sim`` source replays a timeline and takes injected events (``trainguard fault inject``
through the agent). A timeline is JSON lines in time order, ``time`` in seconds from the
source's start, the other keys the document's own::

    {"time": 0.5, "EventType": "0x08520003", "SubType": "na", "PeerPortDevice": 1,
     "PeerPortId": 3, "SwitchChipId": 0, "SwitchPortId": 5, "Severity": 2,
     "Assertion": "occur"}

``AssembledFaultCode`` may be given instead of ``SubType``; ``Assertion`` is occur, recover or
once (or the document's 1, 0, 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from trainguard.clock import Clock
from trainguard.detect import periodic
from trainguard.detect.detector_status import DetectorStatus, StatusRecorder
from trainguard.faults.device.device_events import Assertion
from trainguard.faults.device.fault_codes import Severity
from trainguard.faults.device.replay import TimelineError, parse_time
from trainguard.faults.node.switch_faults import (
    SwitchCode,
    SwitchCodeTable,
    SwitchFault,
    SwitchInfo,
    aggregate,
    apply_event,
    default_switch_table,
)

__all__ = ["SimSwitchSource", "SwitchDetector", "SwitchSettings", "SwitchSource",
           "SwitchSourceError", "parse_switch_timeline"]

_NOT_APPLICABLE = 0xFFFFFFFF
_ASSERTIONS: dict[object, Assertion] = {
    "occur": Assertion.OCCUR, "recover": Assertion.RECOVER, "once": Assertion.ONCE,
    1: Assertion.OCCUR, 0: Assertion.RECOVER, 2: Assertion.ONCE}


class SwitchSourceError(Exception):
    """The source cannot be read (no NVML, a broken driver); it is tried again."""


class SwitchSource(Protocol):
    @property
    def subscribes(self) -> bool:
        """True: :meth:`next_events` waits for events; False: it reads the switches in full."""
        ...

    async def next_events(self) -> list[SwitchFault]:
        """The fault events since the last call; raises :class:`SwitchSourceError`."""
        ...


@dataclasses.dataclass(frozen=True)
class SwitchSettings:
    poll_period: float = 300.0
    """Seconds between two full reads of a polled source (> 0); 5 min as the original's."""
    retry_period: float = 5.0
    """Seconds before a failed subscription is tried again (> 0)."""

    def __post_init__(self) -> None:
        for name in ("poll_period", "retry_period"):
            if not getattr(self, name) > 0:
                raise ValueError(f"switch {name} must be > 0 seconds, got {getattr(self, name)}")


def _switch_content(info: SwitchInfo) -> tuple[object, ...]:
    return info.faults, info.fault_level, info.node_status, dict(info.fault_time_and_level_map)


class SwitchDetector:
    """Keeps the node's present switch faults and its switch document."""

    def __init__(self, source: SwitchSource, *, clock: Clock,
                 on_change: Callable[[SwitchInfo], None],
                 settings: SwitchSettings | None = None,
                 table: SwitchCodeTable | None = None) -> None:
        self._source = source
        self._clock = clock
        self._on_change = on_change
        self._settings = settings or SwitchSettings()
        self._table = table or default_switch_table()
        self._faults: tuple[SwitchFault, ...] = ()
        self._info = aggregate((), table=self._table, update_time=clock.wall())
        mode = ("subscribes to switch events" if source.subscribes
                else f"reads the switches in full every {self._settings.poll_period:g} s")
        self._recorder = StatusRecorder("switch", mode=mode, clock=clock)

    @property
    def status(self) -> DetectorStatus:
        return self._recorder.status

    @property
    def info(self) -> SwitchInfo:
        return self._info

    def apply(self, events: Iterable[SwitchFault]) -> SwitchInfo | None:
        """Take events; the document when its content changed."""
        for event in events:
            self._faults = apply_event(self._faults, event)
        before = self._info
        self._info = aggregate(self._faults, table=self._table, update_time=self._clock.wall())
        # a notification counts once, as the original's
        self._faults = tuple(fault for fault in self._faults
                             if fault.assertion is not Assertion.ONCE)
        if _switch_content(self._info) == _switch_content(before):
            return None
        self._on_change(self._info)
        return self._info

    async def step(self) -> SwitchInfo | None:
        """Read the source once; the document when its content changed."""
        try:
            events = await self._source.next_events()
        except SwitchSourceError as error:
            self._recorder.failed(str(error))
            return None
        self._recorder.succeeded()
        return self.apply(events)

    async def run(self) -> None:
        """Watch until cancelled."""
        if self._source.subscribes:
            while True:
                await self.step()
                if not self.status.working:
                    await asyncio.sleep(self._settings.retry_period)
        else:
            await periodic.every(self._settings.poll_period, self.step, clock=self._clock)


def _integer(data: dict[str, object], key: str, line: int, *, default: int | None = None
             ) -> int:
    value = data.get(key, default)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = int(value, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TimelineError(f"line {line}: {key}: expected a non-negative integer, got "
                            f"{data.get(key)!r}")
    return value


_FIELDS = frozenset({"time", "EventType", "SubType", "AssembledFaultCode", "PeerPortDevice",
                     "PeerPortId", "SwitchChipId", "SwitchPortId", "Severity", "Assertion"})


def _timeline_record(data: object, line: int) -> tuple[float, SwitchFault]:
    if not isinstance(data, dict):
        raise TimelineError(f"line {line}: expected a JSON object")
    unknown = set(data) - _FIELDS
    if unknown:
        raise TimelineError(f"line {line}: {', '.join(sorted(unknown))}: not a field of a "
                            f"switch event (known: {', '.join(sorted(_FIELDS))})")
    if "time" not in data:
        raise TimelineError(f"line {line}: time: missing")
    time = parse_time(data["time"], line=line)
    event_type = _integer(data, "EventType", line)
    peer = _integer(data, "PeerPortDevice", line, default=0xFFFF)
    port = _integer(data, "SwitchPortId", line)
    code = data.get("AssembledFaultCode")
    if code is None:
        sub = data.get("SubType", "na")
        sub_type = _NOT_APPLICABLE if sub == "na" else _integer(data, "SubType", line)
        code = str(SwitchCode.assemble(event_type=event_type, sub_type=sub_type,
                                       peer_port_device=peer, switch_port_id=port))
    elif not isinstance(code, str):
        raise TimelineError(f"line {line}: AssembledFaultCode: expected a string, got {code!r}")
    else:
        try:
            SwitchCode.parse(code)
        except ValueError as error:
            raise TimelineError(f"line {line}: AssembledFaultCode: {error}") from None
    given = data.get("Assertion", "occur")
    assertion = None if isinstance(given, bool) else _ASSERTIONS.get(given)
    if assertion is None:
        raise TimelineError(f"line {line}: Assertion: {data.get('Assertion')!r} is not one of "
                            "occur, recover, once (or 1, 0, 2)")
    severity = _integer(data, "Severity", line, default=int(Severity.MAJOR))
    if severity > max(Severity):
        raise TimelineError(f"line {line}: Severity: {severity} is not in 0..3")
    return time, SwitchFault(code, event_type, peer, _integer(data, "PeerPortId", line,
                                                              default=0xFFFF),
                             _integer(data, "SwitchChipId", line), port, Severity(severity),
                             assertion, time)


def parse_switch_timeline(lines: Iterable[str]) -> list[tuple[float, SwitchFault]]:
    """Each event with its seconds from the start; blank lines and ``#`` lines are skipped.

    Raises:
        TimelineError: a line that is not an event, or out of time order; the message names the
            line and the field.
    """
    numbered = [(number, text) for number, text in enumerate(lines, start=1)
                if text.strip() and not text.lstrip().startswith("#")]
    records = [_timeline_record(_decoded(text, number), number) for number, text in numbered]
    for (number, _), before, after in zip(numbered[1:], records, records[1:], strict=False):
        if after[0] < before[0]:
            raise TimelineError(f"line {number}: time: {after[0]} is earlier than the line "
                                f"before ({before[0]}); a timeline is in time order")
    return records


def _decoded(text: str, line: int) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise TimelineError(f"line {line}: not JSON ({error.msg})") from None


class SimSwitchSource:
    """Switch events from a timeline and from :meth:`inject`, pushed as they come."""

    subscribes = True

    def __init__(self, *, clock: Clock, timeline: Sequence[tuple[float, SwitchFault]] = ()
                 ) -> None:
        self._clock = clock
        self._timeline = list(timeline)
        self._started: float | None = None
        self._injected: asyncio.Queue[SwitchFault] = asyncio.Queue()

    def inject(self, event: SwitchFault) -> None:
        """An event now, as the switch would send it."""
        self._injected.put_nowait(event)

    async def next_events(self) -> list[SwitchFault]:
        if self._started is None:
            self._started = self._clock.monotonic()
        while True:
            due = self._due()
            if due or not self._injected.empty():
                while not self._injected.empty():
                    due.append(self._injected.get_nowait())
                return due
            wait = (None if not self._timeline
                    else self._started + self._timeline[0][0] - self._clock.monotonic())
            getter = asyncio.ensure_future(self._injected.get())
            done, _ = await asyncio.wait({getter}, timeout=wait)
            if done:
                return [getter.result(), *self._due()]
            getter.cancel()

    def _due(self) -> list[SwitchFault]:
        assert self._started is not None
        elapsed = self._clock.monotonic() - self._started
        now = self._clock.wall()
        due: list[SwitchFault] = []
        while self._timeline and self._timeline[0][0] <= elapsed:
            due.append(dataclasses.replace(self._timeline.pop(0)[1], time=now))
        return due
