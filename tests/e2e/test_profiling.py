"""End to end (SPEC D10): a job started with light profiling records a mark around every
step, forward pass, data-loader fetch and snapshot in each rank's files; switched to heavy
while it runs (``trainguard profiling heavy``), it marks its all-reduces too, without a
restart; a switch that cannot be read is refused naming the field. Across hosts the
controller switches every host (the original's TrainingDataTrace call)."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.hosts import Cluster
from tests.e2e.jobs import SCRIPTS, Job, Start
from trainguard import testing
from trainguard.store import sqlite

pytestmark = pytest.mark.e2e

STEPS = 60


def _profiling(job: Job, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainguard", "profiling", "--run-dir", str(job.run_dir),
         *args], capture_output=True, text=True, timeout=60, check=False)


def _starts(rank_dir: Path) -> list[dict[str, Any]]:
    """The start records of a rank's marks, oldest first."""
    records = [json.loads(line) for path in sorted(rank_dir.iterdir(), key=lambda p: int(p.name))
               for line in path.read_text().splitlines()]
    ends = {record["Id"] for record in records if record["Flag"] == 4}
    starts = [record for record in records if record["Flag"] == 2]
    assert {record["Id"] for record in starts} == ends, "every mark ended"
    return starts


def test_profiling_switched_while_the_job_runs_marks_what_the_switch_has_on(
        run_job: Start) -> None:
    job = run_job("--nproc-per-node", "2", "--profiling", "light",
                  str(SCRIPTS / "inprocess_job.py"), "--profile", "--steps", str(STEPS),
                  "--step-sleep", "0.1")
    job.wait_for_event("snapshot-interval")  # stepping
    heavy = _profiling(job, "heavy")
    refused = _profiling(job, '{"FP": "yes"}')
    asked = _profiling(job)
    assert job.wait() == 0, job.output()

    assert heavy.returncode == 0, heavy.stderr
    records = job.run_dir / "profiling" / "job"
    assert heavy.stdout == (f"profiling: CommunicationOperator, Step, SaveCheckpoint, FP, "
                            f"DataLoader (records under {records})\n")
    assert refused.returncode == 2
    assert "the profiling switch's FP is 'yes', expected \"on\" or \"off\"" in refused.stderr
    assert asked.stdout == heavy.stdout, "asked without a setting: what it is"
    switched, = job.events("profiling-switched")
    assert switched["marks"] == "CommunicationOperator, Step, SaveCheckpoint, FP, DataLoader"

    for rank in (0, 1):
        starts = _starts(records / str(rank))
        names = [record["Name"] for record in starts if record["Domain"] == "default"]
        assert [f"step {n}" for n in range(STEPS)] == [n for n in names if n.startswith("step")]
        assert {"forward", "dataloader", "save_checkpoint"} <= set(names)
        reduced = [json.loads(r["Name"]) for r in starts if r["Domain"] == "communication"]
        assert reduced, "all-reduces marked once switched to heavy"
        assert {operator["opName"] for operator in reduced} == {"allreduce"}
        first_reduce = starts.index(next(r for r in starts if r["Domain"] == "communication"))
        assert any(r["Name"] == "forward" for r in starts[:first_reduce]), \
            "none before the switch"


@pytest.mark.serial
def test_across_hosts_the_controller_switches_the_profiling_of_every_host(
        cluster: Cluster) -> None:
    controller = cluster.start_controller()
    script = [str(SCRIPTS / "inprocess_job.py"), "--profile", "--steps", str(STEPS),
              "--step-sleep", "0.1"]
    hosts = [cluster.host(node, "--nproc-per-node", "2", *script) for node in (0, 1)]
    hosts[0].wait_for("stepping", lambda: controller.events("job", "generation-started"))
    command = [sys.executable, "-m", "trainguard", "profiling", "--controller",
               controller.endpoint, "--insecure", "--job", "default/job"]
    with subprocess.Popen([*command, "--follow"], stdout=subprocess.PIPE, text=True,
                          start_new_session=True) as follower:
        try:
            assert follower.stdout is not None
            assert select.select([follower.stdout], [], [], 60)[0], "the follower said nothing"
            first = follower.stdout.readline()
            switched = subprocess.run([*command, "heavy"], capture_output=True, text=True,
                                      timeout=60, check=False)
            assert cluster.wait_all(hosts) == [0, 0], "\n".join(h.output() for h in hosts)
            followed, _ = follower.communicate(timeout=60)
        finally:
            testing.end_process_tree(follower.pid)
    assert follower.returncode == 0, "it ended with the job"
    assert first == "code 200: job job: profiling off\n"
    assert followed == switched.stdout, "then the switch, as it came"

    assert (switched.returncode, switched.stdout) == (0, (
        "code 200: job job: profiling CommunicationOperator, Step, SaveCheckpoint, FP, "
        "DataLoader\n")), switched.stderr
    for host, ranks in zip(hosts, ((0, 1), (2, 3)), strict=True):
        for rank in ranks:
            starts = _starts(host.run_dir / "profiling" / "job" / str(rank))
            names = [record["Name"] for record in starts if record["Domain"] == "default"]
            steps = [int(n.split()[1]) for n in names if n.startswith("step")]
            assert steps == list(range(steps[0], STEPS)), "every step from the switch on"
            assert any(record["Domain"] == "communication" for record in starts)
    store = sqlite.SqliteStore.open(controller.run_root / "job" / "state.db", read_only=True)
    try:
        document = store.get_document("data-trace-job")
    finally:
        store.close()
    assert document is not None
    assert json.loads(document.data["profilingSwitch"])["CommunicationOperator"] == "on"


def test_steps_that_grow_slower_than_their_baseline_make_the_host_slow_then_not(
        run_job: Start, tmp_path: Path) -> None:
    """D11 on one host: the original's FeatConf, its detection every second; steps 40 to 59
    take 0.1 s more than their 0.05 s, and the host is slow while they do (seen once their
    marks are written: every 5 s, so the normal steps after them run longer than that)."""
    feat_conf = tmp_path / "FeatConf.json"
    feat_conf.write_text(json.dumps({"jobName": "job", "nSecondsDoOneDetection": 1}))
    job = run_job("--nproc-per-node", "2", "--slow-node", str(feat_conf),
                  str(SCRIPTS / "inprocess_job.py"), "--steps", "200", "--step-work", "0.05",
                  "--slow-steps", "40:60:0.1", "--step-sleep", "0.0")
    assert job.wait() == 0, job.output()
    said = [e for e in job.events() if e["kind"].startswith("slow-node")]
    # A loaded machine may stretch a few normal steps past 30% too, and each rank's marks
    # reach its file at its own time (one rank may be seen slow a round before the other);
    # but only the slowed steps (3 times as long) make both ranks 100% slower.
    assert any(e["kind"] == "slow-node-detected" and e["ranks"] == [0, 1]
               and 1.0 < e["degradation"] < 3.5 for e in said), said
    assert said[-1]["kind"] == "slow-node-recovered", said
    for detected in (e for e in said if e["kind"] == "slow-node-detected"):
        assert detected["degradation_level"] == f"{detected['degradation'] * 100:.2f}%"
    assert (job.run_dir / "profiling" / "job" / "0").is_dir(), "light profiling turned on"
