"""A rank that does not leave its generation when told: the recovery ends its process, saying
which rank, with that rank's threads' stacks in its output, so whatever held it is seen, and
restarts it from its own snapshots with the others, in place: the job does not restart. Asleep
between steps, where cutting its connections does not reach it, it is waited for up to
--leave-timeout; asleep inside a step (as in a wait that the cut does not end), no longer than
its step deadline (2 s at these steps), whatever --leave-timeout says. When the recovery moves
a failed rank to a spare device, the ended one restarts on its own device all the same."""

from __future__ import annotations

import re

import pytest

from tests.e2e.jobs import SCRIPTS, Start

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("agent_flags", "job_flags"), [
    (("--leave-timeout", "2"), ("--stuck-after", "10")),
    ((), ("--stuck-in", "11")),
], ids=["between-steps", "inside-a-step"])
def test_a_rank_that_does_not_leave_is_named_with_its_stacks(
        run_job: Start, agent_flags: tuple[str, ...], job_flags: tuple[str, ...]) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "2", *agent_flags,
                  "--inject", "crash:0:11", str(SCRIPTS / "inprocess_job.py"),
                  "--steps", "30", *job_flags, "--step-sleep", "0.05")
    assert job.wait() == 0, job.output()
    output = job.output()
    assert "ranks [1] did not leave generation 0 within 2 s (their threads' stacks are in " \
           "their output): their processes are ended, to restart from their snapshots" in output
    assert "Current thread" in output
    assert "inprocess_job.py\", line" in output  # where the script holds it: its sleep
    assert not job.events("recovery-failed"), "the recovery in place went on"
    ended, = job.events("survivors-ended")
    assert (ended["generation"], ended["ranks"], ended["waited_seconds"]) == (0, [1], 2.0)
    assert [e["strategy"] for e in job.events("decision")] == ["recover-in-place"]
    started = job.events("generation-started")[-1]
    # rank 0 crashed, rank 1 was ended: both restart, from their own snapshots
    assert (started["generation"], started["kept_processes"]) == (1, 0), started
    assert started["restore_source"] == "memory", started
    recovered, = job.events("recovery-completed")
    assert recovered["steps_lost"] == 0, recovered


def test_a_rank_ended_during_a_move_to_a_spare_restarts_on_its_own_device(
        run_job: Start) -> None:
    # rank 0's device fails (its rank moves to the spare, device 3) while rank 1 is held
    # inside the same step: rank 1 is ended and restarts where it was; rank 2 is kept.
    job = run_job("--nproc-per-node", "3", "--max-restarts", "2", "--spare-devices", "1",
                  "--inject", "device-error:0:11", str(SCRIPTS / "inprocess_job.py"),
                  "--steps", "30", "--stuck-in", "11", "--step-sleep", "0.05")
    assert job.wait() == 0, job.output()
    assert [e["strategy"] for e in job.events("decision")] == ["recover"]
    ended, = job.events("survivors-ended")
    assert ended["ranks"] == [1]
    assert not job.events("recovery-failed")
    started = job.events("generation-started")[-1]
    assert (started["generation"], started["kept_processes"]) == (1, 1), started
    processes = re.findall(r"pid (\d) (\d+) started with \S+ on device (\d)", job.output())
    # rank 2 kept its process; 0 started again on the spare, 1 on its own device
    assert sorted((int(rank), int(device)) for rank, _, device in processes) == [
        (0, 0), (0, 3), (1, 1), (1, 1), (2, 2)], processes
    recovered, = job.events("recovery-completed")
    assert recovered["steps_lost"] == 0, recovered
