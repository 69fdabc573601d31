"""End to end: snapshots every N steps lose what they must and no more, and end complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Start

pytestmark = [pytest.mark.e2e, pytest.mark.serial]


def test_every_third_step_loses_the_steps_since_the_snapshot_and_saves_the_final_one(
        run_job: Start, tmp_path: Path, reference: str) -> None:
    job = run_job("--nproc-per-node", "4", "--max-restarts", "3", "-t", "3",
                  "--snapshot-every", "3", "--inject", "crash:1:14",
                  str(SCRIPTS / "inprocess_job.py"), "--output", str(tmp_path / "sha"))
    assert job.wait() == 0, job.output()
    chosen = job.events("snapshot-interval")
    assert (chosen[0]["interval"], chosen[0]["requested"]) == (3, "3"), chosen
    assert "snapshot every 3 steps (--snapshot-every 3" in job.output()
    (recovery,) = job.events("recovery-completed")
    # Rank 1 completed step 13 and died in step 14; the newest snapshot resumes at step 12.
    assert (recovery["restore_step"], recovery["steps_lost"]) == (12, 2), recovery
    persisted = job.events("checkpoint-persisted")
    assert persisted
    assert persisted[-1]["step"] == 40, "step 40 was not due: saved at close"
    assert "every 3 steps (a fault loses up to 2)" in job.output()
    assert (tmp_path / "sha").read_text() == reference


def test_auto_moves_every_rank_to_the_same_longer_interval_and_stays_exact(
        run_job: Start, tmp_path: Path) -> None:
    common = ["--nproc-per-node", "2", str(SCRIPTS / "inprocess_job.py"), "--steps", "200"]
    job = run_job("--max-restarts", "2", "--snapshot-every", "auto", "--snapshot-share", "0.002",
                  "--inject", "crash:1:150", *common[:2], *common[2:], "--output",
                  str(tmp_path / "auto.sha"), run_id="auto")
    assert job.wait() == 0, job.output()
    chosen = job.events("snapshot-interval")
    assert (chosen[0]["interval"], chosen[0]["recommended"]) == (1, None)
    moved = [event for event in chosen if event["interval"] > 1]
    assert moved, f"a stall above 0.2% of the step must lengthen the interval: {chosen}"
    assert moved[0]["requested"] == "auto"
    assert moved[0]["stall_seconds"] > 0.002 * moved[0]["step_seconds"]
    (recovery,) = job.events("recovery-completed")
    # Every rank snapshots the same steps, so some step before the fault is complete, and the
    # loss is what the interval allows: fewer steps than the longest interval chosen.
    assert recovery["restore_source"] == "memory", recovery
    assert 0 <= recovery["steps_lost"] < max(event["interval"] for event in chosen), recovery
    assert job.events("checkpoint-persisted")[-1]["step"] == 200
    clean = run_job(*common, "--output", str(tmp_path / "clean.sha"), run_id="clean")
    assert clean.wait() == 0, clean.output()
    assert (tmp_path / "auto.sha").read_text() == (tmp_path / "clean.sha").read_text()
