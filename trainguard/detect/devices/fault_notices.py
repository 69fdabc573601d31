"""The event the original's device plugin records for each device fault it sees (SPEC D1; the
seed's table 6), as a plain record the agent logs and sends.

Fields, with the seed's names in :meth:`FaultNotice.to_data`: ``type`` (always Warning),
``reason`` (Occur, Recovery or Notice, for an occur, recover or once event), ``action`` (the
fault's level), ``message`` (node, device, what happened, code and level), ``source`` (the
node), ``eventTime`` (ISO-8601 UTC), ``reportingComponent`` (always device-plugin) and
``reportingInstance`` (who reports: the agent).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import ClassVar

from trainguard import clock as clocks
from trainguard.faults.device import fault_codes
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level

__all__ = ["FaultNotice", "Reason", "fault_level", "fault_notice"]


class Reason(enum.StrEnum):
    OCCUR = "Occur"
    RECOVERY = "Recovery"
    NOTICE = "Notice"


_REASONS = {Assertion.OCCUR: Reason.OCCUR, Assertion.RECOVER: Reason.RECOVERY,
            Assertion.ONCE: Reason.NOTICE}
_HAPPENED = {Reason.OCCUR: "occurred", Reason.RECOVERY: "recovered", Reason.NOTICE: "notified"}


@dataclasses.dataclass(frozen=True)
class FaultNotice:
    TYPE: ClassVar[str] = "Warning"
    COMPONENT: ClassVar[str] = "device-plugin"
    reason: Reason
    action: Level  # the fault's level
    node: str
    device: str  # its public name, e.g. "Ascend910-3"
    code: str
    time: float  # wall seconds: when the device raised it
    instance: str  # the reporting instance

    @property
    def message(self) -> str:
        return (f"node {self.node}, device {self.device}: fault {self.code} "
                f"{_HAPPENED[self.reason]}, level {self.action}")

    def to_data(self) -> dict[str, object]:
        return {"type": self.TYPE, "reason": str(self.reason), "action": str(self.action),
                "message": self.message, "source": {"host": self.node},
                "eventTime": clocks.iso_utc(self.time),
                "reportingComponent": self.COMPONENT, "reportingInstance": self.instance}


def fault_level(event: DeviceFaultEvent, table: fault_codes.CodeTable) -> Level:
    """The level of the event's code alone: the one its sender gave, else the table's, or,
    for a code it does not know, the one its reported severity gives."""
    if event.level is not None:  # its sender's (a public fault's)
        return event.level
    key = fault_codes.code_key(event.code)
    if table.is_network(key):
        return table.network_level([key])
    severities = {key: event.severity} if event.severity is not None else None
    return table.chip_level([key], severities)


def fault_notice(event: DeviceFaultEvent, *, table: fault_codes.CodeTable, node: str,
                 device: str, instance: str) -> FaultNotice:
    """The record of one event of a device; ``device`` is its public name."""
    return FaultNotice(_REASONS[event.assertion], fault_level(event, table), node, device,
                       event.code, event.time, instance)
