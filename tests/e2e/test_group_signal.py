"""SIGTERM to the job's whole process group (what ``timeout`` and systemd send) stops the job
as gracefully as SIGTERM to trainguard alone: the helper processes do not die first."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Job, Start

pytestmark = pytest.mark.e2e


def test_sigterm_to_the_process_group_stops_with_a_dying_checkpoint(run_job: Start) -> None:
    # A write a second starts the persister early (with a snapshot every step nothing else
    # does: a step is checksummed only once it has stayed the newest for a second).
    job = run_job("--nproc-per-node", "2", "-r", "3", "--persist-interval", "1",
                  str(SCRIPTS / "session_job.py"), "--steps", "100000", "--step-sleep", "0.01")
    job.wait_for("steps, with both helpers up", lambda: _stepping(job.run_dir) and all(
        _ignores_sigterm(pid) for pid in _helpers(job)))
    os.killpg(job.process.pid, signal.SIGTERM)  # the job runs in its own session
    assert job.wait() == 143, job.output()
    finished = job.events("job-finished")[-1]
    assert (finished["outcome"], finished["reason"]) == ("stopped", "received SIGTERM")
    written = job.events("checkpoint-persisted")
    persisted = written[-1]  # the dying checkpoint, the newest step
    assert persisted["step"] == max(event["step"] for event in written) > 0
    manifest = json.loads((Path(persisted["path"]) / "manifest.json").read_text())
    assert manifest["step"] == persisted["step"]
    assert sorted(shard["rank"] for shard in manifest["shards"]) == [0, 1]
    output = job.output()
    assert "persister process" not in output, "the persister outlived the stop"
    assert "the standby process exited" not in output, "so did the standby process"


def _stepping(run_dir: Path) -> bool:
    logs = run_dir.glob(f"logs/{run_dir.name}/attempt_0/0/stdout.log")
    return any("restored step" in log.read_text(errors="replace") for log in logs)


def _helpers(job: Job) -> list[int]:
    children = job.children()
    return list(children.values()) if set(children) == {"standby", "persister"} else [0]


def _ignores_sigterm(pid: int) -> bool:
    """The helper has started up (a process only just forked still has SIGTERM's default)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    ignored = next(line for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(ignored.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
