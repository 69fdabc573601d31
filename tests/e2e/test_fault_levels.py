"""End to end: the device's level decides the strategy, and an operator's configuration files
change the level (issue 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Job, Start

pytestmark = pytest.mark.e2e

SCRIPT = str(SCRIPTS / "inprocess_job.py")
DEFAULTS = Path(__file__).parents[2] / "trainguard" / "faults" / "data"


def run(run_job: Start, tmp_path: Path, *flags: str) -> Job:
    job = run_job("--nproc-per-node", "4", "--max-restarts", "3", "-t", "3",
                  "--spare-devices", "1", "--dp-size", "2", "--node-name", "host-a", *flags,
                  SCRIPT,
                  "--output", str(tmp_path / "sha"))
    assert job.wait() == 0, job.output()
    return job


def test_a_second_memory_error_in_a_day_takes_the_device_out_of_use(
        run_job: Start, tmp_path: Path, reference: str) -> None:
    job = run(run_job, tmp_path, "--inject", "memory-error:2:10", "--inject",
              "memory-error:2:20")  # --inject is repeatable

    assert [d["strategy"] for d in job.events("decision")] == ["retry", "recover"]
    first, second = job.events("device-fault-graded")
    assert (first["device"], first["level"], first["upgrade_reasons"]) == (
        "host-a/device-2", "RestartBusiness", [])
    assert (second["device"], second["level"], second["reset_policy"]) == (
        "host-a/device-2", "ManuallySeparateNPU", "isolate")
    (reason,) = second["upgrade_reasons"]
    assert (reason["fault_code"], reason["upgrade_type"]) == ("80E01801", "FaultFrequency")
    assert (tmp_path / "sha").read_text() == reference


def test_an_operators_files_change_the_level_and_a_bad_one_is_reported(
        run_job: Start, tmp_path: Path, reference: str) -> None:
    config = tmp_path / "fault-config"
    config.mkdir()
    codes = json.loads((DEFAULTS / "faultCode.json").read_text())
    codes["RestartBusinessCodes"] = [c for c in codes["RestartBusinessCodes"] if c != "80E01801"]
    codes["SeparateNPUCodes"].append("80E01801")
    (config / "faultCode.json").write_text(json.dumps(codes))
    (config / "NodeDConfiguration.json").write_text(json.dumps({"FaultTypeCode": {
        "NotHandleFaultCodes": ["0100000D"], "SeparateFaultCodes": ["0100000D"]}}))

    job = run(run_job, tmp_path, "--fault-config-dir", str(config), "--inject",
              "memory-error:1:10")

    (graded,) = job.events("device-fault-graded")
    assert graded["level"] == "SeparateNPU"
    assert [d["strategy"] for d in job.events("decision")] == ["recover"]
    (loaded,) = job.events("fault-config-loaded")
    assert loaded["reloaded"] is False
    assert any("NodeDConfiguration.json" in problem and "0100000D" in problem
               for problem in loaded["problems"]), loaded["problems"]
    assert (tmp_path / "sha").read_text() == reference
