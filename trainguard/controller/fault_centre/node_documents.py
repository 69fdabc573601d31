"""The nodes' documents as the cluster documents show them (NOTES §4.6, §6.3; SPEC I1).

Each node's agent writes three documents; the controller reads them, checks them, and shows
each as one entry of a cluster document, keyed by the node document's name:

* ``mindx-dl-deviceinfo-<node>`` (key ``DeviceInfoCfg``: ``{"DeviceInfo": {"DeviceList",
  "UpdateTime"}, "SuperPodID", "ServerIndex", ["RackID"], "CheckCode"}``) becomes
  ``{"DeviceList", "UpdateTime", "CmName", "SuperPodID", "ServerIndex", ["RackID"]}`` in
  ``cluster-info-device-<m>``. CheckCode is checked (SHA-256 of ``DeviceInfo`` as Go writes
  it), as the original's reader does, and a document that fails is refused.
* The node's switch document (``SwitchInfoCfg``: ``{"FaultCode", "FaultLevel", "UpdateTime",
  "NodeStatus", "FaultTimeAndLevelMap"}``) becomes the same fields plus ``CmName``
  ``mindx-dl-switchinfo-<node>`` in ``cluster-info-switch-<m>``.
* ``mindx-dl-nodeinfo-<node>`` (``{"NodeInfo": {"FaultDevList", "NodeStatus"}, "CheckCode"}``)
  becomes ``{"FaultDevList", "NodeStatus", "CmName"}`` in ``cluster-info-node-cm``; CheckCode
  is checked as for the device document.

The device entry shows the fault centre's view, as the original's does: codes the fault
centre hides from jobs (a companion of a memory error, a retry not yet judged) are taken out of
the ``<resource>-Fault`` list, an entry left with no code goes, and an entry that lost codes
takes the most serious level of those left; a manually separated device gets an entry at
ManuallySeparateNPU (no code) and is added to ``<resource>-Unhealthy``. Nothing else of the
node's lists is changed (decided here: the node's own health lists stay its judgement).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping

from trainguard.controller.fault_centre import plain_data
from trainguard.faults import go_json
from trainguard.faults.levels import FaultType, Level, most_serious

__all__ = [
    "DEVICE_INFO_PREFIX",
    "NODE_INFO_PREFIX",
    "SWITCH_INFO_PREFIX",
    "DocumentError",
    "device_entry",
    "device_number",
    "node_entry",
    "switch_entry",
]

DEVICE_INFO_PREFIX = "mindx-dl-deviceinfo-"
NODE_INFO_PREFIX = "mindx-dl-nodeinfo-"
SWITCH_INFO_PREFIX = "mindx-dl-switchinfo-"
_FAULT_SUFFIX = "-Fault"
_UNHEALTHY_SUFFIX = "-Unhealthy"
_LEVELS = frozenset(str(level) for level in Level)


class DocumentError(ValueError):
    """A node's document is malformed or fails its check code; the message names the
    document and the field."""


def _object(value: object, *, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise DocumentError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def device_number(npu_name: str) -> int | None:
    """A device's physical id from its name in the document (``Ascend910-3`` -> 3)."""
    _, _, number = npu_name.rpartition("-")
    return int(number) if number.isdigit() else None


def _check(document: Mapping[str, object], body: Mapping[str, object], *, where: str) -> None:
    code = plain_data.text(document, "CheckCode", where=where, error=DocumentError)
    if code != go_json.check_code(body):
        raise DocumentError(f"{where}: CheckCode {code!r} does not match its content; the "
                            "document is refused")


def device_entry(node: str, document: object, *,
                 hidden: Mapping[int, Collection[str]] | None = None,
                 separated: Collection[int] = ()) -> dict[str, object]:
    """The cluster's entry for a node's ``DeviceInfoCfg``.

    Args:
        node: the node's name.
        document: the parsed ``DeviceInfoCfg``.
        hidden: device number -> codes (upper case) the fault centre hides.
        separated: numbers of the node's manually separated devices.

    Raises:
        DocumentError: a field is missing or has the wrong type, or CheckCode fails.
    """
    where = DEVICE_INFO_PREFIX + node
    root = _object(document, where=where)
    info = plain_data.mapping(root, "DeviceInfo", where=where, error=DocumentError)
    devices = plain_data.mapping(info, "DeviceList", where=f"{where}: DeviceInfo",
                                 error=DocumentError)
    listed: dict[str, str] = {}
    for key, value in devices.items():
        if not isinstance(value, str):
            raise DocumentError(f"{where}: DeviceInfo.DeviceList[{key!r}] must be a string")
        listed[key] = value
    update_time = plain_data.whole(info, "UpdateTime", where=f"{where}: DeviceInfo",
                                   error=DocumentError)
    _check(root, {"DeviceList": go_json.GoMap(listed), "UpdateTime": update_time},
           where=where)
    entry: dict[str, object] = {
        "DeviceList": go_json.GoMap(_fault_view(listed, hidden or {}, separated,
                                                where=where)),
        "UpdateTime": update_time,
        "CmName": where,
        "SuperPodID": plain_data.whole(root, "SuperPodID", where=where, error=DocumentError),
        "ServerIndex": plain_data.whole(root, "ServerIndex", where=where, error=DocumentError),
    }
    if "RackID" in root:
        entry["RackID"] = plain_data.whole(root, "RackID", where=where, error=DocumentError)
    return entry


