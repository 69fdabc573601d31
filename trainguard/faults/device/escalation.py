"""The escalation engine: raises a device above its codes' level when a configured fault repeats
(``FaultFrequency``) or lasts (``FaultDuration``), and keeps the reasons (NOTES §2.3).

Pure: events and times (float seconds) come in, states go out; no clock, no I/O. State is kept
per device and event id, and :meth:`Escalation.evaluate` touches one device only.

The original's rules, kept:

* An id without a FaultDuration rule counts an occurrence at each ``occur`` or ``once``, and a
  ``recover`` sets its last recovery time. An id with a FaultDuration rule counts an occurrence
  only when its duration state flips healthy -> timed out (at the flip's alarm time), and the flip
  back sets its last recovery time (:mod:`.fault_duration`).
* At evaluation, occurrences before now - TimeWindow are dropped. Times or more raise the device
  to FaultHandling with a ``FaultFrequency`` reason, and the occurrences are cleared: the raised
  level lives on in the reason, and while it stands new occurrences only refresh its time. The
  reason goes when the last recovery is no earlier than the last fault and more than
  ReleaseTimeWindow has passed since it; without a ReleaseTimeWindow it never goes by itself.
* A timed-out id gives FaultHandling with a ``FaultDuration`` reason, removed once the recovery
  lasted more than RecoverTimeout.
* The levels are the reasons': network codes' reasons make ``network``, the others ``chip``. A
  device holding a ManuallySeparateNPU reason is manually separated, and its chip is
  ManuallySeparateNPU, until :meth:`Escalation.release` (the operator) or its release window.
* A reason's time is the fault that raised the device: the last occurrence for a frequency
  reason, the flip's alarm time for a duration reason.
* A new configuration (:meth:`Escalation.reconfigure`) forgets the history of ids it no longer
  has, and moves raised levels to the new rules' FaultHandling or removes them with their rule.
  ManuallySeparateNPU stays until released, and a level is never moved *to* it (the original's
  documentation warns that this "does not take effect"): it stays, and goes by the new rule's
  release window, which a ManuallySeparateNPU rule usually lacks.

Fixed here: the original keeps the frequency level of only one id per device and cycle (it
overwrites its list in the loop over ids), and clears the occurrences of only one id per device
and cycle; we take every id. A ``once`` also counts as its own recovery: a notification is over
when it arrives, and in the original a rule with a release window never released it. A
``recover`` sets the last recovery time even when the device was not known to hold the code.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from bisect import bisect_left, insort
from collections.abc import Callable

from trainguard.faults.device.customization import Customization
from trainguard.faults.device.device_events import (
    Assertion,
    DeviceFaultEvent,
    UpgradeReason,
    UpgradeType,
)
from trainguard.faults.device.fault_codes import CodeKey, code_key
from trainguard.faults.device.fault_duration import DurationTrack, Flip
from trainguard.faults.levels import Level

__all__ = ["Escalation", "EscalationState"]

_FREQUENCY = UpgradeType.FAULT_FREQUENCY
_DURATION = UpgradeType.FAULT_DURATION
_MANUAL = Level.MANUALLY_SEPARATE_NPU

_ReasonKey = tuple[CodeKey, Level, UpgradeType]


@dataclasses.dataclass(frozen=True, slots=True)
class EscalationState:
    """What escalation adds to a device's codes' level; the caller combines the two."""

    chip: Level  # NormalNPU when nothing is raised
    network: Level  # NormalNetwork when nothing is raised
    manually_separated: bool
    reasons: tuple[UpgradeReason, ...]  # the device's UpgradeFaultReason entries
    added: tuple[UpgradeReason, ...]  # reasons recorded since the last evaluation
    removed: tuple[UpgradeReason, ...]  # reasons removed since: one event each in the original


_NORMAL = EscalationState(Level.NORMAL_NPU, Level.NORMAL_NETWORK, False, (), (), ())


class _Frequency:
    """One (event id, device)'s occurrences (seconds, ascending) and last fault and recovery."""

    __slots__ = ("last_fault", "last_recover", "occurrences")

    def __init__(self) -> None:
        self.occurrences = array("d")
        self.last_fault = -math.inf
        self.last_recover = -math.inf

    def occur(self, time: float) -> None:
        occurrences = self.occurrences
        if not occurrences or time >= occurrences[-1]:
            occurrences.append(time)
        else:
            insort(occurrences, time)
        self.last_fault = max(self.last_fault, time)

    def recover(self, time: float) -> None:
        self.last_recover = max(self.last_recover, time)


