"""End to end: snapshots as shares of the replicated state, restored bitwise identical."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Start
from trainguard.train import snapshot

pytestmark = pytest.mark.e2e


def newest_shards(run_dir: Path) -> list[tuple[int, int, list[int]]]:
    """(rank, payload bytes, holders of the tensors it lacks) of the newest checkpoint."""
    newest = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    found = []
    for path in sorted(newest.glob("rank-*.tgsnap")):
        absent: list[snapshot.Absent] = []
        header, _ = snapshot.read_snapshot(str(path), absent=absent)
        found.append((header.rank, header.payload_len, sorted({a.holder for a in absent})))
    return found


def test_shares_recover_a_crash_and_an_error_bitwise_identical(run_job: Start,
                                                               tmp_path: Path) -> None:
    common = ["--nproc-per-node", "4", "-m", "trainguard.demo.ddp_job", "--steps", "60",
              "--width", "128"]
    shares = {"TRAINGUARD_SNAPSHOT_SHARES": "1"}  # the default, said here as this test's subject
    faulty = run_job("--max-restarts", "3", "-r", "3", "--inject", "crash:1:20,exception:3:40",
                     *common, "--output", str(tmp_path / "faulty.sha"), run_id="faulty",
                     env=shares)
    assert faulty.wait() == 0, faulty.output()
    clean = run_job(*common, "--output", str(tmp_path / "clean.sha"), run_id="clean",
                    env={"TRAINGUARD_SNAPSHOT_SHARES": "0"})
    assert clean.wait() == 0, clean.output()
    assert (tmp_path / "faulty.sha").read_text() == (tmp_path / "clean.sha").read_text()
    recoveries = faulty.events("recovery-completed")
    assert [(r["restore_source"], r["restore_step"], r["steps_lost"]) for r in recoveries] == [
        ("memory", 20, 0), ("memory", 40, 0)]
    shared = newest_shards(tmp_path / "runs" / "faulty")
    whole = newest_shards(tmp_path / "runs" / "clean")
    # each rank keeps its own share of the model and optimizer state (no buffers here)
    assert [holders for _, _, holders in shared] == [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]
    assert all(holders == [] for _, _, holders in whole)
    # the four snapshots together hold about one replica's state, not four
    assert sum(size for _, size, _ in shared) < 0.35 * sum(size for _, size, _ in whole)

    # A checkpoint of shares resumes without trainguard too (torchrun, Session without agent).
    checkpoints = tmp_path / "shared-checkpoints"
    first = run_job("--nproc-per-node", "4", "--checkpoint-dir", str(checkpoints), "-m",
                    "trainguard.demo.ddp_job", "--steps", "30", "--width", "128",
                    run_id="first-half", env=shares)
    assert first.wait() == 0, first.output()
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRAINGUARD_")}
    env["TRAINGUARD_CHECKPOINT_DIR"] = str(checkpoints)
    resumed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
         "-m", "trainguard.demo.ddp_job", "--steps", "60", "--width", "128",
         "--output", str(tmp_path / "resumed.sha")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "step 0 loss" not in resumed.stdout, "it started over: the shares were not loaded"
    assert "step 50 loss" in resumed.stdout
    assert (tmp_path / "resumed.sha").read_text() == (tmp_path / "clean.sha").read_text()


def test_a_rank_killed_inside_its_snapshot_loses_no_step(run_job: Start, tmp_path: Path) -> None:
    """Rank 1 dies before its share of step 10 is written: its ring successor (rank 2), whose
    parameters and optimizer state are still step 10's, writes that share again from them on
    the agent's order, so step 10 is whole in memory and rank 2's snapshot stands in for
    rank 1."""
    marker = tmp_path / "inside"
    job = run_job("--nproc-per-node", "3", "--max-restarts", "1", "-r", "3",
                  str(SCRIPTS / "session_job.py"), "--steps", "30", "--step-sleep", "0.05",
                  "--slow-snapshot", "1:10", "--slow-snapshot-file", str(marker),
                  run_id="killed-in-snapshot", env={"TRAINGUARD_SNAPSHOT_SHARES": "1"})
    pid = int(job.wait_for("rank 1 inside its snapshot of step 10",
                           lambda: marker.exists() and marker.read_text()))
    os.kill(pid, signal.SIGKILL)
    assert job.wait() == 0, job.output()
    (recovery,) = job.events("recovery-completed")
    assert (recovery["restore_step"], recovery["steps_lost"]) == (10, 0), job.output()
    assert recovery["restore_source"] == "memory and peers", recovery
    assert "completed step redone" not in job.output()
    # The shares were in use: the newest checkpoint's snapshots leave tensors to holders.
    assert [holders for _, _, holders in newest_shards(tmp_path / "runs" / "killed-in-snapshot")
            ] == [[1, 2], [0, 2], [0, 1]]


def test_replicas_that_differ_are_snapshotted_whole_with_a_warning(run_job: Start,
                                                                   tmp_path: Path) -> None:
    job = run_job("--nproc-per-node", "3", str(SCRIPTS / "divergent_job.py"), run_id="divergent")
    assert job.wait() == 0, job.output()
    assert ("the replicated state (everything saved but the per-rank keys) differs between "
            "ranks that should hold the same: replica groups [[0, 1, 2]] at dp-size 3. Is the "
            "script data parallel, and is the dp-size right? Snapshots stay whole on every "
            "rank from now on, and no replica stands in for a lost rank.") in job.output()
    assert "the replicas differ (replica groups [[0, 1, 2]] at dp-size 3)" in job.output()
    assert all(holders == [] for _, _, holders in newest_shards(tmp_path / "runs" / "divergent"))


def test_replicas_that_differ_never_stand_in_for_a_lost_rank(run_job: Start,
                                                             tmp_path: Path) -> None:
    """Two ranks said to be replicas (the default dp-size) train different weights. Rank 1's
    device fails: moving it to a spare would restore it from its replica's snapshot, rank 0's
    state. The ranks' comparison told the agent that the replicas differ, so the job restarts
    instead, every rank from its own snapshot."""
    output = tmp_path / "weight"
    job = run_job("--nproc-per-node", "2", "--max-restarts", "2", "--spare-devices", "1",
                  "--inject", "device-error:1:10", str(SCRIPTS / "divergent_recovery_job.py"),
                  "--steps", "30", "--output", str(output), run_id="divergent-recovery")
    assert job.wait() == 0, job.output()
    assert [Path(f"{output}.{rank}").read_text() for rank in range(2)] == ["31\n", "32\n"]
    assert ("the replicas differ (replica groups [[0, 1]] at dp-size 2): no replica stands in "
            "for a lost rank from now on") in job.output()
    (decision,) = job.events("decision")
    assert decision["strategy"] == "exit", decision
    assert ("the ranks found their replicas different, so none stands in for another"
            in decision["reason"]), decision
    (recovery,) = job.events("recovery-completed")
    assert (recovery["restore_source"], recovery["steps_lost"]) == ("memory", 0), recovery


def test_a_scripts_dp_size_that_is_not_the_jobs_stops_it_naming_both(run_job: Start,
                                                                       tmp_path: Path) -> None:
    """The agent restores ranks from replicas by the job's dp-size: a script that says other
    replicas is stopped at once, not left to be restored from ranks that are none."""
    script = tmp_path / "own_dp_size.py"
    script.write_text("import trainguard.train\n"
                      "trainguard.train.Session(dp_size=1).close()\n")
    job = run_job("--nproc-per-node", "2", str(script), run_id="own-dp-size")
    assert job.wait() != 0
    assert ("dp_size=1 is not the job's dp-size 2 (TRAINGUARD_DP_SIZE='2': trainguard run "
            "--dp-size, by default the world size), by which the agent restores a rank from its "
            "replicas: run with --dp-size 1") in job.output()
    fixed = run_job("--nproc-per-node", "2", "--dp-size", "1", str(script), run_id="dp-size-1")
    assert fixed.wait() == 0, fixed.output()
