"""Fixtures for the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Job, Start


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
    root = tmp_path_factory.mktemp("reference")
    job = Job(["--nproc-per-node", "4", "-t", "3", str(SCRIPTS / "inprocess_job.py"),
               "--output", str(root / "sha")],
              run_root=root / "runs", run_id="reference", cwd=root)
    try:
        assert job.wait() == 0, job.output()
    finally:
        job.kill()
    return (root / "sha").read_text()
