"""Devices that fault jobs again and again are taken out of use (ManuallySeparateNPU).

As the original's fault centre counts them (NOTES §4.6):

* A fault counts when it reaches a job's view at a level above SubHealthFault (NotHandleFault
  and SubHealthFault never count), per device and code.
* A fault on a device in use by a job waits 30 s: if within those 30 s the same code hit
  another device of the same job, it is a software fault (a bad collective hits every rank),
  and it and its like are not counted; otherwise it counts, with the same device's repeats.
  A fault on a device no job uses counts at once.
* ``fault_threshold`` counts of one code on one device within ``fault_window_hours`` separate
  the device, and its count starts over.
* A separated device is released when ``fault_free_hours`` passed since its last counted fault
  (decided here: any code's, the original's NOTES say "released after fault_free_hours"; its
  code releases each code ``fault_free_hours`` after that code last separated the device), or
  when an operator releases it. An operator may separate a device; such a device is released
  only by an operator (decided here).

Pure: faults and times (seconds) come in, changes go out; :meth:`ManualSeparation.export` and
:meth:`ManualSeparation.restore` carry the state over a controller restart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from trainguard.controller.fault_centre import plain_data
from trainguard.controller.fault_centre.separation_policy import SeparationPolicy
from trainguard.faults.levels import Level

__all__ = ["OPERATOR", "SOFTWARE_FAULT_WINDOW", "ManualSeparation", "SeparationChange"]

SOFTWARE_FAULT_WINDOW = 30.0
"""Seconds within which one code on two devices of a job is a software fault."""
OPERATOR = "operator"
"""The code recorded for a device an operator separated."""


@dataclasses.dataclass(frozen=True)
class SeparationChange:
    device: str
    separated: bool
    reason: str
    time: float


@dataclasses.dataclass
class _Separated:
    codes: dict[str, float]  # code -> when it separated the device
    last_fault: float
    by_operator: bool = False


@dataclasses.dataclass(frozen=True)
class _Pending:
    device: str
    code: str
    time: float


class ManualSeparation:
    """The cluster's counts and separated devices under one policy."""

    def __init__(self, policy: SeparationPolicy | None = None) -> None:
        self.policy = policy or SeparationPolicy()
        self._counts: dict[str, dict[str, list[float]]] = {}  # device -> code -> times
        self._pending: dict[str, list[_Pending]] = {}  # job -> faults waiting 30 s
        self._separated: dict[str, _Separated] = {}

    @property
    def separated(self) -> frozenset[str]:
        return frozenset(self._separated)

    def reason(self, device: str) -> tuple[str, ...]:
        """The codes that separated ``device`` (``operator`` for an operator's separation)."""
        separated = self._separated.get(device)
        return tuple(sorted(separated.codes)) if separated is not None else ()

    def observe(self, *, device: str, code: str, level: Level, time: float, job: str | None
                ) -> list[SeparationChange]:
        """A fault that reached the view of ``job`` (None: no job uses the device)."""
        if not self.policy.enabled or level.severity <= Level.SUB_HEALTH_FAULT.severity:
            return []
        fault = _Pending(device, code.upper(), time)
        if job is None:
            return self._count(fault)
        self._pending.setdefault(job, []).append(fault)
        return []

    def advance(self, now: float) -> list[SeparationChange]:
        """Count the job faults whose 30 s passed and release devices whose time came."""
        changes: list[SeparationChange] = []
        for job in list(self._pending):
            faults = sorted(self._pending[job], key=lambda fault: fault.time)
            while faults and faults[0].time + SOFTWARE_FAULT_WINDOW <= now:
                first = faults[0]
                alike = [fault for fault in faults[1:] if fault.code == first.code
                         and fault.time <= first.time + SOFTWARE_FAULT_WINDOW]
                software = any(fault.device != first.device for fault in alike)
                counted = [] if software else [first, *alike]
                faults = [fault for fault in faults[1:] if fault not in alike]
                for fault in counted:
                    changes.extend(self._count(fault))
            if faults:
                self._pending[job] = faults
            else:
                del self._pending[job]
        changes.extend(self._release_due(now))
        return changes

    def _count(self, fault: _Pending) -> list[SeparationChange]:
        separated = self._separated.get(fault.device)
        if separated is not None:
            separated.last_fault = max(separated.last_fault, fault.time)
        codes = self._counts.setdefault(fault.device, {})
        times = [time for time in codes.get(fault.code, [])
                 if fault.time - time < self.policy.window]
        times.append(fault.time)
        if len(times) < self.policy.fault_threshold:
            codes[fault.code] = times
            return []
        codes.pop(fault.code, None)
        if not codes:
            del self._counts[fault.device]
        if separated is not None:
            separated.codes[fault.code] = fault.time
            return []
        self._separated[fault.device] = _Separated({fault.code: fault.time}, fault.time)
        return [SeparationChange(fault.device, True, f"{fault.code} hit jobs "
                                 f"{self.policy.fault_threshold} times within "
                                 f"{self.policy.fault_window_hours} h", fault.time)]

    def _release_due(self, now: float) -> list[SeparationChange]:
        free = self.policy.fault_free
        if free is None:
            return []
        due = [device for device, separated in self._separated.items()
               if not separated.by_operator and now - separated.last_fault >= free]
        for device in due:
            del self._separated[device]
        return [SeparationChange(device, False, f"no fault for {self.policy.fault_free_hours} "
                                 "h", now) for device in sorted(due)]

    def separate(self, device: str, now: float) -> list[SeparationChange]:
        """An operator separates ``device``."""
        separated = self._separated.get(device)
        if separated is not None:
            separated.by_operator = True
            separated.codes[OPERATOR] = now
            return []
        self._separated[device] = _Separated({OPERATOR: now}, now, by_operator=True)
        return [SeparationChange(device, True, "separated by an operator", now)]

    def release(self, device: str, now: float) -> list[SeparationChange]:
        """An operator releases ``device``; its counts start over."""
        self._counts.pop(device, None)
        if self._separated.pop(device, None) is None:
            return []
        return [SeparationChange(device, False, "released by an operator", now)]

    def export(self) -> dict[str, object]:
        """The state as plain data (:meth:`restore` takes it back)."""
        return {
            "separated": {device: {"codes": dict(sorted(entry.codes.items())),
                                   "last_fault": entry.last_fault,
                                   "by_operator": entry.by_operator}
                          for device, entry in sorted(self._separated.items())},
            "counts": {device: {code: list(times) for code, times in sorted(codes.items())}
                       for device, codes in sorted(self._counts.items())},
            "pending": {job: [dataclasses.asdict(fault) for fault in faults]
                        for job, faults in sorted(self._pending.items())},
        }

    def restore(self, data: Mapping[str, object]) -> None:
        """Take back :meth:`export`'s data.

        Raises:
            ValueError: a field is missing or malformed (the message names it).
        """
        where = "manual separation"
        separated = {}
        for device, entry in plain_data.mapping(data, "separated", where=where).items():
            at = f"{where}: separated[{device!r}]"
            if not isinstance(entry, dict):
                raise ValueError(f"{at}: must be a JSON object")
            codes = plain_data.mapping(entry, "codes", where=at)
            by_operator = entry.get("by_operator", False)
            separated[device] = _Separated(
                {code: plain_data.number(codes, code, where=f"{at}: codes") for code in codes},
                plain_data.number(entry, "last_fault", where=at), by_operator is True)
        counts: dict[str, dict[str, list[float]]] = {}
        counted = plain_data.mapping(data, "counts", where=where)
        for device in counted:
            at = f"{where}: counts"
            counts[device] = {code: _times(times, where=f"{at}[{device!r}][{code!r}]")
                              for code, times in plain_data.mapping(counted, device,
                                                                    where=at).items()}
        pending: dict[str, list[_Pending]] = {}
        jobs = plain_data.mapping(data, "pending", where=where)
        for job in jobs:
            at = f"{where}: pending[{job!r}]"
            pending[job] = [_Pending(plain_data.text(item, "device", where=at),
                                     plain_data.text(item, "code", where=at),
                                     plain_data.number(item, "time", where=at))
                            for item in plain_data.objects(jobs, job, where=f"{where}: pending")]
        self._separated, self._counts, self._pending = separated, counts, pending


def _times(value: object, *, where: str) -> list[float]:
    if not isinstance(value, list) or not all(
            isinstance(time, (int, float)) and not isinstance(time, bool) for time in value):
        raise ValueError(f"{where}: must be a list of times (numbers)")
    return [float(time) for time in value]
