"""Node hardware faults from the BMC (IPMI) and the node document (SPEC D6, NOTES §2.5).

``NodeDConfiguration.json`` holds, under ``FaultTypeCode``, three lists of IPMI event codes
(8 hex digits, compared case-insensitively): ``NotHandleFaultCodes``,
``PreSeparateFaultCodes`` and ``SeparateFaultCodes``. A code must be in exactly one list: a
code listed twice rejects the whole configuration, as the original's NodeD does, and the caller
keeps the table it had. Codes in no list are dropped from reports.

A device's level is the most serious of its codes' levels (NotHandleFault < PreSeparateFault <
SeparateFault); the node's status follows the most serious device: Healthy, PreSeparate or
UnHealthy. A device left with no configured code is not reported.

The node document (``mindx-dl-nodeinfo-<node>``, key ``NodeInfo``) is
``{"NodeInfo": {"FaultDevList": [{"DeviceType", "DeviceId", "FaultCode": [...], "FaultLevel"}],
"NodeStatus": ...}, "CheckCode": ...}``. CheckCode is the SHA-256, in hex, of the UTF-8 JSON of
``NodeInfo`` written as Go's ``encoding/json`` writes it (:mod:`trainguard.faults.go_json`),
because ClusterD checks it by encoding what it decoded.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import string
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from trainguard.faults import go_json
from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.node.switch_faults import NodeStatus

__all__ = [
    "UNHEALTHY_EXIT_CODE",
    "FaultDevice",
    "NodeCodeTable",
    "NodeFaultDevice",
    "NodeFaultLevel",
    "NodeInfo",
    "default_node_table",
    "node_info",
]

UNHEALTHY_EXIT_CODE = 4
"""A host's exit code when it stopped because its node is UnHealthy: on one host the job
stops with a dying checkpoint; across hosts the controller moves the host's ranks away and
ends its run."""

_SECTION = "FaultTypeCode"
_KINDS = {list: "a list", str: "a string", int: "an integer"}
_HEX = frozenset(string.hexdigits)


class NodeFaultLevel(enum.StrEnum):
    """A node device's fault level, least serious first; the values are the document's."""

    NOT_HANDLE_FAULT = "NotHandleFault"
    PRE_SEPARATE_FAULT = "PreSeparateFault"
    SEPARATE_FAULT = "SeparateFault"

    @property
    def severity(self) -> int:
        """Larger is more serious: NotHandleFault 0, PreSeparateFault 1, SeparateFault 2."""
        return _SEVERITY[self]

    @property
    def node_status(self) -> NodeStatus:
        """The node's status when this is its most serious device level."""
        return _NODE_STATUS[self]


_SEVERITY = {level: rank for rank, level in enumerate(NodeFaultLevel)}
_NODE_STATUS = {
    NodeFaultLevel.NOT_HANDLE_FAULT: NodeStatus.HEALTHY,
    NodeFaultLevel.PRE_SEPARATE_FAULT: NodeStatus.PRE_SEPARATE,
    NodeFaultLevel.SEPARATE_FAULT: NodeStatus.UNHEALTHY,
}
_LISTS = (
    ("NotHandleFaultCodes", NodeFaultLevel.NOT_HANDLE_FAULT),
    ("PreSeparateFaultCodes", NodeFaultLevel.PRE_SEPARATE_FAULT),
    ("SeparateFaultCodes", NodeFaultLevel.SEPARATE_FAULT),
)


def _is_code(text: str) -> bool:
    return len(text) == 8 and set(text) <= _HEX


@dataclasses.dataclass(frozen=True)
class NodeCodeTable:
    """A loaded ``NodeDConfiguration.json``: each configured code's level."""

    levels: Mapping[str, NodeFaultLevel]
    """Keyed by the upper-case code."""

    def level_of(self, code: str) -> NodeFaultLevel | None:
        """The configured level; ``None`` for a code in no list, which is dropped."""
        return self.levels.get(code.upper())

    @classmethod
    def from_document(cls, document: object, *, file: str = "NodeDConfiguration.json"
                      ) -> tuple[NodeCodeTable | None, list[ConfigProblem]]:
        """Read a parsed ``NodeDConfiguration.json``.

        Returns:
            The table, or ``None`` when the configuration is rejected (not an object, no
            ``FaultTypeCode`` object, a list that is not a list, or a code listed twice); and
            the problems found. Unknown keys and malformed codes are skipped and reported.
        """
        problems: list[ConfigProblem] = []
        section = document.get(_SECTION) if isinstance(document, dict) else None
        if not isinstance(document, dict) or not isinstance(section, dict):
            what = ("the file is not a JSON object" if not isinstance(document, dict)
                    else f"no {_SECTION} object")
            problems.append(ConfigProblem(file, "", "", f"{what}; the configuration is rejected",
                                          Action.KEPT_LAST_GOOD))
            return None, problems
        for name in document:
            if name != _SECTION:
                problems.append(ConfigProblem(file, str(name), "", f"unknown key (known: "
                                              f"{_SECTION})", Action.IGNORED))
        known = [name for name, _ in _LISTS]
        for name in section:
            if name not in known:
                problems.append(ConfigProblem(
                    file, f"{_SECTION}.{name}", "",
                    f"not a list of node fault codes (known: {', '.join(known)})",
                    Action.IGNORED))
        levels: dict[str, NodeFaultLevel] = {}
        lists: dict[str, str] = {}  # code -> the list it was first met in
        rejected = False
        for name, level in _LISTS:
            entry = f"{_SECTION}.{name}"
            codes = section.get(name, [])
            if not isinstance(codes, list):
                problems.append(ConfigProblem(file, entry, "", "not a list; the configuration "
                                              "is rejected", Action.KEPT_LAST_GOOD))
                rejected = True
                continue
            for code in codes:
                if not isinstance(code, str) or not _is_code(code):
                    shown = code if isinstance(code, str) else repr(code)
                    problems.append(ConfigProblem(file, entry, shown, "not an IPMI event code "
                                                  "(8 hex digits)", Action.IGNORED))
                    continue
                key = code.upper()
                if key in lists:
                    problems.append(ConfigProblem(
                        file, entry, code, f"also listed in {lists[key]}; a code must be in "
                        "exactly one list, so the configuration is rejected",
                        Action.KEPT_LAST_GOOD))
                    rejected = True
                    continue
                lists[key] = name
                levels[key] = level
        return (None if rejected else cls(levels)), problems


