"""Keeps the devices' levels current while a job runs, as the original's device plugin does on
its polling period: time alone changes them (a fault lasting past its timeout, a release window
passing), and so does a new configuration. Each change is recorded, with the upgrade reasons
added and removed (the original records a Kubernetes event for each removal)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from trainguard import clock as clocks
from trainguard.controller import fault_config
from trainguard.faults.device import device_health
from trainguard.job import events

__all__ = ["watch"]


async def watch(engine: device_health.FaultEngine, *,
                config: fault_config.FaultConfigDirectory | None, interval: float,
                record: Callable[[events.Event], object], clock: clocks.Clock, job: str) -> None:
    """Every ``interval`` seconds: apply changed configuration files (a file that cannot be used
    leaves the last good configuration in force), then evaluate every device with state."""
    while True:
        await asyncio.sleep(interval)
        if config is not None:
            changed, problems = config.poll()
            if changed:
                engine.reconfigure(table=config.config.codes,
                                   customization=config.config.customization)
            if changed or problems:
                record(events.FaultConfigLoaded(
                    job=job, directory=str(config.directory), reloaded=changed,
                    problems=[problem.describe() for problem in problems]))
        for health in engine.sweep(clock.wall()):
            record(events.DeviceLevelChanged(
                job=job, device=health.device, before=str(health.previous),
                level=str(health.level),
                reset_policy=str(health.reset_policy),
                added=[reason.to_data() for reason in health.added],
                removed=[reason.to_data() for reason in health.removed]))
