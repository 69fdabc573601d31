"""The devices' fault history in the controller's store, so escalation outlives the controller.

FaultFrequency counts occurrences over hours and ManuallySeparateNPU holds a device until an
operator releases it: state a restarted controller must not forget (a memory error before the
restart and one after it are two). The engine is deterministic, so what is stored is its
input: per device, the events reported, the operator's releases, and the evaluations that
changed something (a duration judgment or a release window that time alone decided). A new
controller replays them, in time order, under the configuration in force when it starts.

A device's records go once it has nothing left to remember (no current fault, no escalation
state, a normal level), and only its newest :data:`KEPT` are kept. Writes trail the engine
(:class:`~trainguard.store.trailing.TrailingWriter`): the engine never waits for the store,
and while the store cannot be reached the records wait and are written when it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import logging
from collections.abc import AsyncIterator

from trainguard.faults.device import customization as customizations
from trainguard.faults.device import device_health, fault_codes
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.store import kv, trailing

__all__ = ["KEPT", "PREFIX", "Action", "DeviceFaultHistory", "HistoryRecord", "kept"]

logger = logging.getLogger(__name__)

PREFIX = "faults/devices/"
"""Each device's records are the JSON list under ``PREFIX + device``."""
KEPT = 1000
"""Records kept per device, the newest."""
FLUSH_TIMEOUT = 10.0
"""Seconds the last writes may take when the history is put away."""


class Action(enum.StrEnum):
    REPORT = "report"
    RELEASE = "release"
    EVALUATE = "evaluate"


@dataclasses.dataclass(frozen=True)
class HistoryRecord:
    """One input of the engine: ``code``/``assertion``/``severity`` belong to a report."""

    time: float
    action: Action
    code: str = ""
    assertion: str = ""
    severity: int | None = None

    def to_data(self) -> dict[str, object]:
        data: dict[str, object] = {"time": self.time, "action": str(self.action)}
        if self.action is Action.REPORT:
            data.update(code=self.code, assertion=self.assertion)
            if self.severity is not None:
                data["severity"] = self.severity
        return data

    @classmethod
    def from_data(cls, data: object, *, where: str) -> HistoryRecord:
        """Raises: ValueError naming ``where`` and the field."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: a record must be an object, got {data!r}")
        try:
            record = cls(time=float(data["time"]), action=Action(data["action"]),
                         code=str(data.get("code", "")), assertion=str(data.get("assertion", "")),
                         severity=data.get("severity"))
            if record.action is Action.REPORT:
                Assertion(record.assertion)
        except KeyError as error:
            raise ValueError(f"{where}: field {error.args[0]!r} is missing") from error
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}: {error}") from error
        return record


class DeviceFaultHistory(device_health.FaultEngine):
    """A fault engine whose every input is recorded in ``store`` (and replayed by :meth:`load`)."""

    def __init__(self, store: kv.KeyValueStore, *, table: fault_codes.CodeTable | None = None,
                 customization: customizations.Customization | None = None,
                 fence: kv.Fence | None = None) -> None:
        super().__init__(table=table, customization=customization)
        self._records: dict[str, list[HistoryRecord]] = {}
        self.writer = trailing.TrailingWriter(store, what="the device fault history",
                                              fence=fence)

    @classmethod
    async def load(cls, store: kv.KeyValueStore, *, table: fault_codes.CodeTable | None = None,
                   customization: customizations.Customization | None = None,
                   fence: kv.Fence | None = None) -> DeviceFaultHistory:
        """The engine as the records in ``store`` left it; ``fence``: its writes hold only
        while it stands (a controller's leadership).

        Raises:
            kv.UnavailableError: the store cannot be read.
        """
        history = cls(store, table=table, customization=customization, fence=fence)
        listing = await store.list(PREFIX)
        merged: list[tuple[float, int, str, HistoryRecord]] = []
        for entry in listing.entries:
            device = entry.key[len(PREFIX):]
            try:
                data = json.loads(entry.value)
                records = [HistoryRecord.from_data(item, where=f"{entry.key}[{index}]")
                           for index, item in enumerate(data)]
            except (ValueError, TypeError) as error:
                # One damaged device's history must not cost every other's.
                logger.warning("device fault history of %s unreadable, forgotten: %s",
                               device, error)
                continue
            history._records[device] = records
            merged.extend((record.time, index, device, record)
                          for index, record in enumerate(records))
        merged.sort(key=lambda item: item[:2])
        for _, _, device, record in merged:
            history._apply(device, record)
        remembered = set(history.devices())
        for device in [device for device in history._records if device not in remembered]:
            del history._records[device]  # aged out meanwhile: forgotten
            history.writer.set(PREFIX + device, None)
        logger.info("device fault history: %d records of %d devices replayed", len(merged),
                    len(history._records))
        return history

    def _apply(self, device: str, record: HistoryRecord) -> None:
        if record.action is Action.REPORT:
            severity = (fault_codes.Severity(record.severity) if record.severity is not None
                        else None)
            super().report(DeviceFaultEvent(device, record.code, Assertion(record.assertion),
                                            record.time, severity=severity))
        elif record.action is Action.RELEASE:
            super().release(device, record.time)
        else:
            super().health(device, record.time)

    # --- the engine's inputs, recorded --------------------------------------------------------

    def report(self, event: DeviceFaultEvent) -> device_health.DeviceHealth:
        health = super().report(event)
        self._note(event.device, HistoryRecord(
            event.time, Action.REPORT, event.code, str(event.assertion),
            int(event.severity) if event.severity is not None else None))
        return health

    def release(self, device: str, now: float) -> device_health.DeviceHealth:
        health = super().release(device, now)
        self._note(device, HistoryRecord(now, Action.RELEASE))
        return health

    def health(self, device: str, now: float) -> device_health.DeviceHealth:
        health = super().health(device, now)
        if health.changed or (self._records.get(device) and device not in self.devices()):
            self._note(device, HistoryRecord(now, Action.EVALUATE))
        return health

    def _note(self, device: str, record: HistoryRecord) -> None:
        if device not in self.devices():  # nothing left to remember: the store forgets it too
            self._records.pop(device, None)
            self.writer.set(PREFIX + device, None)
            return
        records = self._records.setdefault(device, [])
        records.append(record)
        del records[:-KEPT]
        self.writer.set(PREFIX + device, json.dumps(
            [record.to_data() for record in records]).encode())


@contextlib.asynccontextmanager
async def kept(store: kv.KeyValueStore, *, table: fault_codes.CodeTable | None = None,
               customization: customizations.Customization | None = None,
               fence: kv.Fence | None = None) -> AsyncIterator[DeviceFaultHistory]:
    """The history in ``store``, written as it changes, and what is left written at the end
    if the store answers in time (otherwise a warning says how much was not).

    Raises:
        kv.UnavailableError: the store cannot be read.
    """
    history = await DeviceFaultHistory.load(store, table=table, customization=customization,
                                            fence=fence)
    writer = asyncio.create_task(history.writer.run(), name="trainguard-fault-history")
    try:
        yield history
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
        if history.writer.unwritten and not history.writer.deposed.is_set():
            try:
                await asyncio.wait_for(history.writer.flush(), FLUSH_TIMEOUT)
            except (TimeoutError, kv.UnavailableError, kv.FencedError) as error:
                logger.warning("the device fault history of %d devices could not be written: "
                               "%s", history.writer.unwritten, error or "timed out")
