"""End to end: faults that hit checkpoints themselves, and bad input before anything starts."""

from __future__ import annotations

import mmap
import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.jobs import SCRIPTS, Job, Start
from trainguard.ipc import snapshot_layout

pytestmark = [pytest.mark.e2e, pytest.mark.serial]

SESSION_JOB = str(SCRIPTS / "session_job.py")


def _slot_files(agent_pid: int) -> dict[tuple[int, int], str]:
    """The agent's snapshot memory by (rank, slot), as /proc paths."""
    found = {}
    for fd in Path(f"/proc/{agent_pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        match = re.search(r"trainguard-rank(\d+)-slot(\d+)", target)
        if match:
            found[(int(match[1]), int(match[2]))] = str(fd)
    return found


def _checkpoints(directory: Path) -> list[Path]:
    """Complete-looking step directories (not drafts), oldest first."""
    return sorted(path for path in directory.iterdir() if re.fullmatch(r"step-\d+", path.name))


def _worker_of_rank(job: Job, rank: int) -> int:
    for worker in psutil.Process(job.children()["standby"]).children():
        try:
            if f"trainguard-rank{rank}-slot" in Path(f"/proc/{worker.pid}/maps").read_text():
                return worker.pid
        except OSError:
            continue
    raise AssertionError(f"no worker maps rank {rank}'s snapshot memory")


def test_worker_killed_during_its_snapshot_copy(run_job: Start, tmp_path: Path) -> None:
    """Double buffering: the torn slot is ignored; rank 1 restores its previous snapshot, or,
    when rank 0 already holds the step rank 1 was copying, rank 0's snapshot of it stands in
    (a replica's, read from memory), and the run still ends bitwise identical."""
    arguments = ["--nproc-per-node", "2", "-r", "3", "--max-restarts", "1",
                 "--persist-interval", "1000", SESSION_JOB, "--steps", "30",
                 "--ballast-mb", "200", "--step-sleep", "0.05"]
    job = run_job(*arguments, "--output", str(tmp_path / "faulty.txt"), run_id="torn")
    agent = job.process.pid
    slots = job.wait_for("both snapshot slots of rank 1", lambda: (
        files := _slot_files(agent)) and {(1, 0), (1, 1)} <= set(files) and files)
    worker = job.wait_for("rank 1 mapping both slots",
                          lambda: len(_maps_of(job, 1)) == 2 and _worker_of_rank(job, 1))
    views = []
    for slot in (0, 1):
        with open(slots[(1, slot)], "rb") as stream:
            views.append(mmap.mmap(stream.fileno(), snapshot_layout.HEADER_SIZE,
                                   prot=mmap.PROT_READ))
    deadline = time.monotonic() + 60
    torn = None
    while torn is None and time.monotonic() < deadline:
        for slot, view in enumerate(views):
            if snapshot_layout.read_seq(view) % 2 == 1:
                os.kill(worker, signal.SIGKILL)
                torn = slot
                break
    assert torn is not None, "never saw rank 1 in the middle of a snapshot copy"
    assert snapshot_layout.read_seq(views[torn]) % 2 == 1, "the kill landed after the copy"
    intact = snapshot_layout.SnapshotHeader.unpack(views[1 - torn], size=2**40)
    for view in views:
        view.close()
    assert job.wait() == 0, job.output()
    recovery = job.events("recovery-completed")[0]
    assert recovery["restore_step"] in (intact.step, intact.step + 1), recovery
    assert recovery["restore_source"] == (
        "memory" if recovery["restore_step"] == intact.step else "memory and peers"), recovery
    clean = run_job(*arguments, "--output", str(tmp_path / "clean.txt"), run_id="clean")
    assert clean.wait() == 0, clean.output()
    assert (tmp_path / "faulty.txt").read_text() == (tmp_path / "clean.txt").read_text()


def _maps_of(job: Job, rank: int) -> set[str]:
    try:
        worker = _worker_of_rank(job, rank)
        maps = Path(f"/proc/{worker}/maps").read_text()
    except (AssertionError, OSError):
        return set()
    return set(re.findall(rf"trainguard-rank{rank}-slot\d", maps))


def test_persister_killed_mid_write_leaves_the_previous_checkpoint(run_job: Start) -> None:
    arguments = ["--nproc-per-node", "2", "-r", "3", "--persist-interval", "0",
                 "--persist-bandwidth", "8000000", SESSION_JOB, "--ballast-mb", "8",
                 "--step-sleep", "0.02"]
    job = run_job(*arguments, "--steps", "100000", run_id="persist")
    first = job.wait_for_event("checkpoint-persisted", timeout=60)[0]
    checkpoints = job.run_dir / "checkpoints"
    job.wait_for("a checkpoint being written", lambda: list(
        checkpoints.glob("step-*.partial-*/*.tmp")), timeout=60)
    os.kill(job.children()["persister"], signal.SIGKILL)
    job.kill()  # and the memory with it: only the disk is left
    complete = [path.name for path in _checkpoints(checkpoints)]
    assert complete == [Path(first["path"]).name], "the interrupted write must not complete"
    assert list(checkpoints.glob("step-*.partial-*")), "the interrupted write left its draft"
    resumed = run_job(*arguments, "--steps", str(first["step"] + 3), run_id="persist")
    assert resumed.wait() == 0, resumed.output()
    assert f"rank 0 restored step {first['step']} from disk" in _stdout(resumed)


def _stdout(job: Job, rank: int = 0) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted(
        job.run_dir.glob(f"logs/{job.run_dir.name}/attempt_*/{rank}/stdout.log")))


