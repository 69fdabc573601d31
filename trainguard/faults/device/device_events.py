"""What a device reports, and why its level was raised: the values the fault engine passes around.

Times are seconds on one clock chosen by the caller (wall-clock seconds for a real device, the
timeline's seconds for a replay); the engine never reads a clock itself.
"""

from __future__ import annotations

import dataclasses
import enum

from trainguard.faults.device.fault_codes import Severity
from trainguard.faults.levels import Level

__all__ = ["Assertion", "DeviceFaultEvent", "UpgradeReason", "UpgradeType"]


class Assertion(enum.StrEnum):
    """A fault event's assertion, as devices and senders report it."""

    OCCUR = "occur"  # the fault is present from now on
    RECOVER = "recover"  # the fault is gone
    ONCE = "once"  # a notification: present for one evaluation, then gone


@dataclasses.dataclass(frozen=True)
class DeviceFaultEvent:
    device: str  # e.g. "npu-3"; any name unique on its node
    code: str  # as reported; its spelling is kept for display
    assertion: Assertion
    time: float  # seconds: when the device raised the alarm
    severity: Severity | None = None  # as the device reported it; decides an unknown code
    level: Level | None = None
    """The code's level as its sender's configuration gives it (a public fault's, from
    publicFaultConfiguration.json), used instead of the device code table's."""


class UpgradeType(enum.StrEnum):
    """Why a device's level is above its codes' level (the ConfigMap's ``upgrade_type``)."""

    FAULT_FREQUENCY = "FaultFrequency"
    FAULT_DURATION = "FaultDuration"
    FAULT_AUTOFILL = "FaultAutofill"  # ManuallySeparateNPU found without a recorded reason


@dataclasses.dataclass(frozen=True)
class UpgradeReason:
    """One entry of ``UpgradeFaultReason``: the code, the level it raised the device to, how,
    and when (seconds)."""

    fault_code: str
    fault_level: Level
    upgrade_type: UpgradeType
    upgrade_time: float

    def to_data(self) -> dict[str, object]:
        return {"fault_code": self.fault_code, "fault_level": str(self.fault_level),
                "upgrade_type": str(self.upgrade_type), "upgrade_time": self.upgrade_time}
