"""End to end: snapshots as shares of the replicated state, restored bitwise identical."""

from __future__ import annotations

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
    shares = {"TRAINGUARD_SNAPSHOT_SHARES": "1"}
    faulty = run_job("--max-restarts", "3", "-r", "3", "--inject", "crash:1:20,exception:3:40",
                     *common, "--output", str(tmp_path / "faulty.sha"), run_id="faulty",
                     env=shares)
    assert faulty.wait() == 0, faulty.output()
    clean = run_job(*common, "--output", str(tmp_path / "clean.sha"), run_id="clean")
    assert clean.wait() == 0, clean.output()
    assert (tmp_path / "faulty.sha").read_text() == (tmp_path / "clean.sha").read_text()
    recoveries = faulty.events("recovery-completed")
    assert [(r["restore_source"], r["restore_step"], r["steps_lost"]) for r in recoveries] == [
        ("memory", 20, 0), ("memory", 40, 0)]
    shared = newest_shards(tmp_path / "runs" / "faulty")
    whole = newest_shards(tmp_path / "runs" / "clean")
    assert [holders for _, _, holders in shared] == [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]
    assert all(holders == [] for _, _, holders in whole)
    # the four shares together are about one replica's state, not four
    assert sum(size for _, size, _ in shared) < 0.4 * sum(size for _, size, _ in whole)


def test_replicas_that_differ_are_snapshotted_whole_with_a_warning(run_job: Start,
                                                                   tmp_path: Path) -> None:
    job = run_job("--nproc-per-node", "2", str(SCRIPTS / "divergent_job.py"), run_id="divergent")
    assert job.wait() == 0, job.output()
    assert ("the replicated state (everything saved but the per-rank keys) differs between "
            "ranks that should hold the same: replica groups [[0, 1]] at dp-size 2. Is the "
            "script data parallel, and is the dp-size right? Snapshots stay whole on every "
            "rank from now on.") in job.output()
    assert all(holders == [] for _, _, holders in newest_shards(tmp_path / "runs" / "divergent"))
