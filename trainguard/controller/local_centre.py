"""The fault centre of a job on one host: one host is a cluster of one.

The host's device reports go through the same intake as a controller's across hosts
(:mod:`.fault_intake`): graded by the job's fault engine (its history, kept in the run's
store), then through the centre's rules (the memory error's companion filter, retry hiding,
relation faults, the manual-separation policy) before they reach the job, so a device behaves
the same whether its job runs on one host or on many. The centre's state and its documents go
to the run's key-value store, where the next run under the same id finds them (a device
separated stays separated).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from trainguard import clock as clocks
from trainguard.controller import device_reports, fault_config, fault_intake, job_controller, policy
from trainguard.controller.fault_centre.api import JobPlacement
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import DeviceFaultEvent
from trainguard.job import events
from trainguard.store import kv, trailing

__all__ = ["LocalCentre", "opened"]


@dataclasses.dataclass(frozen=True)
class LocalCentre:
    intake: fault_intake.FaultIntake
    reports: device_reports.DeviceReports
    job: str
    controller: job_controller.JobController

    def job_event(self, event: events.Event) -> None:
        """What the job records, for its step retries (:meth:`FaultIntake.job_event`)."""
        self.intake.job_event(self.job, self.controller.device_ranks(), event)

    def reconfigure(self, config: fault_config.FaultConfig) -> None:
        """The operator's fault configuration in force now."""
        self.intake.centre.reconfigure(relation=config.relation, policy=config.separation)


async def opened(held: contextlib.AsyncExitStack, store: kv.KeyValueStore,
                 engine: device_health.FaultEngine, controller: job_controller.JobController,
                 *, job: str, node: str, clock: clocks.Clock,
                 config: fault_config.FaultConfig | None) -> LocalCentre:
    """The centre of ``controller``'s job on host ``node``, with the state a run before left
    in ``store``; its writers and evaluation run until ``held`` closes."""
    devices = trailing.TrailingWriter(store, what="this host's devices")
    documents = trailing.TrailingWriter(store, what="the fault centre's documents")

    def placements() -> dict[str, tuple[JobPlacement, job_controller.JobController]]:
        return {job: (JobPlacement(job, controller.device_ranks(), retries_steps=(
            policy.Strategy.RETRY in controller.settings.recover_strategy)), controller)}

    async def grade(event: DeviceFaultEvent) -> device_health.DeviceHealth:
        return await intake.device_fault(event, reported_by=f"the devices of {node}")

    reports = device_reports.DeviceReports(grade, devices, clock=clock)
    intake = fault_intake.FaultIntake(
        await fault_intake.restored_centre(store), engine, documents, clock=clock,
        placements=placements, job_on=lambda name: controller if name == node else None,
        devices_of=reports.devices)
    reports.on_documents = intake.host_documents
    centre = LocalCentre(intake, reports, job, controller)
    if config is not None:
        centre.reconfigure(config)
    for task in (asyncio.create_task(devices.run(), name="trainguard-host-devices"),
                 asyncio.create_task(documents.run(), name="trainguard-fault-centre-documents"),
                 asyncio.create_task(intake.run(), name="trainguard-fault-centre")):
        held.callback(task.cancel)
    held.push_async_callback(intake.close)
    return centre
