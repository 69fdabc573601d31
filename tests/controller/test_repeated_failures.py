"""The same failure, before any step completed, start after start: the job fails after
crash-loop-repeats of them instead of spending its whole budget."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.test_controller_job_controller import (
    FakeGeneration,
    bounded,
    make_harness,
    run_scenario,
)
from trainguard.controller import policy
from trainguard.faults import process
from trainguard.job import events
from trainguard.store import sqlite


@pytest.fixture
def store(tmp_path: Path) -> Iterator[sqlite.SqliteStore]:
    opened = sqlite.SqliteStore.open(tmp_path / "state.db")
    yield opened
    opened.close()


def _fail(generation: FakeGeneration, *, after: float, last_step: int | None = 0,
          port: int = 0) -> None:
    """Rank 1 raises ``after`` seconds into the generation (rank 0 lost it on a port)."""
    at = generation.started_at + after
    generation.workers[1].fail(1, at=at, error="Traceback ...\nValueError: bad batch shape")
    generation.workers[0].fail(1, at=at, error=f"Connection closed by peer [::1]:{port}")
    generation.fault(process.ProcessFault(
        rank=1, pid=4000 + port, kind=process.ProcessFaultKind.RAISED, detected_at=at,
        returncode=1, last_step=last_step, detail="ValueError: bad batch shape"))


def test_three_identical_failures_at_step_zero_fail_the_job(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=8))
        run = asyncio.create_task(h.controller.run())
        for number in range(3):
            _fail(await h.next_generation(), after=30.0, port=40000 + number)
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.FAILED
        assert (result.generations, result.restarts_used) == (3, 2)
        assert result.reason.startswith(
            "crash loop: the same failure 3 times in a row, each before a step completed "
            "(crash-loop-repeats 3); a restart does not fix it; last fault: rank 1 (pid 44002)"
            " raised ValueError: bad batch shape at step 0")
        assert result.errors.startswith("[root cause] rank 1: exit code 1\n")

    run_scenario(scenario)


def test_a_completed_step_starts_the_count_again(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=8, crash_loop_repeats=2))
        run = asyncio.create_task(h.controller.run())
        _fail(await h.next_generation(), after=30.0)
        progressed = await h.next_generation()
        progressed.completed_step = 3
        _fail(progressed, after=30.0, last_step=4)
        _fail(await h.next_generation(), after=30.0)
        _fail(await h.next_generation(), after=30.0)
        result = await bounded(run)

        assert (result.generations, result.restarts_used) == (4, 3)
        assert "the same failure 2 times in a row" in result.reason

    run_scenario(scenario)


def test_late_failures_of_a_script_that_reports_no_steps_do_not_count(
        store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=3))
        run = asyncio.create_task(h.controller.run())
        for _ in range(4):  # an hour into each start: it may well have trained
            _fail(await h.next_generation(), after=3600.0, last_step=None)
        result = await bounded(run)

        assert result.reason.startswith("retry budget exhausted (max-restarts 3)")

    run_scenario(scenario)


def test_crash_loop_repeats_must_be_positive() -> None:
    with pytest.raises(ValueError, match="crash-loop-repeats must be >= 1, got 0"):
        policy.RecoverySettings(crash_loop_repeats=0)