@dataclasses.dataclass(frozen=True)
class NodeFaultDevice:
    """A device with alarms, as one BMC poll reports it."""

    device_type: str  # as the BMC names it, e.g. "CPU"
    device_id: int
    fault_codes: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class FaultDevice:
    """One entry of the node document's ``FaultDevList``: a device with configured codes."""

    device_type: str
    device_id: int
    fault_codes: tuple[str, ...]  # as reported, in order
    fault_level: NodeFaultLevel

    def to_data(self) -> dict[str, object]:
        return {"DeviceType": self.device_type, "DeviceId": self.device_id,
                "FaultCode": list(self.fault_codes), "FaultLevel": str(self.fault_level)}


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """The node document's ``NodeInfo``."""

    fault_devices: tuple[FaultDevice, ...]
    node_status: NodeStatus

    @property
    def check_code(self) -> str:
        """SHA-256 hex of ``NodeInfo`` as Go's ``encoding/json`` writes it."""
        return go_json.check_code(self._node_info_data())

    def to_data(self) -> dict[str, object]:
        return {"NodeInfo": self._node_info_data(), "CheckCode": self.check_code}

    @classmethod
    def from_data(cls, info: Mapping[str, object]) -> NodeInfo:
        """The ``NodeInfo`` part of a node document read back (its CheckCode checked before).

        Raises:
            ValueError: a field is missing or has the wrong type or value; the message names it.
        """
        def field(data: Mapping[str, object], name: str, kind: type, where: str) -> Any:
            value = data.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"{where}: field {name!r} must be {_KINDS[kind]}, got "
                                 f"{type(value).__name__}")
            return value

        devices = []
        for number, entry in enumerate(field(info, "FaultDevList", list, "NodeInfo")):
            where = f"NodeInfo.FaultDevList[{number}]"
            if not isinstance(entry, Mapping):
                raise ValueError(f"{where} must be a JSON object")
            codes = field(entry, "FaultCode", list, where)
            if not all(isinstance(code, str) for code in codes):
                raise ValueError(f"{where}: field 'FaultCode' must be a list of strings")
            devices.append(FaultDevice(
                field(entry, "DeviceType", str, where), field(entry, "DeviceId", int, where),
                tuple(codes), NodeFaultLevel(field(entry, "FaultLevel", str, where))))
        return cls(tuple(devices), NodeStatus(field(info, "NodeStatus", str, "NodeInfo")))

    def describe(self, node: str) -> str:
        """The node's status and the alarms behind it, for a log or a job's end."""
        alarms = "; ".join(f"{device.device_type} {device.device_id} "
                           f"{','.join(device.fault_codes)} ({device.fault_level})"
                           for device in self.fault_devices)
        return f"node {node} is {self.node_status}" + (f": {alarms}" if alarms else "")

    def _node_info_data(self) -> dict[str, object]:
        return {"FaultDevList": [device.to_data() for device in self.fault_devices],
                "NodeStatus": str(self.node_status)}


def node_info(devices: Iterable[NodeFaultDevice], *, table: NodeCodeTable) -> NodeInfo:
    """The node document for devices with alarms: unconfigured codes dropped, devices left
    without codes left out, each device at its most serious code's level."""
    reported: list[FaultDevice] = []
    for device in devices:
        known = [(code, level) for code in device.fault_codes
                 if (level := table.level_of(code)) is not None]
        if not known:
            continue
        level = max((level for _, level in known), key=lambda each: each.severity)
        reported.append(FaultDevice(device.device_type, device.device_id,
                                    tuple(code for code, _ in known), level))
    node_level = max((device.fault_level for device in reported),
                     key=lambda each: each.severity, default=NodeFaultLevel.NOT_HANDLE_FAULT)
    return NodeInfo(tuple(reported), node_level.node_status)


@functools.cache
def default_node_table() -> NodeCodeTable:
    """The original's default ``NodeDConfiguration.json``, shipped with the package.

    Raises:
        RuntimeError: the shipped file is rejected (a packaging error).
    """
    text = resources.files("trainguard.faults").joinpath("data").joinpath(
        "NodeDConfiguration.json").read_text()
    table, problems = NodeCodeTable.from_document(json.loads(text))
    if table is None:
        raise RuntimeError("the shipped NodeDConfiguration.json is rejected: "
                           + "; ".join(problem.describe() for problem in problems))
    return table
