"""Choosing a backend by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.detect.devices.conftest import FakeClock
from trainguard.detect.devices import npu, nvml, registry, sim
from trainguard.faults.device.replay import TimelineError


def test_backends_by_name(tmp_path: Path, clock: FakeClock) -> None:
    assert isinstance(registry.create_backend(registry.BackendSettings(), clock=clock),
                      sim.SimBackend)
    nvidia = registry.create_backend(registry.BackendSettings(name="nvml"), clock=clock)
    assert isinstance(nvidia, nvml.NvmlBackend)
    assert nvidia.polls_while_subscribed
    assert isinstance(registry.create_backend(registry.BackendSettings(name="npu"), clock=clock),
                      npu.NpuBackend)
    timeline = tmp_path / "t.jsonl"
    timeline.write_text('{"time": 0, "device": 3, "code": "80E01801"}\n')
    polled = registry.create_backend(registry.BackendSettings(
        devices=4, timeline=timeline, subscription=False), clock=clock)
    polled.open()
    assert polled.poll().present == {"device-3": frozenset({"80E01801"})}


def test_bad_settings_are_refused(tmp_path: Path, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="device backend 'cuda' is not one of sim, nvml, npu"):
        registry.BackendSettings(name="cuda")
    with pytest.raises(ValueError, match="devices: expected at least 1 simulated device, got 0"):
        registry.BackendSettings(devices=0)
    timeline = tmp_path / "t.jsonl"
    timeline.write_text('{"time": 0, "device": 9, "code": "80E01801"}\n')
    with pytest.raises(TimelineError, match="line 1: device: 9 is not a device"):
        registry.create_backend(registry.BackendSettings(devices=2, timeline=timeline),
                                clock=clock)
