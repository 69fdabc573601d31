"""The final checkpoint holds the final step, even when a rank was refilled from a peer at it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Start

pytestmark = pytest.mark.e2e


def test_a_rank_refilled_from_a_peer_at_the_last_step_is_in_the_final_checkpoint(
        run_job: Start) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "2", "--spare-devices", "1",
                  "--persist-interval", "1000", str(SCRIPTS / "final_step_job.py"),
                  "--steps", "20")
    assert job.wait() == 0, job.output()
    assert [d["strategy"] for d in job.events("decision")] == ["recover"]
    started = job.events("generation-started")[-1]
    assert (started["restore_source"], started["restore_step"]) == ("memory and peers", 20)
    persisted = job.events("checkpoint-persisted")
    assert persisted, "the final flush wrote nothing: rank 1 had no snapshot of step 20"
    assert persisted[-1]["step"] == 20
    manifest = json.loads((Path(persisted[-1]["path"]) / "manifest.json").read_text())
    assert sorted(shard["rank"] for shard in manifest["shards"]) == [0, 1]
