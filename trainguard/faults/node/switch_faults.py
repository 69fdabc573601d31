"""Switch (UB / LingQu bus) faults and the node's switch document (SPEC D5, NOTES §2.4, §6.3).

A switch fault code is text of four comma-separated parts in brackets,
``[<alarm id>,<fault id|na>,<peer: cpu|npu|L2|na>,na]``, assembled from a driver event by
:meth:`SwitchCode.assemble`. Like the original, codes are compared as exact text, and a
configured code is checked only for its brackets, its four parts and its length (50 bytes).

``SwitchFaultCode.json`` maps level-named lists to codes: ``NotHandleFaultCodes``,
``SubHealthFaultCodes``, ``RestartRequestFaultCodes``, the optional ``PreSeparateFaultCodes``,
``SeparateFaultCodes``, and ``ResetFaultCodes``, which the original merges into Separate. A code
in two lists takes the more serious level (the original's later, more serious list overwrites).

The switch document (``SwitchInfoCfg`` in the device-info ConfigMap) holds, as the original's
device plugin writes it:

* ``FaultCode``: one compact JSON string per present fault with a configured code (EventType,
  AssembledFaultCode, PeerPortDevice, PeerPortId, SwitchChipId, SwitchPortId, Severity,
  Assertion 0 recover | 1 occur | 2 notice, AlarmRaisedTime in milliseconds); strings, not
  objects, because ClusterD decodes a list of strings. Faults with unconfigured codes are left
  out, as the original does.
* ``FaultLevel``: the most serious level of the present faults, an unconfigured code counting as
  NotHandle; ``""`` when no fault is present.
* ``UpdateTime``: Unix seconds, integer.
* ``NodeStatus``: Healthy, SubHealthy or UnHealthy, from ``FaultLevel``.
* ``FaultTimeAndLevelMap``: ``<code>_<switch chip id>_<switch port id>`` ->
  ``{"fault_time": milliseconds, "fault_level": level}``.

Pure: times are seconds on the caller's wall clock, passed in.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources

from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.device.device_events import Assertion
from trainguard.faults.device.fault_codes import Severity

__all__ = [
    "MAX_CODE_LENGTH",
    "FaultTimeAndLevel",
    "NodeStatus",
    "SwitchCode",
    "SwitchCodeTable",
    "SwitchFault",
    "SwitchInfo",
    "SwitchLevel",
    "aggregate",
    "apply_event",
    "default_switch_table",
]

MAX_CODE_LENGTH = 50
"""The most bytes a configured code may have (the original's limit)."""

_NOT_APPLICABLE = 0xFFFFFFFF
"""What the driver reports for "no fault id" (link down) and for "no port" (a chip fault)."""
_PEER_NAMES = {0: "cpu", 1: "npu", 2: "L2"}
_ASSERTION_NUMBERS = {Assertion.RECOVER: 0, Assertion.OCCUR: 1, Assertion.ONCE: 2}


class NodeStatus(enum.StrEnum):
    """A node's health as its documents state it, least serious first.

    Switch documents use Healthy, SubHealthy and UnHealthy; NodeD's node document uses Healthy,
    PreSeparate and UnHealthy (:mod:`.node_faults`).
    """

    HEALTHY = "Healthy"
    SUB_HEALTHY = "SubHealthy"
    PRE_SEPARATE = "PreSeparate"
    UNHEALTHY = "UnHealthy"


class SwitchLevel(enum.StrEnum):
    """A switch fault's level, least serious first; the values are the document's."""

    NOT_HANDLE = "NotHandle"
    SUB_HEALTH_FAULT = "SubHealthFault"
    RESTART_REQUEST = "RestartRequest"
    PRE_SEPARATE = "PreSeparate"
    SEPARATE = "Separate"

    @property
    def severity(self) -> int:
        """Larger is more serious: NotHandle 0 ... Separate 4."""
        return _SEVERITY[self]

    @property
    def node_status(self) -> NodeStatus:
        """The node's status when this is its most serious switch level.

        PreSeparate leaves the node Healthy, as the original's device plugin does: the node takes
        no new work, but what runs there goes on.
        """
        return _NODE_STATUS[self]


_SEVERITY = {level: rank for rank, level in enumerate(SwitchLevel)}
_NODE_STATUS = {
    SwitchLevel.NOT_HANDLE: NodeStatus.HEALTHY,
    SwitchLevel.SUB_HEALTH_FAULT: NodeStatus.SUB_HEALTHY,
    SwitchLevel.RESTART_REQUEST: NodeStatus.UNHEALTHY,
    SwitchLevel.PRE_SEPARATE: NodeStatus.HEALTHY,
    SwitchLevel.SEPARATE: NodeStatus.UNHEALTHY,
}

_LISTS = (
    ("SeparateFaultCodes", SwitchLevel.SEPARATE),
    ("ResetFaultCodes", SwitchLevel.SEPARATE),
    ("PreSeparateFaultCodes", SwitchLevel.PRE_SEPARATE),
    ("RestartRequestFaultCodes", SwitchLevel.RESTART_REQUEST),
    ("SubHealthFaultCodes", SwitchLevel.SUB_HEALTH_FAULT),
    ("NotHandleFaultCodes", SwitchLevel.NOT_HANDLE),
)
"""The lists, most serious first, so that a code met again keeps the level it has."""


@dataclasses.dataclass(frozen=True)
class SwitchCode:
    """One switch fault code, in its four parts; ``str()`` gives the code's text."""

    alarm_id: str  # e.g. "0x00f1fef5"
    fault_id: str  # decimal, or "na"
    peer: str  # what the faulty port connects to: "cpu", "npu", "L2" or "na"
    port: str  # "na" in every code so far

    def __str__(self) -> str:
        return f"[{self.alarm_id},{self.fault_id},{self.peer},{self.port}]"

    @classmethod
    def parse(cls, text: str) -> SwitchCode:
        """Split a configured code, checking only what the original checks.

        Raises:
            ValueError: the text is too long, lacks its brackets, or has not four parts.
        """
        if len(text.encode()) > MAX_CODE_LENGTH:
            raise ValueError(f"longer than {MAX_CODE_LENGTH} bytes")
        if not (text.startswith("[") and text.endswith("]")):
            raise ValueError("not enclosed in '[' and ']'")
        parts = text[1:-1].split(",")
        if len(parts) != 4:
            raise ValueError(f"{len(parts)} comma-separated parts instead of 4")
        return cls(*parts)

    @classmethod
    def assemble(cls, *, event_type: int, sub_type: int, peer_port_device: int,
                 switch_port_id: int) -> SwitchCode:
        """The code of a driver event, as the original's device plugin assembles it.

        A sub type of 0xFFFFFFFF (link down) has no fault id; a port id of 0xFFFFFFFF marks a
        fault of the whole chip, whose peer is ``na``.
        """
        fault_id = "na" if sub_type == _NOT_APPLICABLE else str(sub_type)
        peer = ("na" if switch_port_id == _NOT_APPLICABLE
                else _PEER_NAMES.get(peer_port_device, "na"))
        return cls(f"0x{event_type:08x}", fault_id, peer, "na")


@dataclasses.dataclass(frozen=True)
class SwitchCodeTable:
    """A loaded ``SwitchFaultCode.json``: each configured code's level."""

    levels: Mapping[str, SwitchLevel]

    def level_of(self, code: str | SwitchCode) -> SwitchLevel | None:
        """The configured level; ``None`` for a code in no list."""
        return self.levels.get(str(code))

    @classmethod
    def from_document(cls, document: object, *, file: str = "SwitchFaultCode.json"
                      ) -> tuple[SwitchCodeTable, list[ConfigProblem]]:
        """Read a parsed ``SwitchFaultCode.json``; bad entries are skipped and reported."""
        problems: list[ConfigProblem] = []
        if not isinstance(document, dict):
            problems.append(ConfigProblem(file, "", "", "the file is not a JSON object",
                                          Action.IGNORED))
            return cls({}), problems
        known = [name for name, _ in _LISTS]
        for name in document:
            if name not in known:
                problems.append(ConfigProblem(
                    file, str(name), "",
                    f"not a list of switch fault codes (known: {', '.join(sorted(known))})",
                    Action.IGNORED))
        levels: dict[str, SwitchLevel] = {}
        for name, level in _LISTS:
            for code in _codes(document, name, file, problems):
                kept = levels.setdefault(code, level)
                if kept is not level:
                    problems.append(ConfigProblem(
                        file, name, code, f"also listed as {kept}; the more serious level is kept",
                        Action.IGNORED))
        return cls(levels), problems


def _codes(document: dict[str, object], name: str, file: str,
           problems: list[ConfigProblem]) -> Iterable[str]:
    entries = document.get(name, [])
    if not isinstance(entries, list):
        problems.append(ConfigProblem(file, name, "", "not a list", Action.IGNORED))
        return
    for entry in entries:
        if not isinstance(entry, str):
            problems.append(ConfigProblem(file, name, repr(entry), "not a string",
                                          Action.IGNORED))
            continue
        try:
            SwitchCode.parse(entry)
        except ValueError as error:
            problems.append(ConfigProblem(
                file, name, entry, f"not a switch fault code: {error} (expected e.g. "
                "[0x00f1fef5,155914,npu,na])", Action.IGNORED))
            continue
        yield entry


@dataclasses.dataclass(frozen=True)
class SwitchFault:
    """One fault event of a switch chip, as the driver reports it."""

    code: str  # the assembled code (SwitchCode.assemble)
    event_type: int  # the alarm id
    peer_port_device: int  # 0 CPU, 1 NPU, 2 switch, 0xFFFF none
    peer_port_id: int
    switch_chip_id: int  # from 0
    switch_port_id: int  # from 0; 0xFFFFFFFF for the whole chip
    severity: Severity
    assertion: Assertion
    time: float  # seconds: when the switch raised the alarm

    @property
    def key(self) -> str:
        """The fault's key in ``FaultTimeAndLevelMap``: ``<code>_<chip id>_<port id>``."""
        return f"{self.code}_{self.switch_chip_id}_{self.switch_port_id}"

    def recovers(self, fault: SwitchFault) -> bool:
        """Whether this is the recovery of ``fault``: same alarm, code, peer, chip and port."""
        return (self.assertion is Assertion.RECOVER and fault.assertion is not Assertion.RECOVER
                and self._identity() == fault._identity())

    def _identity(self) -> tuple[object, ...]:
        return (self.event_type, self.code, self.peer_port_device, self.peer_port_id,
                self.switch_chip_id, self.switch_port_id)

    def to_data(self) -> dict[str, object]:
        """One fault of the document's ``FaultCode`` list, before it is written as a string."""
        return {
            "EventType": self.event_type, "AssembledFaultCode": self.code,
            "PeerPortDevice": self.peer_port_device, "PeerPortId": self.peer_port_id,
            "SwitchChipId": self.switch_chip_id, "SwitchPortId": self.switch_port_id,
            "Severity": int(self.severity), "Assertion": _ASSERTION_NUMBERS[self.assertion],
            "AlarmRaisedTime": round(self.time * 1000),
        }


def apply_event(current: Sequence[SwitchFault], event: SwitchFault) -> tuple[SwitchFault, ...]:
    """The present faults after ``event``: a recovery removes the faults it recovers, anything
    else is added (the original's subscription callback)."""
    if event.assertion is Assertion.RECOVER:
        return tuple(fault for fault in current if not event.recovers(fault))
    return (*current, event)


@dataclasses.dataclass(frozen=True)
class FaultTimeAndLevel:
    """When a fault was first raised (seconds) and its level."""

    fault_time: float
    fault_level: SwitchLevel


@dataclasses.dataclass(frozen=True)
class SwitchInfo:
    """A node's switch document (``SwitchInfoCfg``)."""

    faults: tuple[SwitchFault, ...]
    """The present faults with a configured code, in the order given."""
    fault_level: SwitchLevel | None
    """The most serious present level; ``None`` when no fault is present."""
    node_status: NodeStatus
    update_time: float  # seconds
    fault_time_and_level_map: Mapping[str, FaultTimeAndLevel]

    def to_data(self) -> dict[str, object]:
        return {
            "FaultCode": [json.dumps(fault.to_data(), separators=(",", ":"))
                          for fault in self.faults],
            "FaultLevel": "" if self.fault_level is None else str(self.fault_level),
            "UpdateTime": int(self.update_time),
            "NodeStatus": str(self.node_status),
            "FaultTimeAndLevelMap": {
                key: {"fault_time": round(entry.fault_time * 1000),
                      "fault_level": str(entry.fault_level)}
                for key, entry in self.fault_time_and_level_map.items()},
        }


def aggregate(faults: Iterable[SwitchFault], *, table: SwitchCodeTable,
              update_time: float) -> SwitchInfo:
    """The switch document of a node whose switches report ``faults``.

    Recoveries among ``faults`` are not faults and are skipped (use :func:`apply_event` to
    apply them). A fault whose code is in no list counts as NotHandle but is not reported. A
    key met twice keeps its earliest time.

    Args:
        faults: the present faults.
        table: the configured levels.
        update_time: seconds, written as ``UpdateTime``.
    """
    present = [fault for fault in faults if fault.assertion is not Assertion.RECOVER]
    levels: list[SwitchLevel] = []
    reported: list[SwitchFault] = []
    times: dict[str, FaultTimeAndLevel] = {}
    for fault in present:
        level = table.level_of(fault.code)
        levels.append(level or SwitchLevel.NOT_HANDLE)
        if level is None:
            continue
        reported.append(fault)
        earlier = times.get(fault.key)
        if earlier is None or fault.time < earlier.fault_time:
            times[fault.key] = FaultTimeAndLevel(fault.time, level)
    fault_level = max(levels, key=lambda level: level.severity, default=None)
    node_status = NodeStatus.HEALTHY if fault_level is None else fault_level.node_status
    return SwitchInfo(tuple(reported), fault_level, node_status, update_time, times)


@functools.cache
def default_switch_table() -> SwitchCodeTable:
    """The original's default ``SwitchFaultCode.json``, shipped with the package."""
    text = resources.files("trainguard.faults").joinpath("data").joinpath("SwitchFaultCode.json")
    return SwitchCodeTable.from_document(json.loads(text.read_text()))[0]
