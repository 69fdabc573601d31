"""Keeps the devices' levels current while jobs run, as the original's device plugin does on
its polling period: time alone changes them (a fault lasting past its timeout, a release window
passing), and so does a new configuration. Each change goes to ``changed`` (the job on the
device records it, with the upgrade reasons added and removed, and acts on it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from trainguard import clock as clocks
from trainguard.controller import fault_config
from trainguard.faults.device import device_health
from trainguard.job import events

__all__ = ["watch"]


async def watch(engines: Sequence[device_health.FaultEngine], *,
                config: fault_config.FaultConfigDirectory | None, interval: float,
                record: Callable[[events.Event], object], clock: clocks.Clock, job: str,
                changed: Callable[[device_health.DeviceHealth], object] | None,
                reconfigured: Callable[[fault_config.FaultConfig], object] | None = None
                ) -> None:
    """Every ``interval`` seconds: apply changed configuration files to every engine (a file
    that cannot be used leaves the last good configuration in force) and tell
    ``reconfigured``, then, with ``changed``, evaluate every device of the first engine with
    state. (The others, the device detectors' graders, evaluate their own devices.)"""
    while True:
        await asyncio.sleep(interval)
        if config is not None:
            reloaded, problems = config.poll()
            if reloaded:
                for engine in engines:
                    engine.reconfigure(table=config.config.codes,
                                       customization=config.config.customization)
                if reconfigured is not None:
                    reconfigured(config.config)
            if reloaded or problems:
                record(events.FaultConfigLoaded(
                    job=job, directory=str(config.directory), reloaded=reloaded,
                    problems=[problem.describe() for problem in problems]))
        if changed is not None:
            for health in engines[0].sweep(clock.wall()):
                changed(health)
