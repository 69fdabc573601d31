"""End to end: each generation's rendezvous store is up before any of its workers starts, so no
rank meets the connect backoff of ``init_process_group`` (up to a second), restarts included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Start

pytestmark = pytest.mark.e2e


def test_the_store_accepts_the_first_connection_of_every_rank_in_every_generation(
        run_job: Start, tmp_path: Path) -> None:
    job = run_job("--nproc-per-node", "3", "--max-restarts", "1",
                  str(SCRIPTS / "store_probe_job.py"), str(tmp_path))

    assert job.wait() == 0, job.output()
    probes = {path.name: path.read_text() for path in tmp_path.glob("probe-*")}
    assert probes == {f"probe-{attempt}-{rank}": "True" for attempt in (0, 1)
                      for rank in range(3)}, job.output()