def _stderr(job: Job, rank: int = 0) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted(
        job.run_dir.glob(f"logs/{job.run_dir.name}/attempt_*/{rank}/stderr.log")))


def test_corrupt_checkpoint_is_skipped_for_an_older_one(run_job: Start) -> None:
    arguments = ["--nproc-per-node", "2", "-r", "3", "--persist-interval", "0",
                 "--keep-checkpoints", "3", SESSION_JOB]
    first = run_job(*arguments, "--steps", "40", "--step-sleep", "0.01", run_id="corrupt")
    assert first.wait() == 0, first.output()
    steps = [int(path.name[5:]) for path in _checkpoints(first.run_dir / "checkpoints")]
    assert len(steps) >= 2
    assert steps[-1] == 40
    newest = first.run_dir / "checkpoints" / f"step-{steps[-1]:09d}"
    shard = newest / "rank-00001.tgsnap"
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF  # one flipped bit pattern in rank 1's tensors
    shard.write_bytes(bytes(data))
    resumed = run_job(*arguments, "--steps", "45", run_id="corrupt")
    assert resumed.wait() == 0, resumed.output()
    assert f"rank 0 restored step {steps[-2]} from disk" in _stdout(resumed)
    rejected = resumed.events("checkpoint-rejected")
    assert len(rejected) == 1
    assert rejected[0]["path"] == str(newest)
    assert "rank-00001.tgsnap is corrupt: checksum" in rejected[0]["reason"]
    assert "checkpoint skipped" in resumed.output()
    assert f"{newest} skipped (rank-00001.tgsnap is corrupt" in _stderr(resumed)


def test_unreadable_manifest_is_skipped(run_job: Start) -> None:
    arguments = ["--nproc-per-node", "2", "-r", "3", "--persist-interval", "0", SESSION_JOB]
    first = run_job(*arguments, "--steps", "20", run_id="manifest")
    assert first.wait() == 0, first.output()
    newest = _checkpoints(first.run_dir / "checkpoints")[-1]
    (newest / "manifest.json").write_text('{"format": "trainguard-checkpoint", "vers')
    resumed = run_job(*arguments, "--steps", "25", run_id="manifest")
    assert resumed.wait() == 0, resumed.output()
    reasons = [event["reason"] for event in resumed.events("checkpoint-rejected")]
    assert len(reasons) == 1
    assert reasons[0].startswith("manifest is not JSON")


def test_unwritable_checkpoint_directory_is_refused_before_any_worker(
        run_job: Start, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    job = run_job("--checkpoint-dir", str(blocker / "checkpoints"), SESSION_JOB)
    # A file where the directory must go is a usage error, before anything starts.
    assert job.wait() == 2
    assert (f"--checkpoint-dir '{blocker / 'checkpoints'}' is inside '{blocker}', a file; "
            "name a directory") in job.output()
    assert not (job.run_dir / "state.db").exists()


def test_too_little_snapshot_memory_is_refused_before_any_worker(run_job: Start) -> None:
    job = run_job("--snapshot-memory", str(2**50), SESSION_JOB)
    assert job.wait() == 1
    assert "of shared memory for a snapshot slot" in job.output()
    assert "can be reserved on this host" in job.output()
    assert not (job.run_dir / "state.db").exists() or not job.events("generation-started")


def test_a_standby_process_that_cannot_start_is_a_clear_error(run_job: Start) -> None:
    job = run_job("--heartbeat-startup-timeout", "0.2", SESSION_JOB)
    assert job.wait() == 1
    assert "trainguard: the standby process did not start" in job.output()
    assert not job.events("generation-started")
