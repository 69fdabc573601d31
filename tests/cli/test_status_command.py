"""``trainguard status``: which run it picks, and what it shows of the live document."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from trainguard import clock as clocks
from trainguard.agent import node_agent, step_statistics
from trainguard.cli import main, runs
from trainguard.detect.devices import backend, device_info, naming
from trainguard.faults import process
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.job import events
from trainguard.launcher import STORE_NAME
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel, grpc_security
from trainguard.store import recorder, sqlite
from trainguard.telemetry import live


class FakeClock:
    def __init__(self) -> None:
        self.now = 500.0
        self.wall_now = 1_800_000_000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_now


def make_run(root: Path, name: str, *, pid: int | None) -> Path:
    directory = root / name
    sqlite.SqliteStore.open(directory / STORE_NAME).close()
    if pid is not None:
        (directory / node_agent.AGENT_FILE).write_text(json.dumps({"pid": pid}))
    return directory


def dead_pid() -> int:
    pid = 2**22 - 1
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def test_the_newest_running_run_is_chosen_over_a_newer_ended_one(tmp_path: Path) -> None:
    running = make_run(tmp_path, "running", pid=os.getpid())
    make_run(tmp_path, "ended", pid=None)
    make_run(tmp_path, "killed", pid=dead_pid())
    choice = runs.choose(None, tmp_path)
    assert choice.directory == running
    assert choice.running
    assert choice.why == f"the newest running run under {tmp_path}"


def test_without_a_running_run_the_newest_is_chosen_and_said_so(tmp_path: Path) -> None:
    make_run(tmp_path, "older", pid=None)
    newest = make_run(tmp_path, "newest", pid=dead_pid())
    os.utime(newest / STORE_NAME, (2e9, 2e9))
    choice = runs.choose(None, tmp_path)
    assert (choice.directory, choice.running) == (newest, False)
    assert choice.why == f"the newest run under {tmp_path}; none is running"


def test_no_run_is_a_usage_error_that_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(typer.BadParameter, match=f"no run with state.db under {tmp_path}"):
        runs.choose(None, tmp_path)


def test_the_live_document_carries_each_rank_and_the_tally(tmp_path: Path) -> None:
    clock = FakeClock()
    tally = live.JobTally(max_restarts=3, clock=clock)
    tally.event(events.GenerationStarted(job="job", generation=1, world_size=2,
                                         master_port=1, restart_count=1,
                                         restore_source="memory", restore_step=4,
                                         plan_seconds=0.0))
    tally.event(events.DecisionMade(job="job", generation=0, strategy="exit", reason="r",
                                    restarts_left=2))
    tally.event(events.CheckpointPersisted(job="job", step=4, path="p", nbytes=10,
                                           seconds=0.1))
    statistics = step_statistics.StepStatistics()
    for at in (490.0, 491.0, 492.0):
        statistics.began(0, at)
    statistics.heard(0, 499.0)
    statistics.snapshot(0, step=3, nbytes=64, seconds=0.01, at=495.0)
    activity = [statistics.activity(0, pid=42, device=0, step=3),
                statistics.activity(1, pid=None, device=1, step=None)]
    document = live.LiveDocument.of(job="job", tally=tally, activity=activity, clock=clock)
    assert live.LiveDocument.from_data(json.loads(json.dumps(document.to_data()))) == document
    assert (document.generation, document.restarts_left, document.persisted_step) == (1, 2, 4)
    first, second = document.ranks
    assert (first.pid, first.step, first.steps_per_second, first.snapshot_step) == (42, 3, 1.0, 3)
    assert first.heartbeat_at == clocks.iso_utc(clock.wall_now - 1.0)
    assert (second.pid, second.heartbeat_at, second.steps_per_second) == (None, None, None)


def test_status_shows_each_rank_and_the_job(tmp_path: Path) -> None:
    directory = make_run(tmp_path, "job", pid=None)
    store = sqlite.SqliteStore.open(directory / STORE_NAME)
    clock = clocks.SystemClock()
    events_recorder = recorder.EventRecorder(store, clock)
    tally = live.JobTally(max_restarts=1, clock=clock)
    events_recorder.subscribe(tally.event)
    events_recorder.record(events.FaultDetected.of(job="job", generation=0, fault=(
        process.ProcessFault(rank=1, pid=7, kind=process.ProcessFaultKind.EXITED,
                             returncode=1, detected_at=clock.monotonic(), last_step=2))))
    statistics = step_statistics.StepStatistics()
    statistics.heard(0, clock.monotonic())
    events_recorder.publish(live.document_name("job"), live.LiveDocument.of(
        job="job", tally=tally, clock=clock,
        activity=[statistics.activity(0, pid=None, device=0, step=9)]).to_data())
    events_recorder.publish("job-status-job", {"state": "succeeded", "reason": "done",
                                               "restarts_used": 0})
    store.close()
    result = CliRunner().invoke(main.app, ["status", "--run-dir", str(directory)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"run job (not running, given with --run-dir): {directory}"
    assert lines[1] == ("job: succeeded (done); generation -1; restarts 0 used, 1 left; "
                        "faults 1")
    assert lines[2] == "last persisted checkpoint: -"
    assert lines[3].split() == ["rank", "pid", "device", "step", "steps/s", "heartbeat",
                                "snapshot"]
    assert lines[5].split()[:5] == ["0", "-", "0", "9", "-"]
    data = json.loads(CliRunner().invoke(main.app, ["status", "--json", "--run-dir",
                                                    str(directory)]).output)
    assert data["ranks"][0]["step"] == 9
    assert data["faults"] == 1
    assert data["restarts_left"] == 1


def test_watch_draws_once_and_returns_for_a_run_that_is_not_running(tmp_path: Path) -> None:
    directory = make_run(tmp_path, "job", pid=dead_pid())
    result = CliRunner().invoke(main.app, ["status", "--watch", "--interval", "0.1",
                                           "--run-dir", str(directory)])
    assert result.exit_code == 0, result.output
    assert f"run job (not running, given with --run-dir): {directory}" in result.output
    assert "no live status recorded for this run" in result.output


def test_a_controllers_jobs_are_shown_host_by_host(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = pb.ClusterStatus(version=1)
    job = answer.jobs.add(job="job7", state="running", nnodes=2, nproc_per_node=2, generation=1)
    job.hosts.add(place=0, host="host0", state="holding ranks", ranks=[0, 1])
    job.hosts.add(place=1, host="host2", state="holding ranks", ranks=[2, 3])
    job.hosts.add(place=2, host="host2-old", state="lost", ranks=[])

    async def ask(address: str, *, timeout: float,
                  security: grpc_security.ClientSecurity) -> pb.ClusterStatus:
        assert (address, security.insecure) == ("ctrl:29400", True)
        return answer

    monkeypatch.setattr(grpc_channel, "cluster_status", ask)
    result = CliRunner().invoke(main.app, ["status", "--controller", "ctrl:29400",
                                           "--insecure"], terminal_width=120)
    assert result.exit_code == 0, result.output
    assert "job job7: running, generation 1, 2 hosts of 2 ranks" in result.output
    rows = [line.split() for line in result.output.splitlines() if "host" in line]
    assert ["1", "host2", "holding", "ranks", "2,", "3"] in rows
    assert ["2", "host2-old", "lost", "-"] in rows


def test_a_controllers_hosts_devices_show_levels_separations_and_jobs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answer = pb.ClusterStatus(version=1)
    node = answer.nodes.add(node="host0", jobs=["job7"])
    node.devices.add(device=0, level="NormalNPU", health="healthy", job="job7")
    node.devices.add(device=1, level="ManuallySeparateNPU", health="isolated", separated=True,
                     codes=["80E01801"], job="job7")
    asked = []

    async def ask(address: str, *, timeout: float,
                  security: grpc_security.ClientSecurity) -> pb.ClusterStatus:
        asked.append(address)
        if len(asked) > 2:
            raise KeyboardInterrupt  # Ctrl-C while watching
        return answer

    monkeypatch.setattr(grpc_channel, "cluster_status", ask)
    result = CliRunner().invoke(main.app, ["status", "--controller", "ctrl:29400",
                                           "--insecure", "--watch", "--interval", "0.1"],
                                terminal_width=120)
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines() if "host0" in line]
    assert ["host0", "1", "isolated", "(ManuallySeparateNPU)", "yes", "80E01801", "job7"] in rows
    assert ["host0", "0", "healthy", "(NormalNPU)", "-", "job7"] in rows
    assert len(asked) == 3, "--watch asks again every --interval"
    asked.clear()

    result = CliRunner().invoke(main.app, ["status", "--controller", "ctrl:29400",
                                           "--insecure", "--json"])
    devices = json.loads(result.output)["nodes"][0]["devices"]
    assert devices[1]["separated"] is True
    assert devices[1]["level"] == "ManuallySeparateNPU"


def test_a_hosts_devices_node_and_detectors_are_shown_from_its_documents(
        tmp_path: Path) -> None:
    """The documents the agent writes: the device document (each device at its worst fault),
    the node document, each detector's state; in the table and in --json."""
    run_dir = make_run(tmp_path, "job", pid=None)
    engine = device_health.FaultEngine()
    healths = {"device-1": engine.report(DeviceFaultEvent("device-1", "80E3A201",
                                                          Assertion.OCCUR, 1.7e9))}
    document = device_info.device_info(
        node="host-a", inventory=backend.Inventory(tuple(
            backend.DeviceIdentity(i, i) for i in range(2))),
        healths=healths, naming=naming.default_naming("sim"), now=1.7e9)
    store = sqlite.SqliteStore.open(run_dir / STORE_NAME)
    try:
        store.put_document(document.name, document.to_data(), time="t")
        store.put_document("mindx-dl-nodeinfo-host-a", {"NodeInfo": {
            "FaultDevList": [], "NodeStatus": "Healthy"}, "CheckCode": "x"}, time="t")
        store.put_document("detectors-host-a", {
            "devices": {"status": "running", "mode": "subscription", "last_error": ""},
            "node": {"working": False, "mode": "reads the BMC every 60 s",
                     "last_error": "ipmitool is not installed"}}, time="t")
    finally:
        store.close()

    shown = CliRunner().invoke(main.app, ["status", "--run-dir", str(run_dir)])
    assert shown.exit_code == 0, shown.output
    assert "node host-a: Healthy" in shown.output
    assert "Ascend910-0   healthy (NormalNPU)" in shown.output
    assert "Ascend910-1   isolated (SeparateNPU)   80E3A201" in shown.output
    assert "ipmitool is not installed" in shown.output
    data = json.loads(CliRunner().invoke(
        main.app, ["status", "--run-dir", str(run_dir), "--json"]).output)
    assert data["devices"][1] == {"node": "host-a", "device": "Ascend910-1",
                                  "level": "SeparateNPU", "health": "isolated",
                                  "codes": ["80E3A201"]}
    assert data["detectors"]["host-a/node"]["working"] is False