def _fault_view(devices: Mapping[str, str], hidden: Mapping[int, Collection[str]],
                separated: Collection[int], *, where: str) -> dict[str, str]:
    if not hidden and not separated:
        return dict(devices)
    view = dict(devices)
    for key, value in devices.items():
        if not key.endswith(_FAULT_SUFFIX):
            continue
        resource = key.removesuffix(_FAULT_SUFFIX)
        try:
            faults = json.loads(value) if value else []
        except json.JSONDecodeError as error:
            raise DocumentError(f"{where}: DeviceList[{key!r}] is not JSON ({error})") from error
        if not isinstance(faults, list):
            raise DocumentError(f"{where}: DeviceList[{key!r}] must hold a JSON list")
        kept, changed = _without_hidden(faults, hidden, where=f"{where}: DeviceList[{key!r}]")
        names = _names(devices, resource)
        unhealthy = [name for name in devices.get(resource + _UNHEALTHY_SUFFIX, "").split(",")
                     if name]
        for number in sorted(separated):
            name = names.get(number) or f"{resource.rpartition('/')[2]}-{number}"
            kept.append(_separated_fault(name))
            changed = True
            if name not in unhealthy:
                unhealthy.append(name)
        if changed:
            view[key] = go_json.dumps(kept)
            if separated:
                view[resource + _UNHEALTHY_SUFFIX] = ",".join(unhealthy)
    return view


def _names(devices: Mapping[str, str], resource: str) -> dict[int, str]:
    """Each device number's name as the node's lists spell it."""
    names: dict[int, str] = {}
    for key, value in devices.items():
        if key == resource or (key.startswith(resource + "-") and not key.endswith(
                _FAULT_SUFFIX)):
            for name in value.split(","):
                number = device_number(name)
                if number is not None:
                    names.setdefault(number, name)
    return names


def _without_hidden(faults: list[object], hidden: Mapping[int, Collection[str]], *,
                    where: str) -> tuple[list[object], bool]:
    kept: list[object] = []
    changed = False
    for index, fault in enumerate(faults):
        entry = _object(fault, where=f"{where}[{index}]")
        number = device_number(str(entry.get("npu_name", "")))
        codes = {code.upper() for code in hidden.get(number, ())} if number is not None else ()
        listed = [code for code in str(entry.get("fault_code", "")).split(",") if code]
        if not codes or not any(code.upper() in codes for code in listed):
            kept.append(_go_fault(entry))
            continue
        changed = True
        left = [code for code in listed if code.upper() not in codes]
        if not left:
            continue
        times = entry.get("fault_time_and_level_map")
        times = {code: value for code, value in times.items() if code.upper() not in codes
                 } if isinstance(times, dict) else {}
        levels = [Level(value["fault_level"]) for value in times.values()
                  if isinstance(value, dict) and value.get("fault_level") in _LEVELS]
        level = str(most_serious(levels)) if levels else entry.get("fault_level", "")
        kept.append(_go_fault({**entry, "fault_code": ",".join(left),
                               "large_model_fault_level": level, "fault_level": level,
                               "fault_handling": level, "fault_time_and_level_map": times}))
    return kept, changed


def _go_fault(entry: Mapping[str, object]) -> dict[str, object]:
    """One fault entry, its code map written as Go writes a map."""
    times = entry.get("fault_time_and_level_map")
    if isinstance(times, dict):
        return {**entry, "fault_time_and_level_map": go_json.GoMap(times)}
    return dict(entry)


def _separated_fault(name: str) -> dict[str, object]:
    level = str(Level.MANUALLY_SEPARATE_NPU)
    return {"fault_type": str(FaultType.CARD_UNHEALTHY), "npu_name": name,
            "large_model_fault_level": level, "fault_level": level, "fault_handling": level,
            "fault_code": "", "fault_time_and_level_map": go_json.GoMap()}


def switch_entry(node: str, document: object) -> dict[str, object]:
    """The cluster's entry for a node's ``SwitchInfoCfg``.

    Raises:
        DocumentError: a field is missing or has the wrong type.
    """
    where = SWITCH_INFO_PREFIX + node
    root = _object(document, where=where)
    error = DocumentError
    return {"FaultCode": plain_data.strings(root, "FaultCode", where=where, error=error),
            "FaultLevel": plain_data.text(root, "FaultLevel", where=where, error=error),
            "UpdateTime": plain_data.whole(root, "UpdateTime", where=where, error=error),
            "NodeStatus": plain_data.text(root, "NodeStatus", where=where, error=error),
            "FaultTimeAndLevelMap": go_json.GoMap(plain_data.mapping(
                root, "FaultTimeAndLevelMap", where=where, error=error)),
            "CmName": where}


def node_entry(node: str, document: object) -> dict[str, object]:
    """The cluster's entry for a node's ``mindx-dl-nodeinfo`` document.

    Raises:
        DocumentError: a field is missing or has the wrong type, or CheckCode fails.
    """
    where = NODE_INFO_PREFIX + node
    root = _object(document, where=where)
    info = plain_data.mapping(root, "NodeInfo", where=where, error=DocumentError)
    devices = plain_data.objects(info, "FaultDevList", where=f"{where}: NodeInfo",
                                 error=DocumentError)
    status = plain_data.text(info, "NodeStatus", where=f"{where}: NodeInfo", error=DocumentError)
    _check(root, {"FaultDevList": devices, "NodeStatus": status}, where=where)
    return {"FaultDevList": devices, "NodeStatus": status, "CmName": where}
