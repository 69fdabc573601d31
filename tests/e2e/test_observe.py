"""A running job seen from outside: its metrics endpoint, ``trainguard status`` and
``trainguard events --follow``, against a real job with a fault and its recovery."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from prometheus_client import parser

from tests.e2e.jobs import SCRIPTS, Job, Start
from trainguard import testing

SESSION_JOB = str(SCRIPTS / "session_job.py")
COMMAND = [sys.executable, "-m", "trainguard"]


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name -> labels -> value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = (
                sample.value)
    return samples


def status(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "status", "--run-root", str(tmp_path / "runs"), *args],
                          capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path)


def metrics_url(job: Job) -> str:
    found: re.Match[str] = job.wait_for("the metrics address", lambda: re.search(
        r"metrics on (http://\S+/metrics)", job.output()), timeout=120)
    return found[1]


def test_a_running_job_is_scraped_watched_and_followed(run_job: Start, tmp_path: Path) -> None:
    job = run_job("--nproc-per-node", "2", "--max-restarts", "2", "--metrics-port", "0",
                  "--persist-interval", "0", "--inject", "exception:1:5", SESSION_JOB,
                  "--steps", "400", "--step-sleep", "0.05", run_id="watched")
    url = metrics_url(job)
    follow_log = (tmp_path / "follow.jsonl").open("w")
    follow = subprocess.Popen([*COMMAND, "events", "--follow", "--json", "--run-dir",
                               str(job.run_dir)], stdout=follow_log, stderr=subprocess.STDOUT,
                              cwd=tmp_path, start_new_session=True)
    try:
        job.wait_for_event("recovery-completed")

        def recovered_and_stepping() -> dict[str, Any] | None:
            samples = scrape(url)
            steps = samples.get("trainguard_rank_step", {})
            persisted = samples.get("trainguard_checkpoint_persisted_step", {})
            if len(steps) == 2 and min(steps.values()) > 8 and persisted:
                return samples
            return None

        samples = job.wait_for("metrics of both ranks past the recovery",
                               recovered_and_stepping, timeout=120)
        assert samples["trainguard_faults_total"] == {(("kind", "raised"),): 1.0}
        (strategy,) = samples["trainguard_recoveries_total"]
        assert samples["trainguard_recoveries_total"][strategy] == 1.0
        assert samples["trainguard_recovery_seconds_count"][()] == 1.0
        assert samples["trainguard_fault_detect_seconds_count"][()] == 1.0
        assert samples["trainguard_restarts_left"][()] in (1.0, 2.0)  # in place spends none
        assert set(samples["trainguard_rank_steps_per_second"]) == {
            (("rank", "0"),), (("rank", "1"),)}
        assert min(samples["trainguard_rank_steps_per_second"].values()) > 0
        assert samples["trainguard_snapshot_stall_seconds_count"][()] > 0
        assert min(samples["trainguard_snapshot_size_bytes"].values()) > 0
        assert samples["trainguard_checkpoint_persisted_age_seconds"][()] >= 0
        assert 0 < samples["trainguard_goodput_ratio"][()] <= 1
        assert samples["trainguard_run_info"] == {(("run", "watched"),): 1.0}

        running = json.loads(status(tmp_path, "--json").stdout)
        assert running["running"]
        assert running["run"] == "watched"
        assert running["chosen"].startswith("the newest running run")
        assert running["faults"] == 1
        assert running["restarts_used"] is not None
        assert [rank["rank"] for rank in running["ranks"]] == [0, 1]
        for rank in running["ranks"]:
            assert psutil.pid_exists(rank["pid"])
            assert rank["step"] > 8
            assert rank["heartbeat_age_seconds"] < 30
            assert rank["snapshot_step"] > 0
        text = status(tmp_path).stdout
        assert "run watched (running, the newest running run under" in text
        assert "faults 1" in text
        assert "steps/s" in text

        assert job.wait() == 0, job.output()
        assert follow.wait(timeout=60) == 0
    finally:
        testing.end_process_tree(follow.pid)
        follow_log.close()
    kinds = [json.loads(line)["kind"] for line in
             (tmp_path / "follow.jsonl").read_text().splitlines()]
    assert kinds[0] == "generation-started"
    # The end-of-run figures (run-measured) are recorded just after the job's end.
    assert "job-finished" in kinds[-2:]
    assert {"fault-detected", "decision", "recovery-completed"} <= set(kinds)
    ended = json.loads(status(tmp_path, "--json").stdout)
    assert not ended["running"]
    assert ended["state"] == "succeeded"
    assert ended["chosen"] == f"the newest run under {tmp_path / 'runs'}; none is running"
    assert all(rank["pid"] is None for rank in ended["ranks"])
    assert "run watched (not running" in status(tmp_path).stdout
