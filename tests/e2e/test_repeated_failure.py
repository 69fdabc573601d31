"""A failure that never makes progress stops the job after a few identical starts, and its
traceback is printed once, without trainguard's and runpy's frames."""

from __future__ import annotations

import pytest

from tests.e2e.jobs import SCRIPTS, Start

pytestmark = [pytest.mark.e2e, pytest.mark.serial]


def test_the_same_failure_at_step_zero_stops_after_three_starts(run_job: Start) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "8",
                  str(SCRIPTS / "step_zero_failure.py"))
    assert job.wait() == 1, job.output()
    output = job.output()
    assert len(job.events("generation-started")) == 3, output
    (finished,) = job.events("job-finished")
    assert finished["reason"].startswith(
        "crash loop: the same failure 3 times in a row, each before a step completed "
        "(crash-loop-repeats 3)"), finished["reason"]
    assert finished["restarts_used"] == 2
    lines = [line for line in output.splitlines() if line.startswith("[rank1]:")]
    assert sum("Traceback (most recent call last)" in line for line in lines) == 1, output
    assert sum(line.endswith("ValueError: bad batch shape at step 0") for line in lines) == 3
    assert "the same traceback as printed before" in output
    for frame in ("trainguard/agent/standby.py", "<frozen runpy>", "trainguard/train/"):
        assert frame not in output, f"{frame} is trainguard's or runpy's own"
    assert 'step_zero_failure.py", line 14, in <module>' in output


def test_a_different_setting_allows_more_identical_failures(run_job: Start) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "8", "--crash-loop-repeats", "2",
                  str(SCRIPTS / "step_zero_failure.py"))
    assert job.wait() == 1, job.output()
    assert len(job.events("generation-started")) == 2
