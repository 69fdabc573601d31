"""Replaying a timeline of device fault events through the engine (``trainguard faults replay``).

For operators checking a customization before rolling it out, and for tests. A timeline is JSON
lines, in time order; ``time`` is seconds (any origin) or an ISO-8601 time:

* ``{"time": 0, "device": "npu-0", "code": "81078603", "assertion": "occur"}``: a fault event
  (``assertion``: occur, recover or once);
* ``{"time": 90000, "device": "npu-0", "release": true}``: an operator clears the device's
  ManuallySeparateNPU;
* ``{"time": 3600, "customization": {...}}``: a new faultCustomization.json takes effect;
* ``{"time": 7200}``: nothing happens; devices are evaluated then.

Between records, each device whose level time alone can change (a fault that may outlast its
timeout, a release window running) is evaluated every ``period`` seconds, as the original's
device plugin does on its polling period, so those changes appear when they happen.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from collections.abc import Iterable, Iterator

from trainguard.faults.config_problems import ConfigProblem
from trainguard.faults.device import customization as customizations
from trainguard.faults.device import device_health, fault_codes
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent, UpgradeReason
from trainguard.faults.levels import FaultType, Level, ResetPolicy

__all__ = ["LevelChange", "TimelineError", "TimelineRecord", "out_of_order", "parse_time",
           "parse_timeline", "replay", "timeline_lines"]


class TimelineError(ValueError):
    """A line of a timeline that cannot be replayed; the message names the line and field."""


@dataclasses.dataclass(frozen=True)
class TimelineRecord:
    line: int
    time: float
    event: DeviceFaultEvent | None = None
    release: str = ""  # the device to release
    customization: customizations.Customization | None = None
    problems: tuple[ConfigProblem, ...] = ()  # of the customization


@dataclasses.dataclass(frozen=True)
class LevelChange:
    time: float
    device: str
    before: Level
    after: Level
    fault_type: FaultType | None
    reset_policy: ResetPolicy
    cause: str  # the record that caused it, or "time passed"
    added: tuple[UpgradeReason, ...] = ()
    removed: tuple[UpgradeReason, ...] = ()

    def to_data(self) -> dict[str, object]:
        return {"time": self.time, "device": self.device, "before": str(self.before),
                "after": str(self.after),
                "fault_type": str(self.fault_type) if self.fault_type else None,
                "reset_policy": str(self.reset_policy), "cause": self.cause,
                "added": [reason.to_data() for reason in self.added],
                "removed": [reason.to_data() for reason in self.removed]}


def parse_time(value: object, *, line: int) -> float:
    """Seconds from a number of seconds or an ISO-8601 time (UTC unless it says)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TimelineError(f"line {line}: time: expected seconds or an ISO-8601 time, "
                            f"got {value!r}")
    if isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise TimelineError(f"line {line}: time: {value!r} is not an ISO-8601 time"
                                ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        return moment.timestamp()
    if not math.isfinite(value):
        raise TimelineError(f"line {line}: time: {value!r} is not a finite number")
    return float(value)


_FIELDS = frozenset({"time", "device", "code", "assertion", "release", "customization"})


def _record(data: object, line: int) -> TimelineRecord:
    if not isinstance(data, dict):
        raise TimelineError(f"line {line}: expected a JSON object")
    if "time" not in data:
        raise TimelineError(f"line {line}: time: missing")
    unknown = set(data) - _FIELDS
    if unknown:
        raise TimelineError(f"line {line}: {', '.join(sorted(unknown))}: not a field of a "
                            f"record (known: {', '.join(sorted(_FIELDS))})")
    time = parse_time(data["time"], line=line)
    if "customization" in data:
        chosen, problems = customizations.Customization.from_document(
            data["customization"], file=f"line {line} customization")
        return TimelineRecord(line, time, customization=chosen, problems=tuple(problems))
    device = data.get("device")
    if device is None and len(data) == 1:
        return TimelineRecord(line, time)
    if not isinstance(device, str) or not device:
        raise TimelineError(f"line {line}: device: expected a device name, got {device!r}")
    if data.get("release") is True:
        return TimelineRecord(line, time, release=device)
    code = data.get("code")
    if not isinstance(code, str) or not fault_codes.is_code(code.strip()):
        raise TimelineError(f"line {line}: code: expected a fault code, got {code!r}")
    try:
        assertion = Assertion(data.get("assertion", "occur"))
    except ValueError:
        raise TimelineError(f"line {line}: assertion: {data.get('assertion')!r} is not one of "
                            f"{', '.join(a.value for a in Assertion)}") from None
    return TimelineRecord(line, time, event=DeviceFaultEvent(device, code, assertion, time))


def timeline_lines(lines: Iterable[str]) -> Iterator[tuple[int, object]]:
    """Each line's number and parsed JSON, in a file of JSON lines where blank lines and lines
    starting with ``#`` are skipped (a timeline, or the simulated devices' one).

    Raises:
        TimelineError: a line that is not JSON.
    """
    for number, text in enumerate(lines, start=1):
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        try:
            yield number, json.loads(text)
        except json.JSONDecodeError as error:
            raise TimelineError(f"line {number}: not JSON ({error.msg})") from None


def out_of_order(number: int, time: float, before: float) -> TimelineError:
    """The error of a line whose time is earlier than the line before."""
    return TimelineError(f"line {number}: time: {time} is earlier than the line before "
                         f"({before}); a timeline is in time order")


def parse_timeline(lines: Iterable[str]) -> list[TimelineRecord]:
    """The timeline's records; blank lines and lines starting with ``#`` are skipped.

    Raises:
        TimelineError: a line that is not a record, or a time earlier than the line before.
    """
    records: list[TimelineRecord] = []
    for number, data in timeline_lines(lines):
        record = _record(data, number)
        if records and record.time < records[-1].time:
            raise out_of_order(number, record.time, records[-1].time)
        records.append(record)
    return records


def replay(records: Iterable[TimelineRecord], *, engine: device_health.FaultEngine,
           period: float = 1.0, until: float | None = None) -> Iterator[LevelChange]:
    """Each change of a device's level, in time order.

    ``period``: seconds between evaluations when no record comes (> 0); ``until``: evaluate up
    to this time after the last record.
    """
    if not period > 0:
        raise ValueError(f"period must be > 0 seconds, got {period}")
    clock: float | None = None

    def change(health: device_health.DeviceHealth, time: float, cause: str) -> LevelChange:
        return LevelChange(time, health.device, health.previous, health.level,
                           health.fault_type, health.reset_policy, cause, health.added,
                           health.removed)

    def advance(to: float) -> Iterator[LevelChange]:
        nonlocal clock
        if clock is None:
            clock = to
            return
        while clock + period < to and engine.devices_due():
            clock += period
            for health in engine.sweep(clock, due_only=True):
                yield change(health, clock, "time passed")
        clock = to

    for record in records:
        yield from advance(record.time)
        cause = f"line {record.line}"
        health = None
        if record.event is not None:
            cause += f": {record.event.code} {record.event.assertion}"
            health = engine.report(record.event)
        elif record.release:
            cause += ": released by an operator"
            health = engine.release(record.release, record.time)
        elif record.customization is not None:
            engine.reconfigure(table=engine.table, customization=record.customization)
        if health is not None and health.changed:
            yield change(health, record.time, cause)
        if record.event is None:
            for swept in engine.sweep(record.time):
                yield change(swept, record.time, cause)
    if until is not None and clock is not None and until > clock:
        yield from advance(until)
        for health in engine.sweep(until):
            yield change(health, until, "time passed")
