"""Where ranks run after a device is isolated: never on that device again, at any restart
level, and a script that picks its device by LOCAL_RANK finds the one it was assigned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.jobs import SCRIPTS, Start

pytestmark = pytest.mark.e2e

SCRIPT = str(SCRIPTS / "placement_job.py")


def environments(record: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """Each process's recorded environment by (generation, rank)."""
    found = {}
    for path in record.glob("env-*.json"):
        _, generation, rank = path.stem.split("-")
        found[int(generation), int(rank)] = json.loads(path.read_text())
    return found


def test_a_job_restart_moves_the_rank_off_its_isolated_device(run_job: Start,
                                                              tmp_path: Path) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "2", "--spare-devices", "1",
                  "--inject", "device-error:1:5", SCRIPT, str(tmp_path),
                  env={"CUDA_VISIBLE_DEVICES": "7,6,5"})
    assert job.wait() == 0, job.output()
    assert [d["strategy"] for d in job.events("decision")] == ["exit"]
    env = environments(tmp_path)
    assert set(env) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert [env[0, rank]["CUDA_VISIBLE_DEVICES"] for rank in (0, 1)] == ["7,6,5"] * 2
    moved = env[1, 1]
    assert (moved["LOCAL_RANK"], moved["TRAINGUARD_DEVICE"]) == ("1", "2")
    # index LOCAL_RANK of the visible list is the spare (the user's 5); the user's 6 is gone
    assert moved["CUDA_VISIBLE_DEVICES"] == env[1, 0]["CUDA_VISIBLE_DEVICES"] == "7,5"
    assert moved["ASCEND_RT_VISIBLE_DEVICES"] == env[1, 0]["ASCEND_RT_VISIBLE_DEVICES"] == "0,2"


def test_a_rank_moved_to_a_spare_sees_its_spare_at_its_local_rank(run_job: Start,
                                                                  tmp_path: Path) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "2", "--spare-devices", "1",
                  "--inject", "device-error:1:5", SCRIPT, str(tmp_path), "--in-process")
    assert job.wait() == 0, job.output()
    assert [d["strategy"] for d in job.events("decision")] == ["recover"]
    env = environments(tmp_path)
    assert set(env) == {(0, 0), (0, 1), (1, 1)}, "rank 0 keeps its process"
    assert env[0, 1]["CUDA_VISIBLE_DEVICES"] is None, "nothing moved yet: all visible"
    moved = env[1, 1]
    assert (moved["LOCAL_RANK"], moved["TRAINGUARD_DEVICE"]) == ("1", "2")
    assert moved["CUDA_VISIBLE_DEVICES"] == moved["ASCEND_RT_VISIBLE_DEVICES"] == "0,2"


def test_an_isolated_device_without_a_spare_fails_the_job_with_the_reason(
        run_job: Start, tmp_path: Path) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "2",
                  "--inject", "device-error:1:5", SCRIPT, str(tmp_path))
    assert job.wait() == 1, job.output()
    assert "rank 1 is on an isolated device and 0 spare devices are left" in job.output()
    assert set(environments(tmp_path)) == {(0, 0), (0, 1)}, "no restart on the isolated device"


def test_a_users_list_too_short_for_the_spares_is_refused_naming_it(run_job: Start,
                                                                    tmp_path: Path) -> None:
    job = run_job("--nproc-per-node", "2", "--spare-devices", "1", SCRIPT, str(tmp_path),
                  env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert job.wait() == 1, job.output()
    assert ("workers could not be started: CUDA_VISIBLE_DEVICES='0,1' lists 2 devices; the job "
            "needs 3") in job.output()
    assert not environments(tmp_path), "no worker started"
