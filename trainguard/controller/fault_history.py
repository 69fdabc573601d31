"""The devices' fault history in the controller's store, so escalation outlives the controller.

FaultFrequency counts occurrences over hours and ManuallySeparateNPU holds a device until an
operator releases it: state a restarted controller must not forget (a memory error before the
restart and one after it are two). The engine is deterministic, so what is stored is its
input: per device, the events reported, the operator's releases, and the evaluations that
changed something (a duration judgment or a release window that time alone decided). A new
controller replays them, in time order, under the configuration in force when it starts.

A device's records go once it has nothing left to remember (no current fault, no escalation
state, a normal level), and only its newest :data:`KEPT` are kept. Writes trail the engine:
each change marks its device, and :meth:`DeviceFaultHistory.run` writes the marked devices'
records. While the store cannot be reached, the changes wait and are written when it answers
again, newest state only; the engine keeps working meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import logging
from collections.abc import AsyncIterator, Iterable

from trainguard.faults.device import customization as customizations
from trainguard.faults.device import device_health, fault_codes
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.store import kv

__all__ = ["KEPT", "PREFIX", "Action", "DeviceFaultHistory", "HistoryRecord", "kept"]

logger = logging.getLogger(__name__)

PREFIX = "faults/devices/"
"""Each device's records are the JSON list under ``PREFIX + device``."""
KEPT = 1000
"""Records kept per device, the newest."""
RETRY_SECONDS = 1.0
"""Pause between attempts to write while the store cannot be reached."""
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
                 customization: customizations.Customization | None = None) -> None:
        super().__init__(table=table, customization=customization)
        self._store = store
        self._records: dict[str, list[HistoryRecord]] = {}
        self._marked: dict[str, int] = {}
        """Devices whose newest records the store lacks, in order, each with its change's
        number: a write clears the mark only if no change came while it was under way."""
        self._changes = 0
        self._marking = asyncio.Event()
        self._unreachable_since: float | None = None

    @classmethod
    async def load(cls, store: kv.KeyValueStore, *, table: fault_codes.CodeTable | None = None,
                   customization: customizations.Customization | None = None
                   ) -> DeviceFaultHistory:
        """The engine as the records in ``store`` left it.

        Raises:
            kv.UnavailableError: the store cannot be read.
        """
        history = cls(store, table=table, customization=customization)
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
            history._records[device].clear()  # aged out meanwhile: forgotten at the next write
            history._mark(device)
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
        records = self._records.setdefault(device, [])
        records.append(record)
        del records[:-KEPT]
        if device not in self.devices():
            records.clear()  # nothing left to remember: the store forgets it too
        self._mark(device)

    def _mark(self, device: str) -> None:
        self._changes += 1
        self._marked[device] = self._changes
        self._marking.set()

    # --- writing ------------------------------------------------------------------------------

    @property
    def unwritten(self) -> int:
        """Devices whose newest records the store does not hold yet."""
        return len(self._marked)

    async def run(self) -> None:
        """Write marked devices' records until cancelled, retrying while the store is away."""
        while True:
            await self._marking.wait()
            self._marking.clear()
            await self._write(list(self._marked))

    async def flush(self) -> None:
        """Write what is marked now, once.

        Raises:
            kv.UnavailableError: the store cannot be reached (nothing is lost: still marked).
        """
        await self._write(list(self._marked), retry=False)

    async def _write(self, devices: Iterable[str], *, retry: bool = True) -> None:
        for device in devices:
            while (change := self._marked.get(device)) is not None:
                records = [record.to_data() for record in self._records.get(device, [])]
                try:
                    if records:
                        await self._store.put(PREFIX + device, json.dumps(records).encode())
                    else:
                        await self._store.delete(PREFIX + device)
                except kv.UnavailableError as error:
                    if not retry:
                        raise
                    self._say_unreachable(error)
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
                self._say_reachable()
                if self._marked.get(device) == change:
                    del self._marked[device]
                    if not records:
                        self._records.pop(device, None)

    def _say_unreachable(self, error: Exception) -> None:
        if self._unreachable_since is None:
            self._unreachable_since = asyncio.get_running_loop().time()
            logger.warning("the store cannot be reached (%s): the device fault history of %d "
                           "devices waits, and is written when it answers", error,
                           len(self._marked))

    def _say_reachable(self) -> None:
        if self._unreachable_since is not None:
            waited = asyncio.get_running_loop().time() - self._unreachable_since
            self._unreachable_since = None
            logger.warning("the store answers again after %.1f s: device fault history "
                           "written", waited)


@contextlib.asynccontextmanager
async def kept(store: kv.KeyValueStore, *, table: fault_codes.CodeTable | None = None,
               customization: customizations.Customization | None = None
               ) -> AsyncIterator[DeviceFaultHistory]:
    """The history in ``store``, written as it changes, and what is left written at the end
    if the store answers in time (otherwise a warning says how much was not).

    Raises:
        kv.UnavailableError: the store cannot be read.
    """
    history = await DeviceFaultHistory.load(store, table=table, customization=customization)
    writer = asyncio.create_task(history.run(), name="trainguard-fault-history")
    try:
        yield history
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
        if history.unwritten:
            try:
                await asyncio.wait_for(history.flush(), FLUSH_TIMEOUT)
            except (TimeoutError, kv.UnavailableError) as error:
                logger.warning("the device fault history of %d devices could not be written: "
                               "%s", history.unwritten, error or "timed out")
