"""End to end: faults of the host's (simulated) devices reach a running job through the device
detector, as a driver's would (issue 13 §1): a timeline's notice is recorded only; a SeparateNPU
fault injected from the command line moves the rank on that device to the spare; a
RestartBusiness fault restarts the rank on its device; a device or code that is not there is
refused, saying why; the host's device document is kept in the run's store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Job, Start
from trainguard.store import sqlite
from trainguard.testing.fake_bmc import FakeBmc

pytestmark = pytest.mark.e2e

NOTICE = "80E21007"  # NotHandleFault
SEPARATE = "80E3A201"  # SeparateNPU
RESTART = "8C204E00"  # RestartBusiness
UCE = "80E01801"  # a memory error, RestartBusiness
COMPANION = "80C98009"  # RestartRequest; dropped when a memory error comes within 5 s


def _inject(job: Job, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainguard", "fault", "inject", "--run-dir", str(job.run_dir),
         *args], capture_output=True, text=True, timeout=60, check=False)


def test_device_faults_from_the_detector_move_or_restart_the_rank_on_the_device(
        run_job: Start, tmp_path: Path) -> None:
    timeline = tmp_path / "devices.jsonl"
    timeline.write_text(json.dumps({"time": 0, "device": 2, "code": NOTICE,
                                    "assertion": "once"}) + "\n")
    job = run_job("--nproc-per-node", "2", "--spare-devices", "1", "--dp-size", "2",
                  "--max-restarts", "3", "--device-timeline", str(timeline),
                  str(SCRIPTS / "inprocess_job.py"), "--steps", "150", "--step-sleep", "0.1")
    job.wait_for_event("snapshot-interval")  # stepping, with snapshots
    # The refusals first: each injection is a process start (over a second on a busy machine,
    # where 80 steps once ended before the last), and the job must still run for the last.
    absent = _inject(job, "--device", "7", RESTART)
    unknown = _inject(job, "--device", "0", "NOPE")
    moved = _inject(job, "--device", "1", SEPARATE)
    assert (moved.returncode, moved.stdout.split(": ", 1)[1]) == (
        0, f"{SEPARATE} occur\n"), moved.stderr
    job.wait_for_event("recovery-completed")
    restarted = _inject(job, "--device", "0", RESTART)
    assert restarted.returncode == 0, restarted.stderr
    assert job.wait() == 0, job.output()

    assert (absent.returncode, unknown.returncode) == (1, 1)
    assert "7 is not a device of this host" in absent.stderr
    assert "'NOPE' is not in the fault code table" in unknown.stderr
    noticed = {(e["device"], e["code"], e["reason"], e["level"])
               for e in job.events("device-fault-noticed")}
    assert noticed == {("Ascend910-2", NOTICE, "Notice", "NotHandleFault"),
                       ("Ascend910-1", SEPARATE, "Occur", "SeparateNPU"),
                       ("Ascend910-0", RESTART, "Occur", "RestartBusiness")}
    node = job.events("device-fault-noticed")[0]["node"]
    reported = [(e["device"], e["level"], e["rank"], e["moves"])
                for e in job.events("device-fault-reported")]
    assert reported == [(f"{node}/device-2", "NotHandleFault", None, False),
                        (f"{node}/device-1", "SeparateNPU", 1, True),
                        (f"{node}/device-0", "RestartBusiness", 0, False)]
    assert [d["strategy"] for d in job.events("decision")] == ["recover", "recover-in-place"]
    assert all(r["steps_lost"] == 0 for r in job.events("recovery-completed"))
    store = sqlite.SqliteStore.open(job.run_dir / "state.db", read_only=True)
    try:
        document = store.get_document(f"mindx-dl-deviceinfo-{node}")
    finally:
        store.close()
    assert document is not None
    listed = json.loads(document.data["DeviceInfoCfg"])["DeviceInfo"]["DeviceList"]
    assert listed["huawei.com/Ascend910-Unhealthy"] == "Ascend910-1"


def test_a_node_alarm_at_separate_fault_stops_a_one_host_job_saying_why(
        run_job: Start, tmp_path: Path) -> None:
    """The BMC (an ipmitool on PATH that prints a power supply failure, 08000001) raises an
    alarm the operator's NodeDConfiguration.json grades SeparateFault: the node is UnHealthy,
    and on one host nothing can take its ranks, so the job stops with exit code 4."""
    bmc = FakeBmc(tmp_path)
    job = run_job("--nproc-per-node", "2", "--fault-config-dir", str(bmc.config),
                  str(SCRIPTS / "inprocess_job.py"), "--steps", "400", "--step-sleep", "0.1",
                  env={"PATH": bmc.path})

    assert job.wait() == 4, job.output()
    (finished,) = job.events("job-finished")
    assert finished["reason"].startswith("node ")
    assert "is UnHealthy: Power Supply 81 08000001 (SeparateFault)" in finished["reason"]


def test_on_one_host_the_fault_centre_drops_a_companion_code_near_a_memory_error(
        run_job: Start) -> None:
    """One host is a cluster of one: its device faults pass the fault centre's rules before
    they reach the job. A companion code (80C98009, held 5 s) followed by a memory error on
    the same device never reaches the job, though the agent saw both. The memory error waits
    10 s for the job to say it retries the step (it does not: the process never saw it), then
    reaches it, and the rank recovers."""
    job = run_job("--nproc-per-node", "2", "--node-name", "host-a", "--max-restarts", "2",
                  str(SCRIPTS / "inprocess_job.py"), "--steps", "300", "--step-sleep", "0.1")
    job.wait_for_event("snapshot-interval")
    for code in (COMPANION, UCE):
        injected = _inject(job, "--device", "0", code)
        assert injected.returncode == 0, injected.stderr
    assert job.wait() == 0, job.output()

    noticed = [e["code"] for e in job.events("device-fault-noticed")]
    assert noticed == [COMPANION, UCE]
    reported = [(e["device"], e["code"], e["level"], e["rank"])
                for e in job.events("device-fault-reported")]
    assert reported == [("host-a/device-0", UCE, "RestartBusiness", 0)]
    (recovered,) = job.events("recovery-completed")
    assert recovered["steps_lost"] == 0
