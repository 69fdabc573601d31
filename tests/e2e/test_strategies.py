"""End to end, per strategy: the fault, the strategy chosen, the fallback, which processes
survived, where the state came from, and a final state bitwise identical to a run without
faults."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.jobs import SCRIPTS, Job, Start

pytestmark = [pytest.mark.e2e, pytest.mark.serial]

SCRIPT = str(SCRIPTS / "inprocess_job.py")


def pids(job: Job) -> dict[int, list[int]]:
    """Every process each rank had, in start order."""
    found: dict[int, list[int]] = {}
    for rank, pid in re.findall(r"pid (\d+) (\d+)", job.output()):
        found.setdefault(int(rank), []).append(int(pid))
    return found


def started_with(job: Job, rank: int) -> list[int]:
    """How many processes the agent started together with each of the rank's, in order."""
    return [int(n) for n in re.findall(rf"pid {rank} \d+ started with (\d+)", job.output())]


def run(run_job: Start, tmp_path: Path, *flags: str, script_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None) -> Job:
    job = run_job("--nproc-per-node", "4", "--max-restarts", "3", "-t", "3", *flags, SCRIPT,
                  "--output", str(tmp_path / "sha"), *script_args, env=env)
    assert job.wait() == 0, job.output()
    return job


def decisions(job: Job) -> list[str]:
    return [d["strategy"] for d in job.events("decision")]


def recovery(job: Job) -> dict[str, Any]:
    (completed,) = job.events("recovery-completed")
    return completed


def test_retry_keeps_every_process(run_job: Start, tmp_path: Path, reference: str) -> None:
    job = run(run_job, tmp_path, "--inject", "memory-error:2:15")
    assert decisions(job) == ["retry"]
    (fault,) = job.events("fault-detected")
    assert (fault["rank"], fault["code"], fault["last_step"]) == (2, "80E01801", 15)
    assert all(len(p) == 1 for p in pids(job).values()), "no process may be replaced"
    assert job.events("generation-started")[-1]["kept_processes"] == 4
    assert (recovery(job)["strategy"], recovery(job)["steps_lost"]) == ("retry", 0)
    assert (tmp_path / "sha").read_text() == reference


def test_link_error_with_every_rank_alive_is_retried(run_job: Start, tmp_path: Path,
                                                     reference: str) -> None:
    job = run(run_job, tmp_path, "--inject", "link-error:1:12")
    assert decisions(job) == ["retry"]
    (fault,) = job.events("fault-detected")
    assert (fault["fault_kind"], fault["rank"]) == ("communication", 1)
    assert all(len(p) == 1 for p in pids(job).values())
    assert (tmp_path / "sha").read_text() == reference


@pytest.mark.parametrize("rank", [1, 0], ids=["rank-1", "rank-0-store-host"])
def test_recover_in_place_replaces_only_the_dead_rank(run_job: Start, tmp_path: Path,
                                                      reference: str, rank: int) -> None:
    job = run(run_job, tmp_path, "--inject", f"crash:{rank}:15")
    assert decisions(job) == ["recover-in-place"]
    processes = pids(job)
    assert len(processes[rank]) == 2, "the dead rank gets a new process"
    assert all(len(p) == 1 for r, p in processes.items() if r != rank), "survivors stay"
    assert started_with(job, rank) == [4, 1], "alone: its session reads its restore ahead"
    completed = recovery(job)
    assert (completed["strategy"], completed["restore_source"], completed["steps_lost"]) == (
        "recover-in-place", "memory", 0)
    assert (tmp_path / "sha").read_text() == reference


@pytest.mark.parametrize("read_ahead", ["1", "0"])
def test_recover_moves_the_rank_to_a_spare_with_state_from_a_replica(
        run_job: Start, tmp_path: Path, reference: str, read_ahead: str) -> None:
    # Read ahead or not (by default not on a host with fewer cores than ranks): the same state.
    job = run(run_job, tmp_path, "--spare-devices", "1", "--inject", "device-error:3:15",
              env={"TRAINGUARD_READ_AHEAD": read_ahead})
    assert decisions(job) == ["recover"]
    completed = recovery(job)
    assert completed["restore_source"] == "memory and peers"
    # The moved rank reads a replica's snapshot from this host's memory itself, rather than
    # have the replica send it over the new process group; the others read their own.
    assert "rank 3 restored step 15 from replica" in job.output()
    assert all(f"rank {rank} restored step 15 from memory" in job.output() for rank in (0, 1, 2))
    assert (completed["restore_step"], completed["steps_lost"]) == (15, 0)
    processes = pids(job)
    assert len(processes[3]) == 2
    assert all(len(processes[r]) == 1 for r in (0, 1, 2))
    assert (tmp_path / "sha").read_text() == reference


