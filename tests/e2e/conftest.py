"""Fixtures for the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.hosts import Cluster
from tests.e2e.jobs import SCRIPTS, Job, Start, clean_digest_of


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Controllers and hosts of jobs across hosts, all ended when the test ends."""
    with Cluster.around(tmp_path) as started:
        yield started


@pytest.fixture
def run_job(tmp_path: Path) -> Iterator[Start]:
    """Start ``trainguard run`` jobs under ``tmp_path``; all are killed at the end."""
    jobs: list[Job] = []

    def start(*args: str, run_id: str = "job", env: dict[str, str] | None = None) -> Job:
        job = Job(list(args), run_root=tmp_path / "runs", run_id=run_id, cwd=tmp_path, env=env)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.kill()


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final parameters of the in-process job (scripts/inprocess_job.py) without faults."""
    return clean_digest_of(tmp_path_factory.mktemp("reference"),
                           ["-t", "3", str(SCRIPTS / "inprocess_job.py")])
