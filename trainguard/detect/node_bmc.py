"""The BMC's hardware alarms, read through ``ipmitool`` (SPEC D6).

The original's NodeD asks the BMC for its current alarms with vendor commands, each alarm an
8-hex-digit event code. ``ipmitool`` offers no such list on every BMC, so this reads the
standard System Event Log instead, in ``ipmitool -v sel list``'s verbose form (one block of
``Key : Value`` lines per record: ``Sensor Type``, ``Sensor Number``, ``Event Direction``,
``Event Data``, ...). An alarm is present from its Assertion Event until a Deassertion Event of
the same sensor and offset, or until the operator clears the log (``ipmitool sel clear``).

Its code is built from the record as ``<sensor type><00><00><event offset>`` in hex (the offset
is the low four bits of event data byte 1): a power supply failure (type 0x08, offset 1) is
``08000001``. Several codes of the shipped NodeDConfiguration.json read as that layout; the
original's codes come from the vendor's BMC, so which ones agree is not verified. Codes in no
list of the configuration are dropped, as the original drops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shutil
import signal
from collections.abc import Sequence

from trainguard.faults.node.node_faults import NodeFaultDevice

__all__ = ["BmcUnavailableError", "IpmitoolBmc", "SelRecord", "current_alarms",
           "parse_sel_verbose"]

_SENSOR_TYPES = (
    "reserved", "temperature", "voltage", "current", "fan", "physicalsecurity",
    "platformsecurity", "processor", "powersupply", "powerunit", "coolingdevice", "other",
    "memory", "driveslotbay", "postmemoryresize", "systemfirmware", "eventloggingdisabled",
    "watchdog1", "systemevent", "criticalinterrupt", "button", "moduleboard",
    "microcontroller", "addincard", "chassis", "chipset", "otherfru", "cableinterconnect",
    "terminator", "systembootinitiated", "booterror", "osboot", "oscriticalstop",
    "slotconnector", "systemacpipowerstate", "watchdog2", "platformalert", "entitypresence",
    "monitorasic", "lan", "managementsubsyshealth", "battery", "sessionaudit",
    "versionchange", "frustate")
"""IPMI sensor types 0x00..0x2C, by name as ipmitool prints them, lower case without spaces
or punctuation (ipmitool's spellings vary between releases: "Drive Slot / Bay",
"Drive Slot (Bay)")."""
_TYPE_ALIASES = {"physicalsecuritychassisintrusion": 0x05,
                 "platformsecurityviolationattempt": 0x06, "platformsecurityviolation": 0x06,
                 "otherunitsbasedsensor": 0x0B, "systemfirmwareprogress": 0x0F,
                 "systemfirmwares": 0x0F, "buttonswitch": 0x14,
                 "microcontrollercoprocessor": 0x16, "monitorasicic": 0x26,
                 "managementsubsystemhealth": 0x28}
_HEX_IN_NAME = re.compile(r"\(0x([0-9a-fA-F]{2})\)")


class BmcUnavailableError(Exception):
    """The BMC cannot be read; the node document then shows node health only."""


@dataclasses.dataclass(frozen=True)
class SelRecord:
    """One standard record of the event log: what an alarm's code and device are built from."""

    record_id: str
    sensor_type_name: str  # as printed
    sensor_type: int
    sensor_number: int
    asserted: bool  # an Assertion Event (False: a Deassertion Event)
    offset: int  # low four bits of event data byte 1

    @property
    def code(self) -> str:
        return f"{self.sensor_type:02X}0000{self.offset:02X}"


def _sensor_type(name: str) -> int | None:
    found = _HEX_IN_NAME.search(name)
    if found:
        return int(found.group(1), 16)
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    if key in _TYPE_ALIASES:
        return _TYPE_ALIASES[key]
    return _SENSOR_TYPES.index(key) if key in _SENSOR_TYPES else None


def parse_sel_verbose(text: str) -> list[SelRecord]:
    """The standard records of ``ipmitool -v sel list`` output, in log order. OEM records (no
    sensor) and records of an unknown sensor type are skipped.

    Raises:
        ValueError: a standard record with a malformed field; the message names record and
            field.
    """
    records: list[SelRecord] = []
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, colon, value = line.partition(":")
            if colon:
                fields.setdefault(key.strip(), value.strip())
        if "Sensor Type" not in fields or "Event Direction" not in fields:
            continue
        record_id = fields.get("SEL Record ID", "?")
        sensor_type = _sensor_type(fields["Sensor Type"])
        if sensor_type is None:
            continue
        try:
            number = int(fields.get("Sensor Number", ""), 16)
            data = bytes.fromhex(fields.get("Event Data", ""))
        except ValueError:
            raise ValueError(f"SEL record {record_id}: Sensor Number "
                             f"{fields.get('Sensor Number')!r} or Event Data "
                             f"{fields.get('Event Data')!r} is not hexadecimal") from None
        if not data:
            raise ValueError(f"SEL record {record_id}: Event Data is empty")
        direction = fields["Event Direction"]
        if direction not in ("Assertion Event", "Deassertion Event"):
            raise ValueError(f"SEL record {record_id}: Event Direction {direction!r} is neither "
                             "'Assertion Event' nor 'Deassertion Event'")
        records.append(SelRecord(record_id, fields["Sensor Type"], sensor_type, number,
                                 direction == "Assertion Event", data[0] & 0x0F))
    return records


def current_alarms(records: Sequence[SelRecord]) -> tuple[NodeFaultDevice, ...]:
    """The alarms asserted and not deasserted since, one device per sensor, in log order."""
    present: dict[tuple[int, int, int], SelRecord] = {}
    for record in records:
        key = (record.sensor_type, record.sensor_number, record.offset)
        if record.asserted:
            present.setdefault(key, record)
        else:
            present.pop(key, None)
    devices: dict[tuple[int, int], tuple[str, list[str]]] = {}
    for record in present.values():
        _, codes = devices.setdefault((record.sensor_type, record.sensor_number),
                                         (record.sensor_type_name, []))
        if record.code not in codes:
            codes.append(record.code)
    return tuple(NodeFaultDevice(name, number, tuple(codes))
                 for (_, number), (name, codes) in devices.items())


class IpmitoolBmc:
    """Reads the event log with ``ipmitool`` (in-band, through the local BMC driver)."""

    def __init__(self, *, command: Sequence[str] = ("ipmitool", "-v", "sel", "list"),
                 timeout: float = 30.0) -> None:
        self._command = tuple(command)
        self._timeout = timeout

    async def read(self) -> tuple[NodeFaultDevice, ...]:
        """The current alarms.

        Raises:
            BmcUnavailableError: no ``ipmitool``, it failed, timed out, or printed what is not
                an event log.
        """
        if shutil.which(self._command[0]) is None:
            raise BmcUnavailableError(
                f"{self._command[0]} is not installed (not on PATH): BMC alarms are not read, "
                "and the node document shows node health only")
        process = await asyncio.create_subprocess_exec(
            *self._command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
        try:
            out, err = await asyncio.wait_for(process.communicate(), self._timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            raise BmcUnavailableError(f"{' '.join(self._command)} did not finish within "
                                      f"{self._timeout:g} s") from None
        if process.returncode != 0:
            last = (err.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
            raise BmcUnavailableError(f"{' '.join(self._command)} exited with "
                                      f"{process.returncode}: {last}")
        try:
            return current_alarms(parse_sel_verbose(out.decode(errors="replace")))
        except ValueError as error:
            raise BmcUnavailableError(f"{' '.join(self._command)}: {error}") from None
