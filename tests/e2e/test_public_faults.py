"""A public fault moves a rank across hosts, for real: the controller serves TLS and knows its
callers by token; two hosts join as agents; a public-fault sender reports SeparateNPU on the
device rank 2 trains on (host-1's device 0) with ``trainguard faults send``, and that rank
moves to host-1's spare device while the job trains on to its end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.certificates import Authority
from tests.e2e.hosts import Cluster
from tests.e2e.jobs import SCRIPTS
from trainguard.store import sqlite

pytestmark = pytest.mark.e2e

AGENT_TOKEN = "agent-token-0123456789"
SENDER_TOKEN = "sender-token-0123456789"


def _secret(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_a_separate_npu_public_fault_moves_the_rank_on_that_device_to_a_spare(
        tmp_path: Path) -> None:
    pki = Authority(tmp_path / "pki")
    certificate, key = pki.issue("controller", server=True)
    access = _secret(tmp_path / "access.json", json.dumps({"identities": [
        {"name": "hosts", "roles": ["agent"], "token": AGENT_TOKEN},
        {"name": "ccae-gateway", "roles": ["public-fault-sender"], "resources": ["CCAE"],
         "token": SENDER_TOKEN}]}))
    with Cluster.around(tmp_path) as cluster:
        controller = cluster.start_controller(access=(
            "--tls-cert", str(certificate), "--tls-key", str(key), "--access-file",
            str(access)))
        cluster.host_access = ("--tls-ca", str(pki.ca), "--token-file",
                               str(_secret(tmp_path / "agent.token", AGENT_TOKEN)))
        common = ["--nproc-per-node", "2", "--max-restarts", "2", "--spare-devices", "1",
                  "--dp-size", "2", "-t", "3"]
        script = [str(SCRIPTS / "inprocess_job.py"), "--steps", "400"]
        hosts = [cluster.host(0, *common, *script), cluster.host(1, *common, *script)]
        hosts[0].wait_for("the job's first generation",
                          lambda: controller.events("job", "generation-started"))
        sent = subprocess.run(
            [sys.executable, "-m", "trainguard", "faults", "send", "--controller",
             controller.endpoint, "--tls-ca", str(pki.ca), "--token-file",
             str(_secret(tmp_path / "sender.token", SENDER_TOKEN)), "--resource", "CCAE",
             "--code", "220001001", "--node", "host-1", "--device", "0"],
            capture_output=True, text=True, timeout=60, check=False)
        assert (sent.returncode, sent.stdout) == (
            0, "code 0: public fault send successfully\n"), sent.stderr
        assert cluster.wait_all(hosts) == [0, 0], "\n".join(h.output() for h in hosts)

    reported, = controller.events("job", "device-fault-reported")
    assert {key: reported[key] for key in ("device", "code", "level", "rank", "moves")} == {
        "device": "host-1/device-0", "code": "public:220001001", "level": "SeparateNPU",
        "rank": 2, "moves": True}
    fault, = controller.events("job", "fault-detected")
    assert (fault["rank"], fault["fault_kind"]) == (2, "device-reported")
    # Moving it in process needs every host to hold the restore step: host 1's ranks may be a
    # step behind when the fault comes from outside mid-step (no rank failed), and then the
    # job-level restart moves it.
    decisions = [d["strategy"] for d in controller.events("job", "decision")]
    assert decisions in (["recover"], ["recover", "exit"])
    assert controller.events("job", "recovery-completed")
    finished, = controller.events("job", "job-finished")
    assert (finished["outcome"], finished["restarts_used"]) == ("succeeded", 1)
    store = sqlite.SqliteStore.open(hosts[1].run_dir / "state.db")
    try:
        ranks = store.get_document("job-ranks-job")
    finally:
        store.close()
    assert ranks is not None
    assert {rank["rank"]: rank["device"] for rank in ranks.data["ranks"]} == {2: 2, 3: 1}, \
        "rank 2 trains on host 1's spare device to the end"
