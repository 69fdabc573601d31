"""A device's health from its current faults: what handling consumes (SPEC D2, D3, D5, H8).

The engine keeps each device's current fault codes (an ``occur`` adds one, a ``recover`` removes
it, a ``once`` counts for one evaluation) and their escalation history, and hands over, for each
device, what the original's device plugin writes to its device-info ConfigMap: the level, the
reset.json policy, and one entry per unhealthy part (``CardUnhealthy`` for the chip's codes,
``CardNetworkUnhealthy`` for its parameter-plane network codes) with every code's level.

The level of a chip is the most serious of its codes' level (:mod:`.fault_codes`), of what
frequency and duration rules raised it to, and of ManuallySeparateNPU (:mod:`.escalation`).
Handling reads :attr:`DeviceHealth.level`: a device at RestartBusiness or below may keep its
process on it (NOTES §4.6: L1-L3 are recovered in place); anything above takes it out of use.
A retry in the step needs, in addition, a code that a retry is known to clear (NOTES §4.6: the
uncorrectable memory error and the HCCL retry error).

Pure: time is passed in; the caller chooses the clock (wall seconds for devices).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from trainguard.faults.device import customization as customizations
from trainguard.faults.device import escalation, fault_codes
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent, UpgradeReason
from trainguard.faults.levels import (
    SEVERITY,
    FaultType,
    Level,
    ResetPolicy,
    most_serious,
    reset_policy,
)

__all__ = ["RETRY_CODES", "DeviceHealth", "FaultEngine", "FaultEntry", "allows_in_place"]

RETRY_CODES = frozenset({0x80E01801, 0x8C1F860B})
"""Codes a step retry is known to clear: the uncorrectable memory error (UCE) and the HCCL
retry error; handling retries the step for these only."""


def allows_in_place(level: Level) -> bool:
    """Whether a process may be restarted on a device at this level."""
    return level.severity <= Level.RESTART_BUSINESS.severity


@dataclasses.dataclass(frozen=True)
class FaultEntry:
    """One unhealthy part of a device: one element of the ConfigMap's ``-Fault`` list."""

    fault_type: FaultType
    npu_name: str
    fault_level: Level
    codes: Mapping[str, tuple[float, Level]]
    """Each current code (its configured spelling) -> (when it occurred, seconds; its level)."""

    def to_data(self) -> dict[str, object]:
        """The original's shape: times in milliseconds, the level under all three names."""
        return {
            "fault_type": str(self.fault_type), "npu_name": self.npu_name,
            "large_model_fault_level": str(self.fault_level),
            "fault_level": str(self.fault_level), "fault_handling": str(self.fault_level),
            "fault_code": ",".join(self.codes),
            "fault_time_and_level_map": {
                code: {"fault_time": round(time * 1000), "fault_level": str(level)}
                for code, (time, level) in self.codes.items()},
        }


