"""The running job's watch over device levels and fault configuration files."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.controller.test_controller_job_controller import FakeClock
from trainguard.controller import device_levels, fault_config
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level
from trainguard.job import events

TIMEOUT = 10.0


def _watch(engine: device_health.FaultEngine, config: fault_config.FaultConfigDirectory | None,
           clock: FakeClock, recorded: list[events.Event], until: type[events.Event],
           *, count: int = 1) -> None:
    """Run the watch until ``count`` events of type ``until`` are recorded."""
    async def scenario() -> None:
        task = asyncio.create_task(device_levels.watch(
            engine, config=config, interval=0.01, record=recorded.append, clock=clock,
            job="job"))
        try:
            while sum(isinstance(event, until) for event in recorded) < count:
                await asyncio.sleep(0.01)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(asyncio.wait_for(scenario(), timeout=TIMEOUT))


def test_time_alone_raises_a_lasting_link_down_and_the_change_is_recorded() -> None:
    engine = device_health.FaultEngine()
    clock = FakeClock()
    engine.report(DeviceFaultEvent("device-0", "81078603", Assertion.OCCUR, clock.wall()))
    clock.now += 21.0  # past the default FaultTimeout of 20 s
    recorded: list[events.Event] = []

    _watch(engine, None, clock, recorded, events.DeviceLevelChanged)

    (changed,) = [e for e in recorded if isinstance(e, events.DeviceLevelChanged)]
    assert (changed.device, changed.before, changed.level) == (
        "device-0", "NotHandleFault", "PreSeparateNPU")
    assert [reason["upgrade_type"] for reason in changed.added] == ["FaultDuration"]


def test_a_file_broken_while_running_keeps_the_last_good_configuration(tmp_path: Path) -> None:
    codes = {"SeparateNPUCodes": ["80E01801"]}
    (tmp_path / "faultCode.json").write_text(json.dumps(codes))
    config = fault_config.FaultConfigDirectory(tmp_path)
    config.poll()
    engine = device_health.FaultEngine(table=config.config.codes,
                                       customization=config.config.customization)
    (tmp_path / "faultCode.json").write_text("{not json")
    recorded: list[events.Event] = []

    _watch(engine, config, FakeClock(), recorded, events.FaultConfigLoaded)

    (loaded,) = [e for e in recorded if isinstance(e, events.FaultConfigLoaded)]
    assert loaded.reloaded is False
    (problem,) = loaded.problems
    assert problem.startswith(f"{tmp_path / 'faultCode.json'}: not valid JSON")
    assert problem.endswith("[last good configuration kept]")
    health = engine.report(DeviceFaultEvent("device-1", "80E01801", Assertion.ONCE, 1.0))
    assert health.level is Level.SEPARATE_NPU


def test_a_new_file_takes_effect_in_the_running_job(tmp_path: Path) -> None:
    config = fault_config.FaultConfigDirectory(tmp_path)
    config.poll()
    engine = device_health.FaultEngine(table=config.config.codes,
                                       customization=config.config.customization)
    assert engine.report(DeviceFaultEvent("device-1", "80E01801", Assertion.ONCE, 1.0)).level \
        is Level.RESTART_BUSINESS
    (tmp_path / "faultCode.json").write_text(json.dumps({"SeparateNPUCodes": ["80E01801"]}))
    recorded: list[events.Event] = []

    _watch(engine, config, FakeClock(), recorded, events.FaultConfigLoaded)

    (loaded,) = [e for e in recorded if isinstance(e, events.FaultConfigLoaded)]
    assert (loaded.reloaded, loaded.problems) == (True, [])
    health = engine.report(DeviceFaultEvent("device-2", "80E01801", Assertion.ONCE, 2.0))
    assert health.level is Level.SEPARATE_NPU
