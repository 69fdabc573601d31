"""The fault-engine benchmark runs at tiny sizes, and refuses to report on an engine that does
not escalate (the full measurement: ``python -m benchmarks.fault_engine``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from benchmarks import common, fault_engine, summary
from trainguard.faults.device import customization, device_health
from trainguard.faults.device.device_events import Assertion

_SMALL = ["--devices", "400", "--events", "2000", "--seed", "1", "--no-pin"]


def test_the_workload_is_deterministic_in_time_order_and_named_like_devices() -> None:
    def make(seed: int) -> fault_engine.Workload:
        return fault_engine.generate(devices=100, history_hours=2, events=300,
                                     per_device_day=50, flaky_share=0.05, seed=seed)

    first, again, other = make(1), make(1), make(2)
    assert first.history == again.history
    assert first.stream == again.stream
    assert first.stream != other.stream
    assert len(first.stream) == 300
    timeline = [*first.history, *first.stream]
    assert [event.time for event in timeline] == sorted(event.time for event in timeline)
    assert all(event.time < fault_engine.EPOCH + 7200 for event in first.history)
    assert all(event.time >= fault_engine.EPOCH + 7200 for event in first.stream)
    assert first.names[9] == "node-0001/npu-1"
    assert {event.assertion for event in timeline} == set(Assertion)


def test_a_small_run_prints_one_json_object_and_writes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "fault_engine.json"
    assert fault_engine.main([*_SMALL, "--output", str(output)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert json.loads(output.read_text()) == result
    assert result["sanity"] == "ok"
    assert result["devices"] == 400
    assert result["events"] == 2000
    assert result["history"]["events"] == result["history_events"] > 0
    assert result["stream"]["events_per_second"] > 0
    assert sum(result["levels"].values()) == 400
    assert result["levels"]["ManuallySeparateNPU"] > 0
    assert result["levels"]["PreSeparateNPU"] > 0
    assert result["memory"]["engine_reachable_bytes"] > 0
    assert result["met"] is (result["stream"]["events_per_second"] >= 100_000)
    # the summary renders it
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    lines: list[str] = []
    summary._fault_engine(lines)
    assert "python -m benchmarks.fault_engine --devices 400" in "\n".join(lines)


def test_an_engine_that_escalates_nothing_fails_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_health, "FaultEngine", functools.partial(
        device_health.FaultEngine, customization=customization.Customization()))
    output = tmp_path / "fault_engine.json"
    assert fault_engine.main([*_SMALL, "--no-reachable", "--output", str(output)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "BROKEN ENGINE" in captured.err
    assert not output.exists()