def test_dump_saves_the_failed_rank_from_its_replica_then_restarts(
        run_job: Start, tmp_path: Path, reference: str) -> None:
    job = run(run_job, tmp_path, "--recover-strategy", "dump", "--persist-interval", "600",
              "--spare-devices", "1", "--inject", "device-error:1:15")
    assert decisions(job) == ["dump", "exit"]
    persisted = job.events("checkpoint-persisted")
    assert persisted[0]["step"] == 15, "the dying checkpoint holds the fault's step"
    manifest = json.loads((Path(persisted[0]["path"]) / "manifest.json").read_text())
    sources = {shard["rank"]: shard.get("source") for shard in manifest["shards"]}
    # Snapshot shares: rank 2, rank 1's successor in the replicas' ring, keeps rank 1's share.
    assert sources == {0: None, 1: 2, 2: None, 3: None}, "rank 1's state is its replica's"
    assert all(len(p) == 2 for p in pids(job).values()), "exit restarts every process"
    assert recovery(job)["steps_lost"] == 0
    assert (tmp_path / "sha").read_text() == reference


def test_missed_deadline_falls_to_the_next_strategy(run_job: Start, tmp_path: Path,
                                                    reference: str) -> None:
    job = run(run_job, tmp_path, "--recover-timeout", "3", "--inject", "crash:2:15",
              script_args=("--stall-replacement", "8"))
    assert decisions(job) == ["recover-in-place", "exit"]
    (failed,) = job.events("recovery-failed")
    assert failed["strategy"] == "recover-in-place"
    assert "within 3 s" in failed["reason"]
    assert recovery(job)["strategy"] == "exit"
    assert (tmp_path / "sha").read_text() == reference


def test_second_fault_during_recovery_falls_to_the_next_strategy(
        run_job: Start, tmp_path: Path, reference: str) -> None:
    job = run(run_job, tmp_path, "--inject", "crash:1:15",
              script_args=("--crash-replacement",))
    assert decisions(job)[:2] == ["recover-in-place", "exit"]
    (failed,) = job.events("recovery-failed")
    assert "a new fault before every rank stepped" in failed["reason"]
    assert len(job.events("fault-detected")) == 2
    assert (tmp_path / "sha").read_text() == reference


@pytest.mark.parametrize(("flags", "message"), [
    (("--recover-strategy", "retry,teleport"), "'teleport' is not a strategy"),
    (("--dp-size", "3"), "dp-size 3 does not divide the world size 4"),
    (("--recover-strategy", "recover"), "spare devices, and the job has none"),
])
def test_bad_strategy_settings_are_refused_at_start(run_job: Start, flags: tuple[str, ...],
                                                    message: str) -> None:
    job = run_job("--nproc-per-node", "4", *flags, SCRIPT)
    assert job.wait() == 2
    assert message in job.output()


def test_without_saved_state_the_kept_processes_do_not_resume_beside_fresh_ones(
        run_job: Start, tmp_path: Path, reference: str) -> None:
    """No snapshot yet (every 1000 steps) and none on disk: restarting rank 1 in place would
    leave ranks 0, 2 and 3 with ten steps of training beside a rank 1 starting afresh (they
    did, and the job ended with other parameters). Every rank starts afresh instead."""
    job = run(run_job, tmp_path, "--snapshot-every", "1000", "--inject", "crash:1:10")
    assert decisions(job) == ["recover-in-place", "exit"]
    (failed,) = job.events("recovery-failed")
    assert "no saved state to resume from" in failed["reason"], failed
    assert (recovery(job)["restore_source"], recovery(job)["restore_step"]) == ("none", 0)
    assert (tmp_path / "sha").read_text() == reference
