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
           clock: FakeClock, recorded: list[events.Event], until: type[events.Event] | None,
           *, changed: list[device_health.DeviceHealth] | None = None) -> None:
    """Run the watch until an event of type ``until`` is recorded (None: a device changed)."""
    changed = changed if changed is not None else []
    async def scenario() -> None:
        task = asyncio.create_task(device_levels.watch(
            [engine], config=config, interval=0.01, record=recorded.append, clock=clock,
            job="job", changed=changed.append))
        try:
            while not (any(isinstance(event, until) for event in recorded) if until
                       else changed):
                await asyncio.sleep(0.01)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(asyncio.wait_for(scenario(), timeout=TIMEOUT))


def test_time_alone_raises_a_lasting_link_down_and_the_change_is_handed_on() -> None:
    engine = device_health.FaultEngine()
    clock = FakeClock()
    engine.report(DeviceFaultEvent("device-0", "81078603", Assertion.OCCUR, clock.wall()))
    clock.now += 21.0  # past the default FaultTimeout of 20 s
    changed: list[device_health.DeviceHealth] = []

    _watch(engine, None, clock, [], None, changed=changed)

    (health,) = changed
    assert (health.device, health.previous, health.level) == (
        "device-0", Level.NOT_HANDLE_FAULT, Level.PRE_SEPARATE_NPU)
    assert [str(reason.upgrade_type) for reason in health.added] == ["FaultDuration"]


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
