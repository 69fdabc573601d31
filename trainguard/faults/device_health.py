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
from collections.abc import Iterable, Mapping

from trainguard.faults import customization as customizations
from trainguard.faults import escalation, fault_codes
from trainguard.faults.device_events import Assertion, DeviceFaultEvent, UpgradeReason
from trainguard.faults.levels import FaultType, Level, ResetPolicy, most_serious, reset_policy

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
    entries: tuple[FaultEntry, ...]
    reasons: tuple[UpgradeReason, ...]  # the device's UpgradeFaultReason entries
    manually_separated: bool
    added: tuple[UpgradeReason, ...] = ()  # reasons this evaluation recorded
    removed: tuple[UpgradeReason, ...] = ()  # reasons this evaluation removed
    previous: Level = Level.NORMAL_NPU  # the level the last evaluation handed over

    @property
    def changed(self) -> bool:
        """The level, or its reasons, changed since the last evaluation."""
        return self.level is not self.previous or bool(self.added or self.removed)

    @property
    def reset_policy(self) -> ResetPolicy:
        return reset_policy(self.level)

    @property
    def fault_type(self) -> FaultType | None:
        """The part whose level is the device's; None when the device is healthy."""
        worst = max(self.entries, key=lambda entry: entry.fault_level.severity, default=None)
        return worst.fault_type if worst is not None and self.level.is_fault else None

    @property
    def allows_in_place(self) -> bool:
        return allows_in_place(self.level)


class FaultEngine:
    """Every device's current faults and escalation state, on one node or a whole cluster."""

    def __init__(self, *, table: fault_codes.CodeTable | None = None,
                 customization: customizations.Customization | None = None) -> None:
        self._table = table or fault_codes.default_table()
        self._escalation = escalation.Escalation(
            customization or customizations.default_customization(),
            is_network=self._is_network)
        self._current: dict[str, dict[fault_codes.CodeKey, tuple[str, float]]] = {}
        self._once: dict[str, set[fault_codes.CodeKey]] = {}
        self._levels: dict[str, Level] = {}

    def _is_network(self, key: fault_codes.CodeKey) -> bool:
        """Through the table in force, which a reconfiguration replaces."""
        return self._table.is_network(key)

    @property
    def table(self) -> fault_codes.CodeTable:
        return self._table

    def report(self, event: DeviceFaultEvent) -> DeviceHealth:
        """Take a device's fault event; its health at the event's time."""
        key = fault_codes.code_key(event.code)
        current = self._current.setdefault(event.device, {})
        if event.assertion is Assertion.RECOVER:
            current.pop(key, None)
        elif key not in current:
            current[key] = (event.code.strip(), event.time)
            if event.assertion is Assertion.ONCE:
                self._once.setdefault(event.device, set()).add(key)
        self._escalation.observe(event)
        return self.health(event.device, event.time)

    def health(self, device: str, now: float) -> DeviceHealth:
        """The device's health at ``now``; ``once`` codes count here for the last time."""
        state = self._escalation.evaluate(device, now)
        current = self._current.get(device, {})
        health = self._health(device, current, state)
        for key in self._once.pop(device, ()):
            current.pop(key, None)
        return health

    def release(self, device: str, now: float) -> DeviceHealth:
        """An operator takes the device out of ManuallySeparateNPU."""
        state = self._escalation.release(device, now)
        return self._health(device, self._current.get(device, {}), state)

    def reconfigure(self, *, table: fault_codes.CodeTable,
                    customization: customizations.Customization) -> None:
        """New configuration at run time: later evaluations use it (NOTES §2.3)."""
        self._table = table
        self._escalation.reconfigure(customization)

    def devices(self) -> Iterable[str]:
        """Devices with current faults or escalation state."""
        return set(self._current) | set(self._escalation.devices()) | set(self._levels)

    def devices_due(self) -> list[str]:
        """Devices whose level time alone can change: evaluate them as time passes."""
        return self._escalation.devices_due()

    def _health(self, device: str, current: Mapping[fault_codes.CodeKey, tuple[str, float]],
                state: escalation.EscalationState) -> DeviceHealth:
        table = self._table
        raised: dict[fault_codes.CodeKey, Level] = {}
        for reason in state.reasons:
            code = fault_codes.code_key(reason.fault_code)
            raised[code] = most_serious((raised.get(code, Level.NORMAL_NPU), reason.fault_level))
        chip_codes = [key for key in current if not table.is_network(key)]
        network_codes = [key for key in current if table.is_network(key)]
        chip = most_serious((table.chip_level(chip_codes), state.chip))
        network = most_serious((table.network_level(network_codes), state.network))
        level = most_serious((chip, network)) if chip.is_fault or network.is_fault else (
            Level.NORMAL_NPU)
        previous = self._levels.get(device, Level.NORMAL_NPU)
        if level.is_fault:
            self._levels[device] = level
        else:
            self._levels.pop(device, None)
        entries = []
        for fault_type, codes, part, own in (
                (FaultType.CARD_UNHEALTHY, chip_codes, chip, table.chip_level),
                (FaultType.CARD_NETWORK_UNHEALTHY, network_codes, network,
                 table.network_level)):
            if not codes and not part.is_fault:
                continue
            entries.append(FaultEntry(fault_type, device, part, {
                current[key][0]: (current[key][1],
                                  most_serious((own([key]), raised.get(key, Level.NORMAL_NPU))))
                for key in codes}))
        return DeviceHealth(
            device=device, level=level, chip_level=chip, network_level=network,
            entries=tuple(entries), reasons=state.reasons,
            manually_separated=state.manually_separated, added=state.added,
            removed=state.removed, previous=previous)