@dataclasses.dataclass(frozen=True)
class DeviceHealth:
    device: str
    level: Level  # the most serious of the chip's and its network's
    chip_level: Level
    network_level: Level
    escalation: escalation.EscalationState  # what its history adds
    previous: Level = Level.NORMAL_NPU  # the level the last evaluation handed over
    codes: tuple[_Code, ...] = ()  # the current codes
    node_entries: tuple[FaultEntry, ...] = ()  # its node's faults (:mod:`.node_health`)

    @property
    def reasons(self) -> tuple[UpgradeReason, ...]:
        """The device's UpgradeFaultReason entries."""
        return self.escalation.reasons

    @property
    def added(self) -> tuple[UpgradeReason, ...]:
        """Reasons this evaluation recorded."""
        return self.escalation.added

    @property
    def removed(self) -> tuple[UpgradeReason, ...]:
        """Reasons this evaluation removed (the original records an event for each)."""
        return self.escalation.removed

    @property
    def manually_separated(self) -> bool:
        return self.escalation.manually_separated

    @property
    def changed(self) -> bool:
        """The level, or its reasons, changed since the last evaluation."""
        escalated = self.escalation
        return self.level is not self.previous or bool(escalated.added or escalated.removed)

    @property
    def reset_policy(self) -> ResetPolicy:
        return reset_policy(self.level)

    @functools.cached_property
    def entries(self) -> tuple[FaultEntry, ...]:
        """One entry per unhealthy part, each code with its own level (raised by reasons)."""
        raised: dict[fault_codes.CodeKey, Level] = {}
        for reason in self.reasons:
            code = fault_codes.code_key(reason.fault_code)
            raised[code] = most_serious((raised.get(code, Level.NORMAL_NPU), reason.fault_level))
        entries = []
        for fault_type, network, part in (
                (FaultType.CARD_UNHEALTHY, False, self.chip_level),
                (FaultType.CARD_NETWORK_UNHEALTHY, True, self.network_level)):
            codes = [code for code in self.codes if code.network is network]
            if codes or part.is_fault:
                entries.append(FaultEntry(fault_type, self.device, part, {
                    code.spelling: (code.time, most_serious(
                        (code.level, raised.get(code.key, Level.NORMAL_NPU))))
                    for code in codes}))
        return (*entries, *self.node_entries)

    @property
    def fault_type(self) -> FaultType | None:
        """The part whose level is the device's; None when the device is healthy."""
        worst = max(self.entries, key=lambda entry: SEVERITY[entry.fault_level], default=None)
        return worst.fault_type if worst is not None and self.level.is_fault else None

    @property
    def allows_in_place(self) -> bool:
        return allows_in_place(self.level)


class _Code(NamedTuple):
    key: fault_codes.CodeKey
    spelling: str
    time: float
    network: bool
    level: Level  # its own level; SeparateNPU or NotHandleFault by severity when unknown
    listed: bool  # the table knows it (an unknown code counts only when none is known)
    given: bool = False  # its level came with it (a public fault's): no table changes it


