"""End to end: a checkpoint directory that fills up or turns read-only during the run.

Training goes on from memory, the failure is warned about once with the free space, and the
summary and the exit code say how far the checkpoint on disk is behind. The directory is a
small tmpfs mounted for the test, so these tests need root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import unavailable
from tests.e2e.jobs import SCRIPTS, Start
from trainguard import launcher

pytestmark = pytest.mark.e2e

SESSION_JOB = str(SCRIPTS / "session_job.py")
STEPS = 30


def mount_tmpfs(directory: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        unavailable("needs root: mounts a small tmpfs as the checkpoint directory")
    if shutil.which("mount") is None:
        unavailable("needs mount(8)")
    directory.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                   check=True, timeout=60)
    try:
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=True, timeout=60)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """Room for one checkpoint of the job below (2 ranks x 2 MiB of ballast), not for two."""
    yield from mount_tmpfs(tmp_path / "small", "6m")


@pytest.fixture
def roomy_disk(tmp_path: Path) -> Iterator[Path]:
    yield from mount_tmpfs(tmp_path / "roomy", "64m")


def arguments(checkpoint_dir: Path, *, step_sleep: float) -> list[str]:
    return ["--nproc-per-node", "2", "-r", "3", "--persist-interval", "0",
            "--checkpoint-dir", str(checkpoint_dir), SESSION_JOB, "--steps", str(STEPS),
            "--ballast-mb", "2", "--step-sleep", str(step_sleep)]


def test_a_checkpoint_directory_that_fills_up_is_reported_in_the_summary_and_exit_code(
        run_job: Start, small_disk: Path) -> None:
    job = run_job(*arguments(small_disk, step_sleep=0.02), run_id="full")
    code = job.wait()
    output = job.output()
    persisted = [event["step"] for event in job.events("checkpoint-persisted")]
    assert persisted, output
    assert persisted[-1] < STEPS, "the disk was meant to fill up"
    assert job.events("job-finished")[-1]["outcome"] == "succeeded", output
    assert code == launcher.CHECKPOINT_BEHIND_EXIT_CODE, output
    assert output.count("No space left on device") == 2, output  # the warning and the summary
    [warning] = [line for line in output.splitlines() if "persisting step" in line]
    assert "MiB free" in warning, warning
    assert (f"checkpoint on disk is {STEPS - persisted[-1]} steps behind: the newest is step "
            f"{persisted[-1]}, memory reached step {STEPS}") in " ".join(output.split()), output


def test_a_checkpoint_directory_remounted_read_only_mid_run(
        run_job: Start, roomy_disk: Path) -> None:
    job = run_job(*arguments(roomy_disk, step_sleep=0.1), run_id="read-only")
    job.wait_for_event("checkpoint-persisted")
    # Refused while the persister has a file open for writing there: retried between writes.
    job.wait_for("the checkpoint directory remounted read-only", lambda: subprocess.run(
        ["mount", "-o", "remount,ro", str(roomy_disk)], capture_output=True, timeout=60,
        check=False).returncode == 0, timeout=60)
    code = job.wait()
    output = job.output()
    newest = job.events("checkpoint-persisted")[-1]["step"]
    assert code == launcher.CHECKPOINT_BEHIND_EXIT_CODE, output
    assert output.count("Read-only file system") == 2, output
    assert (f"checkpoint on disk is {STEPS - newest} steps behind: the newest is step "
            f"{newest}") in " ".join(output.split()), output


def test_a_job_whose_checkpoints_were_written_exits_0(run_job: Start, roomy_disk: Path) -> None:
    job = run_job(*arguments(roomy_disk, step_sleep=0.0), run_id="written")
    assert job.wait() == 0, job.output()
    assert "behind" not in job.output()
    assert job.events("checkpoint-persisted")[-1]["step"] == STEPS
