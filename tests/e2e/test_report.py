"""``trainguard report`` on a real short job: the page, the timeline and the JSON agree with
the run's own events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Start
from trainguard.controller import policy

pytestmark = pytest.mark.e2e


def report(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainguard", "report", *map(str, args)],
                          check=False, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_report_of_a_recovered_crash(run_job: Start, tmp_path: Path) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "2", "--progress-interval", "0.5",
                  "--inject", "crash:1:20", str(SCRIPTS / "session_job.py"), "--steps", "60",
                  "--step-sleep", "0.05")
    assert job.wait() == 0, job.output()
    # Recorded under the original's name, shown in the console's words.
    strategy = policy.Strategy(job.events("recovery-completed")[0]["strategy"]).shown

    written = report(job.run_dir, cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    page, timeline = job.run_dir / "report.md", job.run_dir / "timeline.png"
    assert written.stdout.split() == ["report:", str(page), "timeline:", str(timeline)]
    assert timeline.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = page.read_text()
    assert "| steps completed | 60 |" in text
    assert f"| 1 | crash | 20 | {strategy} |" in text
    assert "![timeline" in text

    # a run id under --run-root, and the numbers as JSON (no files needed)
    as_json = report(job.run_dir.name, "--run-root", job.run_dir.parent, "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert (data["outcome"], data["steps_completed"], data["steps_lost"]) == ("succeeded", 60, 0)
    (fault,) = data["faults"]
    assert (fault["rank"], fault["kind"], fault["step"], fault["strategy"]) == (1, "crash", 20,
                                                                                strategy)
    assert 0 <= fault["occurred"] <= fault["detected"] <= fault["recovered"]
    assert data["rates"]
    assert all(rate["steps_per_second"] >= 0 for rate in data["rates"])
    assert 0 < data["goodput"] <= 1

    elsewhere = tmp_path / "elsewhere"
    moved = report(job.run_dir, "--output", elsewhere, cwd=tmp_path)
    assert moved.returncode == 0, moved.stderr
    assert {path.name for path in elsewhere.iterdir()} == {"report.md", "timeline.png"}

