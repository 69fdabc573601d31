"""``trainguard events``: a run's recorded events as a table or as JSON lines."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from trainguard import clock as clocks
from trainguard.cli import events_command, main
from trainguard.job import events
from trainguard.launcher import STORE_NAME
from trainguard.store import api, recorder, sqlite


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "runs" / "job"
    store = sqlite.SqliteStore.open(directory / STORE_NAME)
    try:
        record = recorder.EventRecorder(store, clocks.SystemClock()).record
        record(events.FaultInjectionRequested(job="job", rank=1, kind="memory-error",
                                              at_step=3))
        record(events.DecisionMade(job="job", generation=0, strategy="exit",
                                   reason="rank 1 failed", restarts_left=2))
    finally:
        store.close()
    return directory


def invoke(*args: str) -> str:
    result = CliRunner().invoke(main.app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_json_keeps_the_envelope_apart_from_the_event_data(run_dir: Path) -> None:
    lines = [json.loads(line) for line in
             invoke("events", "--json", "--run-dir", str(run_dir)).splitlines()]
    assert [line["kind"] for line in lines] == ["fault-injection", "decision"]
    assert set(lines[0]) == {"id", "time", "kind", "data"}
    assert lines[0]["data"] == {"job": "job", "rank": 1, "kind": "memory-error", "at_step": 3}


def test_an_unknown_kind_is_refused_with_the_known_kinds(run_dir: Path) -> None:
    result = CliRunner().invoke(main.app, ["events", "--kind", "fault", "--run-dir",
                                           str(run_dir)])
    assert result.exit_code == 2
    assert "unknown kind 'fault'" in result.output
    assert "fault-detected" in result.output
    assert "job-finished" in result.output


def test_limit_keeps_the_last_events_oldest_first(run_dir: Path) -> None:
    lines = invoke("events", "--json", "--limit", "1", "--run-dir", str(run_dir)).splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["decision"]


def test_since_takes_a_duration_or_an_iso_time() -> None:
    now = 1_700_000_000.0
    assert events_command.parse_since("10m", now=now) == clocks.iso_utc(now - 600)
    assert events_command.parse_since("2h", now=now) == clocks.iso_utc(now - 7200)
    assert events_command.parse_since("2023-11-14T22:13:20Z", now=now) == clocks.iso_utc(now)
    with pytest.raises(typer.BadParameter, match="neither a duration"):
        events_command.parse_since("yesterday", now=now)


def test_since_leaves_out_older_events(run_dir: Path) -> None:
    assert invoke("events", "--json", "--since", "1h", "--run-dir", str(run_dir)).count(
        "\n") == 2
    assert invoke("events", "--json", "--since", "2999-01-01T00:00Z", "--run-dir",
                  str(run_dir)) == ""


def test_lines_show_local_time_rounded_durations_and_are_not_cut() -> None:
    reason = "rank 3 failed " + "with a long reason " * 10
    event = api.StoredEvent(7, "2026-12-01T10:00:00.000Z", "recovery-failed", {
        "job": "job", "generation": 2, "fault_rank": 3, "strategy": "recover",
        "reason": reason, "seconds": 1.23456, "recover_seconds": 12.3456})
    line = events_command.format_event(event)
    local = datetime.datetime(2026, 12, 1, 10, tzinfo=datetime.UTC).astimezone()
    assert line.startswith(f"{local:%Y-%m-%d %H:%M:%S}  recovery-failed")
    assert "recover_seconds=12.35s" in line
    assert "seconds=1.23s," in line
    assert reason in line
    assert "job=" not in line


def test_follow_returns_once_a_run_that_is_not_running_has_nothing_new(run_dir: Path) -> None:
    lines = invoke("events", "--follow", "--json", "--run-dir", str(run_dir)).splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["fault-injection", "decision"]


def test_step_progress_samples_are_shown_only_when_asked_for(run_dir: Path) -> None:
    store = sqlite.SqliteStore.open(run_dir / STORE_NAME)
    try:
        recorder.EventRecorder(store, clocks.SystemClock()).record(events.StepProgress(
            job="job", generation=0, step=7, steps_per_second=9.5, at=12.0))
    finally:
        store.close()
    shown = [json.loads(line)["kind"] for line in
             invoke("events", "--json", "--run-dir", str(run_dir)).splitlines()]
    assert shown == ["fault-injection", "decision"]
    asked = [json.loads(line)["kind"] for line in invoke(
        "events", "--json", "--kind", "step-progress", "--run-dir", str(run_dir)).splitlines()]
    assert asked == ["step-progress"]