class _Device:
    __slots__ = ("duration", "frequency", "reasons")

    def __init__(self) -> None:
        self.frequency: dict[CodeKey, _Frequency] = {}
        self.duration: dict[CodeKey, DurationTrack] = {}
        self.reasons: dict[_ReasonKey, UpgradeReason] = {}


class Escalation:
    """Frequency and duration escalation of every device of a node or a cluster."""

    def __init__(self, customization: Customization, *,
                 is_network: Callable[[CodeKey], bool]) -> None:
        self._frequency_rules = customization.frequency
        self._duration_rules = customization.duration
        self._is_network = is_network
        self._devices: dict[str, _Device] = {}
        self._due: dict[str, None] = {}  # an ordered set
        self._changes: dict[str, tuple[list[UpgradeReason], list[UpgradeReason]]] = {}

    def observe(self, event: DeviceFaultEvent, *, key: CodeKey | None = None) -> None:
        """Take a fault event; its effect shows at the next :meth:`evaluate` of its device.
        ``key``: the code's key, when the caller has it already."""
        if key is None:
            key = code_key(event.code)
        if key in self._duration_rules:
            if event.assertion is not Assertion.ONCE:
                durations = self._device(event.device).duration
                track = durations.get(key)
                if track is None:
                    track = durations[key] = DurationTrack()
                track.add(event)
                self._due[event.device] = None
            return
        if key not in self._frequency_rules:
            return
        if event.assertion is Assertion.RECOVER:
            device = self._devices.get(event.device)
            frequency = device.frequency.get(key) if device is not None else None
            if frequency is not None:
                frequency.recover(event.time)
            return
        frequency = self._frequency(self._device(event.device), key)
        frequency.occur(event.time)
        if event.assertion is Assertion.ONCE:
            frequency.recover(event.time)

    def evaluate(self, device: str, now: float) -> EscalationState:
        """Apply the rules to ``device`` at ``now`` (seconds)."""
        state = self._devices.get(device)
        added: list[UpgradeReason] = []
        removed: list[UpgradeReason] = []
        changes = self._changes.pop(device, None) if self._changes else None
        if changes is not None:
            added, removed = changes
        if state is None:
            return self._state({}, added, removed)
        reasons = state.reasons
        pending = remembered = False
        for key, track in state.duration.items():
            duration_rule = self._duration_rules[key]
            if track.pending:
                for flip in track.advance(now, fault_timeout=duration_rule.fault_timeout,
                                          recover_timeout=duration_rule.recover_timeout):
                    self._count(state, key, flip)
                pending = pending or track.pending
            if track.timeout:
                remembered = True
                _raise(reasons, (key, duration_rule.handling, _DURATION), duration_rule.spelling,
                       track.alarm_time, added)
            elif reasons and track.recover_duration > duration_rule.recover_timeout:
                _lower(reasons, key, _DURATION, removed)
        for key, frequency in state.frequency.items():
            rule = self._frequency_rules[key]
            occurrences = frequency.occurrences
            start = now - rule.time_window
            if occurrences and occurrences[0] < start:
                del occurrences[:bisect_left(occurrences, start)]
            if len(occurrences) >= rule.times:
                _raise(reasons, (key, rule.handling, _FREQUENCY), rule.spelling,
                       frequency.last_fault, added)
                del occurrences[:]
            elif (rule.release_window is not None
                  and frequency.last_recover >= frequency.last_fault
                  and now - frequency.last_recover > rule.release_window):
                if reasons:
                    _lower(reasons, key, _FREQUENCY, removed)
            elif reasons and (key, rule.handling, _FREQUENCY) in reasons:
                _raise(reasons, (key, rule.handling, _FREQUENCY), rule.spelling,
                       frequency.last_fault, added)
                del occurrences[:]
            remembered = remembered or bool(occurrences)
        self._tidy(device, state, pending=pending, remembered=remembered or bool(reasons))
        return self._state(reasons, added, removed)

    def release(self, device: str, now: float) -> EscalationState:
        """An operator takes ``device`` out of ManuallySeparateNPU; then :meth:`evaluate`."""
        state = self._devices.get(device)
        released: list[UpgradeReason] = []
        if state is not None:
            for reason_key in [key for key in state.reasons if key[1] is _MANUAL]:
                released.append(state.reasons.pop(reason_key))
        result = self.evaluate(device, now)
        if not released:
            return result
        return dataclasses.replace(result, removed=(*released, *result.removed))

    def reconfigure(self, customization: Customization) -> None:
        """A new configuration; raised levels follow it (see the module docstring). A moved
        reason keeps its time; what changed shows in the next :meth:`evaluate` of each device."""
        self._frequency_rules = customization.frequency
        self._duration_rules = customization.duration
        for name, state in self._devices.items():
            for key in [key for key in state.frequency if key not in self._frequency_rules]:
                del state.frequency[key]
            for key in [key for key in state.duration if key not in self._duration_rules]:
                del state.duration[key]
            added, removed = self._changes.get(name) or ([], [])
            for reason_key in list(state.reasons):
                key, level, kind = reason_key
                if level is _MANUAL or kind is UpgradeType.FAULT_AUTOFILL:
                    continue
                rules = self._frequency_rules if kind is _FREQUENCY else self._duration_rules
                rule = rules.get(key)
                if rule is not None and rule.handling in (level, _MANUAL):
                    continue
                old = state.reasons.pop(reason_key)
                removed.append(old)
                if rule is not None:
                    _raise(state.reasons, (key, rule.handling, kind), rule.spelling,
                           old.upgrade_time, added)
            if added or removed:
                self._changes[name] = (added, removed)

    def devices(self) -> list[str]:
        """Devices with escalation state."""
        return list(self._devices)

    def devices_due(self) -> list[str]:
        """Devices whose state may change with time alone (a pending duration judgment, or a
        frequency reason with a release window): evaluate them as time passes."""
        return list(self._due)

    def _device(self, name: str) -> _Device:
        state = self._devices.get(name)
        if state is None:
            state = self._devices[name] = _Device()
        return state

    def _frequency(self, state: _Device, key: CodeKey) -> _Frequency:
        frequency = state.frequency.get(key)
        if frequency is None:
            frequency = state.frequency[key] = _Frequency()
        return frequency

    def _count(self, state: _Device, key: CodeKey, flip: Flip) -> None:
        """A duration flip is a frequency occurrence (timeout) or recovery (healthy again)."""
        if key not in self._frequency_rules:
            return
        if flip.timeout:
            self._frequency(state, key).occur(flip.alarm_time)
        elif key in state.frequency:
            state.frequency[key].recover(flip.alarm_time)

    def _tidy(self, name: str, state: _Device, *, pending: bool, remembered: bool) -> None:
        """Keep ``_due`` current, and forget a device with nothing left to remember.

        ``pending``: a duration judgment waits; ``remembered``: reasons, a timed-out fault or
        frequency occurrences remain."""
        due = pending or any(
            kind is _FREQUENCY and (rule := self._frequency_rules.get(key)) is not None
            and rule.release_window is not None for key, _, kind in state.reasons)
        if due:
            self._due[name] = None
            return
        self._due.pop(name, None)
        if not remembered:
            del self._devices[name]

    def _state(self, reasons: dict[_ReasonKey, UpgradeReason], added: list[UpgradeReason],
               removed: list[UpgradeReason]) -> EscalationState:
        if not reasons and not added and not removed:
            return _NORMAL
        chip, network, manual = Level.NORMAL_NPU, Level.NORMAL_NETWORK, False
        for key, level, _ in reasons:
            manual = manual or level is _MANUAL
            if self._is_network(key):
                network = level if level.severity > network.severity else network
            elif level.severity > chip.severity:
                chip = level
        return EscalationState(_MANUAL if manual else chip, network, manual,
                               tuple(reasons.values()), tuple(added), tuple(removed))


def _raise(reasons: dict[_ReasonKey, UpgradeReason], reason_key: _ReasonKey, spelling: str,
           time: float, added: list[UpgradeReason]) -> None:
    """Record a reason, or refresh its time."""
    old = reasons.get(reason_key)
    if old is None:
        reason = reasons[reason_key] = UpgradeReason(spelling, reason_key[1], reason_key[2], time)
        added.append(reason)
    elif old.upgrade_time != time:
        reasons[reason_key] = UpgradeReason(spelling, reason_key[1], reason_key[2], time)


def _lower(reasons: dict[_ReasonKey, UpgradeReason], key: CodeKey, kind: UpgradeType,
           removed: list[UpgradeReason]) -> None:
    """Remove ``key``'s reasons of ``kind``, whatever their level."""
    for reason_key in [each for each in reasons if each[0] == key and each[2] is kind]:
        removed.append(reasons.pop(reason_key))
