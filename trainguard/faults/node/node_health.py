"""Faults of a whole node, handed over as chip levels: what handling reads for every device of it.

A device's handling depends on its node too: a node whose IPMI hardware (NodeD), bus switch or a
public sender reports a fault takes its devices out of use as much as a chip fault does. The
original shows such faults as ``NodeUnhealthy`` entries (public faults on named devices as
``CardUnhealthy`` or ``CardNetworkUnhealthy``); the levels map onto the chip levels as below, so
one rule (:func:`.device_health.allows_in_place`) decides for all of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from trainguard.faults.device import device_health
from trainguard.faults.levels import FaultType, Level, most_serious
from trainguard.faults.node import node_faults, switch_faults
from trainguard.faults.public import public_messages

__all__ = ["NODE_LEVELS", "SWITCH_LEVELS", "node_entry", "public_entries", "with_node"]

NODE_LEVELS: Mapping[node_faults.NodeFaultLevel, Level] = {
    node_faults.NodeFaultLevel.NOT_HANDLE_FAULT: Level.NOT_HANDLE_FAULT,
    node_faults.NodeFaultLevel.PRE_SEPARATE_FAULT: Level.PRE_SEPARATE_NPU,
    node_faults.NodeFaultLevel.SEPARATE_FAULT: Level.SEPARATE_NPU,
}
SWITCH_LEVELS: Mapping[switch_faults.SwitchLevel, Level] = {
    switch_faults.SwitchLevel.NOT_HANDLE: Level.NOT_HANDLE_FAULT,
    switch_faults.SwitchLevel.SUB_HEALTH_FAULT: Level.SUB_HEALTH_FAULT,
    switch_faults.SwitchLevel.RESTART_REQUEST: Level.RESTART_REQUEST,
    switch_faults.SwitchLevel.PRE_SEPARATE: Level.PRE_SEPARATE_NPU,
    switch_faults.SwitchLevel.SEPARATE: Level.SEPARATE_NPU,
}
"""A switch fault's level as a chip level. RestartRequest keeps its name: the bus failed a
request, which the job may redo; the node is UnHealthy for scheduling all the same."""

_PUBLIC_TYPES = {
    public_messages.PublicFaultType.NPU: FaultType.CARD_UNHEALTHY,
    public_messages.PublicFaultType.NETWORK: FaultType.CARD_NETWORK_UNHEALTHY,
    public_messages.PublicFaultType.NODE: FaultType.NODE_UNHEALTHY,
    public_messages.PublicFaultType.STORAGE: FaultType.NODE_UNHEALTHY,
}


def node_entry(*, node: node_faults.NodeInfo | None = None,
               switch: switch_faults.SwitchInfo | None = None) -> device_health.FaultEntry | None:
    """The node's ``NodeUnhealthy`` entry from its NodeD and switch documents; None when neither
    has a fault. Codes are keyed ``<code>`` (NodeD) and ``<code>_<chip>_<port>`` (switch)."""
    codes: dict[str, tuple[float, Level]] = {}
    if node is not None:
        for device in node.fault_devices:
            for code in device.fault_codes:
                codes[code] = (0.0, NODE_LEVELS[device.fault_level])
    if switch is not None:
        for key, entry in switch.fault_time_and_level_map.items():
            codes[key] = (entry.fault_time, SWITCH_LEVELS[entry.fault_level])
    if not codes:
        return None
    level = most_serious(level for _, level in codes.values())
    return device_health.FaultEntry(FaultType.NODE_UNHEALTHY, "", level, codes)


def public_entries(faults: Iterable[public_messages.NodePublicFault], *, device: int
                   ) -> tuple[device_health.FaultEntry, ...]:
    """The entries public faults give one device of the node: faults naming the device, and
    node or storage faults (which name devices too, but hit the node)."""
    by_type: dict[FaultType, dict[str, tuple[float, Level]]] = {}
    for fault in faults:
        fault_type = _PUBLIC_TYPES[fault.fault_type]
        if fault_type is not FaultType.NODE_UNHEALTHY and device not in fault.device_ids:
            continue
        codes = by_type.setdefault(fault_type, {})
        time, level = codes.get(fault.fault_code, (fault.fault_time_ms / 1000, fault.level))
        codes[fault.fault_code] = (time, most_serious((level, fault.level)))
    return tuple(
        device_health.FaultEntry(fault_type, "" if fault_type is FaultType.NODE_UNHEALTHY
                                 else f"device-{device}",
                                 most_serious(level for _, level in codes.values()), codes)
        for fault_type, codes in by_type.items())


def with_node(health: device_health.DeviceHealth,
              entries: Iterable[device_health.FaultEntry]) -> device_health.DeviceHealth:
    """The device's health with its node's entries: the level is the most serious of all."""
    extra = tuple(entries)
    if not extra:
        return health
    level = most_serious((health.level, *(entry.fault_level for entry in extra)))
    return dataclasses.replace(health, level=level, node_entries=health.node_entries + extra)
