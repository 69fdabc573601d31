"""The per-node device document ``mindx-dl-deviceinfo-<node>``, as the original's device plugin
writes its ConfigMap (SPEC D1; NOTES §6.3; the seed's tables 1, 3 and 4).

Its keys, each value a string as in a ConfigMap:

* ``DeviceInfoCfg``: ``{"DeviceInfo": {"DeviceList": {...}, "UpdateTime": <s>}, "SuperPodID",
  "ServerIndex", "CheckCode"}``. ``DeviceList`` maps, for the resource type ``<type>``
  (``huawei.com/Ascend910`` by default, :mod:`.naming`): ``<type>`` to the available devices,
  ``<type>-Fault`` to the JSON *text* of the fault list (one entry per unhealthy part of a
  device: ``fault_type``, ``npu_name``, ``large_model_fault_level``, ``fault_level``,
  ``fault_handling`` (one level, three names), ``fault_code`` (comma-joined),
  ``fault_time_and_level_map`` (code -> ``{"fault_time": <ms>, "fault_level"}``)), and
  ``<type>-NetworkUnhealthy``, ``<type>-Recovering``, ``<type>-Unhealthy`` to device names;
  names are comma-joined in physical id order. ``CheckCode`` is the SHA-256, in hex, of
  ``DeviceInfo`` as Go writes it (:mod:`trainguard.faults.go_json`; map keys sorted).
* ``ManuallySeparateNPU``: the manually separated devices, comma-joined.
* ``UpgradeFaultReason``: JSON map device -> list of ``{fault_code, fault_level,
  upgrade_type, upgrade_time}``.

Which list a device is in, inferred from the original's example document and the seed (no rule
is written down):

* ``-Unhealthy``: its chip's level lets no process stay on it (above RestartBusiness:
  FreeRestartNPU, RestartNPU, PreSeparateNPU, SeparateNPU, ManuallySeparateNPU), the levels at
  which the original stops giving the chip to new work;
* ``-NetworkUnhealthy``: its network's level is PreSeparateNPU or SeparateNPU (the same rule;
  a network code has no level between NotHandleFault and those but SubHealthFault);
* ``-Recovering``: the devices the caller says are being reset (trainguard resets no chip by
  itself, so this is empty unless the agent does);
* ``<type>`` (available): every device neither unhealthy nor recovering. A device whose only
  trouble is its network stays available, as in the original's example.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from trainguard import names
from trainguard.detect.devices import backend as backends
from trainguard.detect.devices import naming as namings
from trainguard.faults import go_json
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import UpgradeReason

__all__ = ["PREFIX", "DeviceInfo", "device_info", "document_name"]

PREFIX = "mindx-dl-deviceinfo-"


def document_name(node: str) -> str:
    """Raises: names.InvalidNameError: ``node`` is no node name."""
    return PREFIX + names.node_name(node)


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """One node's device document; names are the public ones (``Ascend910-3``)."""

    node: str
    public_type: str
    available: tuple[str, ...]
    faults: tuple[device_health.FaultEntry, ...]
    network_unhealthy: tuple[str, ...]
    recovering: tuple[str, ...]
    unhealthy: tuple[str, ...]
    update_time: int  # wall seconds
    super_pod_id: int
    server_index: int
    manually_separated: tuple[str, ...] = ()
    upgrade_reasons: Mapping[str, tuple[UpgradeReason, ...]] = dataclasses.field(
        default_factory=dict)

    @property
    def name(self) -> str:
        return document_name(self.node)

    def device_list(self) -> dict[str, str]:
        kind = self.public_type
        faults = [_go_entry(entry) for entry in self.faults]
        return {kind: ",".join(self.available), f"{kind}-Fault": go_json.dumps(faults),
                f"{kind}-NetworkUnhealthy": ",".join(self.network_unhealthy),
                f"{kind}-Recovering": ",".join(self.recovering),
                f"{kind}-Unhealthy": ",".join(self.unhealthy)}

    def device_info(self) -> dict[str, object]:
        """``DeviceInfo``: what CheckCode covers."""
        return {"DeviceList": self.device_list(), "UpdateTime": self.update_time}

    @property
    def check_code(self) -> str:
        return go_json.check_code(self.device_info())

    def to_data(self) -> dict[str, str]:
        """The document's keys and their text."""
        config = {"DeviceInfo": self.device_info(), "SuperPodID": self.super_pod_id,
                  "ServerIndex": self.server_index, "CheckCode": self.check_code}
        reasons = {device: [reason.to_data() for reason in self.upgrade_reasons[device]]
                   for device in sorted(self.upgrade_reasons)}
        return {"DeviceInfoCfg": go_json.dumps(config),
                "ManuallySeparateNPU": ",".join(self.manually_separated),
                "UpgradeFaultReason": go_json.dumps(reasons)}


def _go_entry(entry: device_health.FaultEntry) -> dict[str, object]:
    """An entry as Go writes it: its code map is a Go map, so its keys come sorted."""
    data = entry.to_data()
    times = data["fault_time_and_level_map"]
    assert isinstance(times, dict)
    data["fault_time_and_level_map"] = dict(sorted(times.items()))
    return data


def device_info(*, node: str, inventory: backends.Inventory,
                healths: Mapping[str, device_health.DeviceHealth],
                naming: namings.DeviceNaming, now: float,
                recovering: Collection[int] = ()) -> DeviceInfo:
    """The document for a host's devices.

    Args:
        node: the host's name.
        inventory: its devices, as the backend listed them.
        healths: the latest health of devices, by the backend's name (``device-3``); a device
            left out is healthy.
        naming: the public names.
        now: wall seconds, the document's UpdateTime.
        recovering: physical ids of devices being reset.
    """
    available, unhealthy, network, reset, separated = [], [], [], [], []
    faults: list[device_health.FaultEntry] = []
    reasons: dict[str, tuple[UpgradeReason, ...]] = {}
    for device in inventory.devices:
        public = naming.public_name(device.physical_id)
        health = healths.get(device.name)
        chip_down = health is not None and not device_health.allows_in_place(health.chip_level)
        if chip_down:
            unhealthy.append(public)
        if health is not None and not device_health.allows_in_place(health.network_level):
            network.append(public)
        if device.physical_id in recovering:
            reset.append(public)
        elif not chip_down:
            available.append(public)
        if health is None:
            continue
        faults.extend(dataclasses.replace(entry, npu_name=public)
                      if entry.npu_name == device.name else entry for entry in health.entries)
        if health.manually_separated:
            separated.append(public)
        if health.reasons:
            reasons[public] = health.reasons
    return DeviceInfo(node=names.node_name(node), public_type=naming.public_type,
                      available=tuple(available), faults=tuple(faults),
                      network_unhealthy=tuple(network), recovering=tuple(reset),
                      unhealthy=tuple(unhealthy), update_time=int(now),
                      super_pod_id=inventory.super_pod_id, server_index=inventory.server_index,
                      manually_separated=tuple(separated), upgrade_reasons=reasons)
