"""End to end: real worker processes, real faults, real recoveries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Job, Start

pytestmark = [pytest.mark.e2e, pytest.mark.serial]


def digest(path: Path) -> str:
    return path.read_text().split()[0]


def test_crash_hang_and_exception_recovered_bitwise_identical(run_job: Start,
                                                              tmp_path: Path) -> None:
    common = ["--nproc-per-node", "4", "-r", "3", "-m", "trainguard.demo.ddp_job",
              "--steps", "90", "--width", "128"]
    faulty = run_job("--max-restarts", "3", "--inject", "crash:1:20,hang:2:45,exception:3:70",
                     *common, "--output", str(tmp_path / "faulty.sha"), run_id="faulty")
    assert faulty.wait() == 0, faulty.output()
    clean = run_job(*common, "--output", str(tmp_path / "clean.sha"), run_id="clean")
    assert clean.wait() == 0, clean.output()
    assert digest(tmp_path / "faulty.sha") == digest(tmp_path / "clean.sha")
    faults = faulty.events("fault-detected")
    assert [(f["rank"], f["injected"], f["last_step"]) for f in faults] == [
        (1, "crash", 20), (2, "hang", 45), (3, "exception", 70)]
    assert [f["fault_kind"] for f in faults] == ["signaled", "hung", "raised"]
    recoveries = faulty.events("recovery-completed")
    assert [(r["restore_source"], r["restore_step"], r["steps_lost"]) for r in recoveries] == [
        ("memory", 20, 0), ("memory", 45, 0), ("memory", 70, 0)]
    hang = faults[1]
    assert hang["detect_seconds"] < 10, "a SIGSTOPped rank must be caught in seconds"
    assert "bitwise" not in faulty.output()  # plain run: no demo verdict
    finished = faulty.events("job-finished")[-1]
    assert (finished["outcome"], finished["restarts_used"]) == ("succeeded", 3)
    console = faulty.output()
    assert "Faults and recoveries" in console
    assert "memory@70" in console


def test_retry_budget_exhausted(run_job: Start) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "1", "--inject",
                  "crash:0:5,crash:1:10", "-r", "3", str(SCRIPTS / "session_job.py"),
                  "--steps", "30")
    assert job.wait() == 1
    decisions = job.events("decision")
    assert [d["strategy"] for d in decisions] == ["exit", "fail"]
    assert "retry budget exhausted (max-restarts 1)" in decisions[-1]["reason"]
    assert "retry budget exhausted" in job.output()
    assert "[root cause] rank 1: SIGKILL" in job.output()
    # The last complete snapshot is made durable before giving up. Rank 1 died at the start of
    # step 10, after its snapshot of 10; rank 0 has it too unless it was still inside step 9's
    # all-reduce when its peer vanished.
    persisted = job.events("checkpoint-persisted")
    assert persisted, "nothing was persisted when the job failed"
    assert persisted[-1]["step"] in (9, 10)


def test_crash_loop_fails_at_once_with_the_error(run_job: Start) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "5",
                  str(SCRIPTS / "broken_job.py"))
    assert job.wait() == 1
    reason = job.events("job-finished")[-1]["reason"]
    assert reason.startswith("crash loop: all 2 ranks failed within")
    assert len(job.events("generation-started")) == 1, "a crash loop must not be retried"
    assert "configuration file missing: /nonexistent/config.yaml" in job.output()
    assert "[also failed] rank" in job.output()


def test_unmodified_torchrun_script_is_restarted(run_job: Start, tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    job = run_job("--nproc-per-node", "2", "--max-restarts", "2",
                  str(SCRIPTS / "plain_job.py"), str(records), run_id="plain")
    assert job.wait() == 0, job.output()
    first = json.loads((records / "env-0-1.json").read_text())
    second = json.loads((records / "env-1-1.json").read_text())
    assert first["RANK"] == "1"
    assert first["WORLD_SIZE"] == first["LOCAL_WORLD_SIZE"] == "2"
    assert (first["GROUP_RANK"], first["ROLE_RANK"], first["ROLE_NAME"]) == ("0", "1", "default")
    assert (first["TORCHELASTIC_RUN_ID"], first["TORCHELASTIC_MAX_RESTARTS"]) == ("plain", "2")
    assert first["OMP_NUM_THREADS"] == first["THP_MEM_ALLOC_ENABLE"] == "1"
    assert second["TORCHELASTIC_RESTART_COUNT"] == "1"
    # A job-level restart starts every rank of the host again, together.
    assert first["TRAINGUARD_STARTING_PROCESSES"] == second["TRAINGUARD_STARTING_PROCESSES"] == "2"
    assert first["MASTER_PORT"] != second["MASTER_PORT"], "each generation gets a fresh store"
    fault = job.events("fault-detected")[0]
    assert (fault["rank"], fault["returncode"]) == (1, 3)


def test_fault_injection_from_the_command_line(run_job: Start) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "3", "-r", "3",
                  str(SCRIPTS / "session_job.py"), "--steps", "600", "--step-sleep", "0.02")
    job.wait_for("the first steps", lambda: "restored step" in _worker_log(job))
    inject = [sys.executable, "-m", "trainguard", "fault", "inject", "--run-dir",
              str(job.run_dir)]
    # Each injection is a process start (a second or more on a busy machine): the refused one
    # first, and the job long enough that the last still finds it before step 590.
    refused = subprocess.run([*inject, "--rank", "7", "hang"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert refused.returncode == 1, refused.stderr
    assert "there is no rank 7; the job has ranks 0..1" in refused.stderr
    done = subprocess.run([*inject, "--rank", "1", "crash"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sent SIGKILL to rank 1")
    job.wait_for_event("recovery-completed")
    done = subprocess.run([*inject, "--rank", "0", "exception", "--at-step", "590"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "rank 0 gets the exception at step 590" in done.stdout
    assert job.wait() == 0, job.output()
    faults = job.events("fault-detected")
    assert [(f["rank"], f["injected"]) for f in faults] == [(1, "crash"), (0, "exception")]
    assert faults[1]["last_step"] == 590
    assert len(job.events("fault-injection")) == 2  # the refused one is not recorded


def test_graceful_stop_saves_a_dying_checkpoint_and_resumes(run_job: Start,
                                                            tmp_path: Path) -> None:
    arguments = ["--nproc-per-node", "2", "-r", "3", "--persist-interval", "1000",
                 str(SCRIPTS / "session_job.py")]
    job = run_job(*arguments, "--steps", "100000", "--step-sleep", "0.01", run_id="stopped")
    job.wait_for("steps", lambda: "restored step" in _worker_log(job))
    job.signal(signal.SIGTERM)
    assert job.wait() == 143, job.output()
    finished = job.events("job-finished")[-1]
    assert (finished["outcome"], finished["reason"]) == ("stopped", "received SIGTERM")
    persisted = job.events("checkpoint-persisted")
    assert len(persisted) == 1, "the dying checkpoint is the only one persisted"
    stop_step = persisted[0]["step"]
    assert stop_step > 0
    resumed = run_job(*arguments, "--steps", str(stop_step + 5), run_id="stopped")
    assert resumed.wait() == 0, resumed.output()
    assert f"rank 0 restored step {stop_step} from disk" in _worker_log(resumed, attempt=0)


def _worker_log(job: Job, *, rank: int = 0, attempt: int | None = None) -> str:
    logs = sorted(job.run_dir.glob(f"logs/{job.run_dir.name}/attempt_*/{rank}/stdout.log"))
    if attempt is not None:
        logs = [log for log in logs if log.parent.parent.name == f"attempt_{attempt}"]
    return "".join(log.read_text(errors="replace") for log in logs)


def test_a_worker_stuck_after_its_work_is_ended_and_the_job_succeeds(run_job: Start) -> None:
    job = run_job("--nproc-per-node", "2", "--heartbeat-exit-timeout", "1",
                  str(SCRIPTS / "stuck_exit_job.py"))
    assert job.wait() == 0, job.output()
    assert "finished its work 1 s ago but has not exited" in job.output()
    assert job.events("job-finished")[-1]["outcome"] == "succeeded"
    assert not job.events("fault-detected")


def test_a_rank_stopped_inside_its_snapshot_is_caught_in_seconds(run_job: Start,
                                                                 tmp_path: Path) -> None:
    marker = tmp_path / "inside"
    job = run_job("--nproc-per-node", "2", "--max-restarts", "1", "-r", "3",
                  str(SCRIPTS / "session_job.py"), "--steps", "30", "--step-sleep", "0.05",
                  "--slow-snapshot", "1:10", "--slow-snapshot-file", str(marker))
    pid = int(job.wait_for("rank 1 inside its snapshot of step 10",
                           lambda: marker.exists() and marker.read_text()))
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()

    (fault,) = job.wait_for_event("fault-detected", timeout=60)
    assert job.wait() == 0, job.output()

    assert (fault["rank"], fault["fault_kind"]) == (1, "hung")
    # Its snapshots so far were short, so this one was not declared busy work: it is between
    # steps, and its peers, inside the next step, wait for it.
    assert "its stopped process to continue (in the time between steps)" in fault["detail"], fault
    # The stopped-process deadline is 1 s, read every 0.1 s; "a few seconds" leaves room for
    # a loaded machine. Before, the checkpoint's 30-minute busy deadline held everyone up.
    assert fault["detected_at"] - stopped_at < 5.0, fault
    # Rank 0 holds step 10, rank 1 only 9: the new rank 1 reads rank 0's snapshot of 10 from
    # memory (a plain Session restores before its process group exists), and nothing is redone.
    (recovery,) = job.events("recovery-completed")
    assert (recovery["restore_step"], recovery["steps_lost"]) == (10, 0)
    assert recovery["restore_source"] == "memory and peers", recovery
    assert "rank 1 restored step 10 from replica" in _worker_log(job, rank=1)
    assert "completed step redone" not in job.output()
