"""Jobs across hosts on loopback: a controller and one ``trainguard run`` per host, each its own
process tree, as on separate machines (tests/hosts/ puts each in a network namespace)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.hosts import Cluster
from tests.e2e.jobs import SCRIPTS
from tests.hosts.netns import HostNetwork, require_netns

pytestmark = [pytest.mark.e2e, pytest.mark.serial]


def test_a_rank_killed_on_one_host_is_recovered_in_place_across_hosts(
        cluster: Cluster, tmp_path: Path, reference: str) -> None:
    controller = cluster.start_controller()
    common = ["--nproc-per-node", "2", "--max-restarts", "2", "-t", "3"]
    script = [str(SCRIPTS / "inprocess_job.py"), "--output", str(tmp_path / "sha")]
    hosts = [cluster.host(0, *common, *script),
             cluster.host(1, *common, "--inject", "crash:2:15", *script)]
    assert cluster.wait_all(hosts) == [0, 0], "\n".join(h.output() for h in hosts)
    assert (tmp_path / "sha").read_text() == reference, "not bitwise identical to a clean run"
    faults = controller.events("job", "fault-detected")
    assert [(f["rank"], f["fault_kind"], f["injected"]) for f in faults] == [
        (2, "signaled", "crash")], "the killed rank, not its peers on the other host"
    assert [d["strategy"] for d in controller.events("job", "decision")] == ["recover-in-place"]
    generations = controller.events("job", "generation-started")
    assert [(g["generation"], g["world_size"], g["kept_processes"]) for g in generations] == [
        (0, 4, 0), (1, 4, 3)], "every survivor on both hosts keeps its process"
    recovery, = controller.events("job", "recovery-completed")
    assert (recovery["restore_source"], recovery["steps_lost"]) == ("memory", 0)
    finished, = controller.events("job", "job-finished")
    assert (finished["outcome"], finished["restarts_used"]) == ("succeeded", 1)
    for host in hosts:
        assert "succeeded" in host.output()
    # Each host persisted its own ranks' part of the last step.
    for node, ranks in ((0, [0, 1]), (1, [2, 3])):
        manifest = json.loads((hosts[node].checkpoint_dir / "step-000000040" /
                               "manifest.json").read_text())
        assert [s["rank"] for s in manifest["shards"]] == ranks


def test_across_network_namespaces_a_killed_rank_is_recovered_in_place(
        tmp_path: Path, reference: str) -> None:
    """Each host in a network namespace of its own, with its own name and address: the
    generation's store is served on host 0's address, and the ranks meet across the bridge."""
    require_netns(hostnames=True)
    with HostNetwork(2, hostnames=True) as network, Cluster.around(tmp_path) as cluster:
        controller = cluster.start_controller(address=network.root_address)
        common = ["--nproc-per-node", "2", "--max-restarts", "2"]
        script = [str(SCRIPTS / "inprocess_job.py"), "--output", str(tmp_path / "sha")]
        hosts = [cluster.host(0, *common, *script,
                              prefix=tuple(network.host(0).command())),
                 cluster.host(1, *common, "--inject", "crash:3:15", *script,
                              prefix=tuple(network.host(1).command()))]
        assert cluster.wait_all(hosts) == [0, 0], "\n".join(h.output() for h in hosts)
        assert (tmp_path / "sha").read_text() == reference
        faults = controller.events("job", "fault-detected")
        assert [(f["rank"], f["fault_kind"]) for f in faults] == [(3, "signaled")]
        recovery, = controller.events("job", "recovery-completed")
        assert (recovery["strategy"], recovery["steps_lost"]) == ("recover-in-place", 0)
        output = controller.output()
        assert "host host0 joined job job as node 0" in output
        assert "host host1 joined job job as node 1" in output
        assert f"store at {network.host(0).address}:" in output


def test_a_plain_torchrun_script_is_restarted_at_job_level_on_every_host(
        cluster: Cluster, tmp_path: Path) -> None:
    cluster.start_controller()
    records = tmp_path / "records"
    records.mkdir()
    common = ["--nproc-per-node", "1", "--max-restarts", "1", str(SCRIPTS / "plain_job.py"),
              str(records)]
    hosts = [cluster.host(None, *common), cluster.host(None, *common)]
    assert cluster.wait_all(hosts) == [0, 0], "\n".join(h.output() for h in hosts)
    seen = {path.name: json.loads(path.read_text()) for path in records.glob("env-*.json")}
    assert sorted(seen) == ["env-0-0.json", "env-0-1.json", "env-1-0.json", "env-1-1.json"]
    for name, env in seen.items():
        attempt, rank = name.removesuffix(".json").split("-")[1:]
        assert (env["RANK"], env["GROUP_RANK"], env["LOCAL_RANK"]) == (rank, rank, "0")
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("2", "1")
        assert env["TORCHELASTIC_RESTART_COUNT"] == attempt
        assert env["MASTER_ADDR"] == "127.0.0.1"
    assert seen["env-0-0.json"]["MASTER_PORT"] == seen["env-0-1.json"]["MASTER_PORT"]
    assert seen["env-1-0.json"]["MASTER_PORT"] != seen["env-0-0.json"]["MASTER_PORT"]


def test_a_second_host_claiming_a_node_rank_is_refused_naming_the_holder(
        cluster: Cluster, tmp_path: Path) -> None:
    cluster.start_controller()
    script = [str(SCRIPTS / "plain_job.py"), str(tmp_path)]
    first = cluster.host(0, "--nproc-per-node", "1", *script)
    first.wait_for("the first host to join",
                   lambda: "as node 0 of 2" in first.output(), timeout=60)
    second = cluster.host(0, "--nproc-per-node", "1", *script)
    assert second.wait(60) == 1
    assert "claims node rank 0 of job job, which host" in second.output()
    other = cluster.host(1, "--nproc-per-node", "2", *script)
    assert other.wait(60) == 1
    assert "it has nproc_per_node 2, the job has 1" in other.output()


def test_an_unreachable_controller_is_retried_with_the_wait_shown_then_given_up(
        cluster: Cluster, tmp_path: Path) -> None:
    host = cluster.host(0, "--rdzv-conf", "join_timeout=3", "--nproc-per-node", "1",
                        str(SCRIPTS / "plain_job.py"), str(tmp_path),
                        endpoint="127.0.0.1:9")
    assert host.wait(60) == 1
    output = host.output()
    assert "the controller at 127.0.0.1:9 refused the connection" in output
    assert "retrying in 1.0 s" in output
    assert "was not reached within 3 s" in output