class FaultEngine:
    """Every device's current faults and escalation state, on one node or a whole cluster."""

    def __init__(self, *, table: fault_codes.CodeTable | None = None,
                 customization: customizations.Customization | None = None) -> None:
        self._table = table or fault_codes.default_table()
        self._escalation = escalation.Escalation(
            customization or customizations.default_customization(),
            is_network=self._is_network)
        self._current: dict[str, dict[fault_codes.CodeKey, _Code]] = {}
        self._levels: dict[str, Level] = {}
        self._known: dict[fault_codes.CodeKey, tuple[bool, Level | None]] = {}
        self._severities: dict[fault_codes.CodeKey, fault_codes.Severity] = {}

    def _is_network(self, key: fault_codes.CodeKey) -> bool:
        """Through the table in force (escalation asks; a reconfiguration replaces it)."""
        return self._lookup(key)[0]

    @property
    def table(self) -> fault_codes.CodeTable:
        return self._table

    def _lookup(self, key: fault_codes.CodeKey) -> tuple[bool, Level | None]:
        """Whether the code is a network code, and its level in the table (None: unknown)."""
        known = self._known.get(key)
        if known is None:
            table = self._table
            if table.is_network(key):
                known = (True, table.network_level([key]))
            else:
                known = (False, table.chip.get(key))
            self._known[key] = known
        return known

    def report(self, event: DeviceFaultEvent) -> DeviceHealth:
        """Take a device's fault event; its health at the event's time."""
        key = fault_codes.code_key(event.code)
        device = event.device
        if event.severity is not None:
            self._severities[key] = event.severity
        current = self._current.get(device)
        once = False  # a notification: the code counts for this evaluation only
        if event.assertion is Assertion.RECOVER:
            if current is not None:
                current.pop(key, None)
                if not current:
                    del self._current[device]
        elif current is None or key not in current:
            network, level = self._lookup(key)
            if event.level is not None:
                network, level = False, event.level
            if current is None:
                current = self._current[device] = {}
            spelling = self._table.spellings.get(key) or event.code.strip()
            current[key] = _Code(key, spelling, event.time, network,
                                 level if level is not None else self._by_severity(key),
                                 level is not None, given=event.level is not None)
            once = event.assertion is Assertion.ONCE
        self._escalation.observe(event, key=key)
        health = self._health(device, self._escalation.evaluate(device, event.time))
        if once and current is not None:
            current.pop(key)
            if not current:
                del self._current[device]
        return health

    def _by_severity(self, key: fault_codes.CodeKey) -> Level:
        """An unknown chip code's own level: above Minor, or unknown, is SeparateNPU. The
        severity last reported for the code counts, on any device, as in the original (whose
        severities are kept per event id)."""
        severity = self._severities.get(key)
        return (Level.SEPARATE_NPU if severity is None or severity > fault_codes.Severity.MINOR
                else Level.NOT_HANDLE_FAULT)

    def health(self, device: str, now: float) -> DeviceHealth:
        """The device's health at ``now``."""
        return self._health(device, self._escalation.evaluate(device, now))

    def release(self, device: str, now: float) -> DeviceHealth:
        """An operator takes the device out of ManuallySeparateNPU."""
        return self._health(device, self._escalation.release(device, now))

    def reconfigure(self, *, table: fault_codes.CodeTable,
                    customization: customizations.Customization) -> None:
        """New configuration at run time: later evaluations use it, for the codes devices
        already hold too (NOTES §2.3)."""
        self._table = table
        self._known.clear()
        for current in self._current.values():
            for key, code in current.items():
                if code.given:
                    continue
                network, level = self._lookup(key)
                current[key] = code._replace(
                    network=network, listed=level is not None,
                    level=level if level is not None else self._by_severity(key))
        self._escalation.reconfigure(customization)

    def devices(self) -> Iterable[str]:
        """Devices with current faults, escalation state or a level above normal."""
        return set(self._current) | set(self._escalation.devices()) | set(self._levels)

    def sweep(self, now: float, *, due_only: bool = False) -> list[DeviceHealth]:
        """Evaluate every device with state (or only those time alone can change) at ``now``,
        in name order, as a device plugin does on its polling period: the healths that
        changed."""
        devices = self.devices_due() if due_only else self.devices()
        return [health for health in (self.health(device, now) for device in sorted(devices))
                if health.changed]

    def devices_due(self) -> list[str]:
        """Devices whose level time alone can change: evaluate them as time passes."""
        return self._escalation.devices_due()

    def _health(self, device: str, state: escalation.EscalationState) -> DeviceHealth:
        chip, network = state.chip, state.network
        current = self._current.get(device)
        codes: tuple[_Code, ...] = ()
        if current:
            codes = tuple(current.values())
            listed: Level | None = None  # the worst listed chip code
            unlisted: Level | None = None  # counts only when no chip code is listed
            for code in codes:
                severity = SEVERITY[code.level]
                if code.network:
                    if severity > SEVERITY[network]:
                        network = code.level
                elif code.listed:
                    if listed is None or severity > SEVERITY[listed]:
                        listed = code.level
                elif unlisted is None or severity > SEVERITY[unlisted]:
                    unlisted = code.level
            own = listed if listed is not None else unlisted
            if own is not None and SEVERITY[own] > SEVERITY[chip]:
                chip = own
        chip_severity, network_severity = SEVERITY[chip], SEVERITY[network]
        if chip_severity == 0 and network_severity == 0:
            level = Level.NORMAL_NPU
        else:
            level = chip if chip_severity >= network_severity else network
        previous = self._levels.get(device, Level.NORMAL_NPU)
        if level is not previous:
            if level is Level.NORMAL_NPU:
                del self._levels[device]
            else:
                self._levels[device] = level
        return DeviceHealth(device, level, chip, network, state, previous, codes)
