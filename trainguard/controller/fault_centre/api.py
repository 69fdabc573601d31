"""The fault centre's values: what it is told about jobs, and what it decides."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from trainguard.controller.fault_centre.manual_separation import SeparationChange
from trainguard.controller.fault_centre.relation_faults import RelationDecision
from trainguard.controller.fault_centre.write_plan import DocumentWrite
from trainguard.faults.device.device_events import DeviceFaultEvent

__all__ = ["Delivery", "Evaluation", "JobPlacement", "split_device"]


def split_device(device: str) -> tuple[str, int] | None:
    """``"node-a/device-3"`` -> ``("node-a", 3)``: the controller's device names; None for a
    name of another form."""
    node, _, rest = device.rpartition("/")
    number = rest.removeprefix("device-")
    if not node or number == rest or not number.isdigit():
        return None
    return node, int(number)


@dataclasses.dataclass(frozen=True)
class JobPlacement:
    """Where a job runs, and what it tolerates."""

    job: str
    ranks: Mapping[str, int]
    """Each device the job uses (``<node>/device-<id>``) -> the rank on it."""
    retries_steps: bool = False
    """The job retries a step on a memory or HCCL retry error (SPEC H5): such faults are hidden
    from it while the retry runs."""
    super_pod: bool = False
    """The job's nodes are in a super pod (SuperPodID >= 0): completion-queue errors wait for
    the link's interval (relation rules)."""

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(device.rpartition("/")[0] for device in self.ranks)


@dataclasses.dataclass(frozen=True)
class Delivery:
    """A device fault event the job should now see (``job`` None: no job uses the device)."""

    job: str | None
    event: DeviceFaultEvent


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What one evaluation decided, for the caller to act on."""

    deliveries: tuple[Delivery, ...] = ()
    """Events to pass to the jobs, in order (an occur, once or recover of a device)."""
    separations: tuple[SeparationChange, ...] = ()
    """Devices separated (ManuallySeparateNPU) or released."""
    relations: tuple[RelationDecision, ...] = ()
    """Job nodes given a relation strategy (SubHealth or Separate)."""
    writes: tuple[DocumentWrite, ...] = ()
    """Documents to write (or delete) now; report a failure with
    :meth:`~trainguard.controller.fault_centre.centre.FaultCentre.write_failed`."""
