"""Controller failover end to end: two ``trainguard controller`` sharing a store, one leading,
one standing by; the hosts know both. The leader is killed mid-run, or in the middle of a
recovery: the standby takes over, the hosts register with it while their workers train on,
and the job ends bitwise identical to a clean run, no restart spent twice."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import need_etcd
from tests.e2e.hosts import Cluster, Controller
from tests.e2e.jobs import SCRIPTS, Job
from trainguard.testing import etcd_cluster
from trainguard.testing.etcd_cluster import free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.serial]

# The 40 steps of the session's reference job, slowed to about 9 s: long enough to lose a
# controller mid-run, and the same final parameters.
SCRIPT = [str(SCRIPTS / "inprocess_job.py"), "--step-sleep", "0.2"]


def _pair(cluster: Cluster, tmp_path: Path, store: str) -> tuple[Controller, Controller]:
    """A leader and a standby on ports chosen here, sharing ``store``."""
    ports = free_ports(2)
    common = ["--store", store, "--leader-ttl", "2"]
    leader = Controller(*common, run_root=tmp_path / "controller-a", cwd=tmp_path,
                        port=ports[0], name="controller-a")
    cluster.controller = leader
    standby = Controller(*common, run_root=tmp_path / "controller-b", cwd=tmp_path,
                         port=ports[1], standby=True, name="controller-b")
    cluster.extra.append(standby)
    return leader, standby


def test_the_standby_takes_over_a_running_job_and_the_hosts_train_on(
        cluster: Cluster, tmp_path: Path, reference: str) -> None:
    leader, standby = _pair(cluster, tmp_path, f"sqlite://{tmp_path}/ha.db")
    endpoints = f"{leader.endpoint},{standby.endpoint}"
    common = ["--nproc-per-node", "2", "--max-restarts", "2", "--rdzv-conf",
              "controller_wait=20"]
    hosts = [cluster.host(node, *common, *SCRIPT, "--output", str(tmp_path / "sha"),
                          endpoint=endpoints) for node in (0, 1)]
    hosts[0].wait_for("training", lambda: leader.events("job", "generation-started"))
    time.sleep(1.0)
    leader.kill()
    killed_at = time.monotonic()
    standby.wait_leading(timeout=30)
    takeover = time.monotonic() - killed_at
    assert cluster.wait_all(hosts) == [0, 0], "\n".join(h.output() for h in hosts)
    assert (tmp_path / "sha").read_text() == reference, "not bitwise identical"
    took_over, = standby.events("job", "controller-took-over")
    assert took_over["adopted"], took_over
    finished, = standby.events("job", "job-finished")
    assert (finished["outcome"], finished["restarts_used"]) == ("succeeded", 0)
    assert standby.events("job")[0] == leader.events("job")[0], \
        "the standby's run root holds the leader's events too"
    assert [e["kind"] for e in standby.events("job")].count("generation-started") == 1
    assert not standby.events("job", "fault-detected"), "no worker was disturbed"
    assert takeover < 10, f"the standby led {takeover:.1f} s after the leader was killed"
    for host in hosts:
        assert "registered again with the job's controller" in host.output()


@pytest.mark.parametrize("spare_started", ["with the job", "after the leader died"])
def test_a_host_lost_with_the_leader_is_replaced_by_a_spare_once_the_standby_leads(
        cluster: Cluster, tmp_path: Path, reference: str, spare_started: str) -> None:
    """The leader and host 1 killed together: host 0 and the spare register with the standby
    (the spare again, or for the first time: started to replace host 1, it joins as a spare),
    host 1 never does. Once host 0 trains no more (not after the hosts' whole wait, 8 s and 5
    more), the spare takes node 1's ranks and the job restarts (before, it stopped) from the
    newest step host 0 holds in memory, node 1's ranks from their replicas there."""
    leader, standby = _pair(cluster, tmp_path, f"sqlite://{tmp_path}/ha.db")
    endpoints = f"{leader.endpoint},{standby.endpoint}"
    common = ["--nproc-per-node", "2", "--max-restarts", "2", "--persist-interval", "0.5",
              "--rdzv-conf", "controller_wait=8"]

    def start(node: int) -> Job:
        return cluster.host(node, *common, *SCRIPT, "--output", str(tmp_path / "sha"),
                            endpoint=endpoints, nnodes="2:3")

    late = spare_started == "after the leader died"
    hosts = [start(node) for node in ((0, 1) if late else (0, 1, 2))]
    on_disk = hosts[0].wait_for("a step on both nodes' disks", lambda: set.intersection(*(
        {path.name for path in host.checkpoint_dir.glob("step-*") if "." not in path.name}
        for host in hosts[:2])), timeout=120)
    leader.kill()
    hosts[1].kill()
    assert hosts[0].process.poll() is None, "the job ended before host 1 was killed"
    if late:
        hosts.append(start(2))
    assert [hosts[0].wait(), hosts[2].wait()] == [0, 0], hosts[0].output() + hosts[2].output()
    assert (tmp_path / "sha").read_text() == reference, "not bitwise identical"
    took_over, = standby.events("job", "controller-took-over")
    assert not took_over["adopted"], took_over
    assert "spare hosts took node(s) [1], whose host(s) did not register" in took_over["reason"]
    first, restart = standby.events("job", "generation-started")
    assert first == leader.events("job", "generation-started")[0], "the leader's, kept"
    assert restart["restore_source"] == "memory and peers", restart
    assert restart["restore_step"] >= max(int(name.split("-")[1]) for name in on_disk)
    finished, = standby.events("job", "job-finished")
    assert finished["outcome"] == "succeeded", finished
    assert "this spare host takes node 1's ranks" in hosts[2].output()
    took = re.search(r"spare host host-2 takes the ranks of node 1, whose host did not "
                     r"register again within ([\d.]+) s", standby.output())
    assert took is not None, standby.output()
    if not late:  # a spare started late may take longer than that to come up
        assert float(took.group(1)) < 8, "host 0 trained no more: not the hosts' whole wait"


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[etcd_cluster.EtcdCluster]:
    need_etcd()
    with etcd_cluster.EtcdCluster(tmp_path / "etcd", size=3) as started:
        yield started


def test_a_leader_and_an_etcd_member_killed_during_a_recovery_the_standby_finishes_it(
        cluster: Cluster, tmp_path: Path, reference: str,
        etcd3: etcd_cluster.EtcdCluster) -> None:
    """On a 3-member etcd: the member the controllers use first is killed as the fault
    happens, and the leader once it has decided."""
    etcd = etcd3
    leader, standby = _pair(cluster, tmp_path, etcd.url("failover"))
    endpoints = f"{leader.endpoint},{standby.endpoint}"
    common = ["--nproc-per-node", "2", "--max-restarts", "3", "--rdzv-conf",
              "controller_wait=20"]
    output = ["--output", str(tmp_path / "sha")]
    # Rank 2's replacement stalls 3 s before it restores: the leader is killed while the
    # recovery waits for it.
    script = [*SCRIPT, *output, "--stall-replacement", "3"]
    hosts = [cluster.host(0, *common, *script, endpoint=endpoints),
             cluster.host(1, *common, "--inject", "crash:2:15", *script, endpoint=endpoints)]
    hosts[0].wait_for("the fault", lambda: "fault: " in leader.output(), timeout=120)
    etcd.kill_member(etcd.members[0])
    hosts[0].wait_for("the leader's decision", lambda: "decision:" in leader.output(),
                      timeout=60)
    leader.kill()
    assert cluster.wait_all(hosts) == [0, 0], "\n".join(h.output() for h in hosts)
    assert (tmp_path / "sha").read_text() == reference, "not bitwise identical"
    took_over, = standby.events("job", "controller-took-over")
    finished, = standby.events("job", "job-finished")
    assert finished["outcome"] == "succeeded"
    assert finished["restarts_used"] == 1, "the recovery's restart was spent once"
    assert not standby.events("job", "decision") or took_over["adopted"], (
        "a successor that restarted the job decided nothing again")


def test_with_its_store_cut_off_the_controller_recovers_a_fault_and_catches_up_after(
        cluster: Cluster, tmp_path: Path, reference: str) -> None:
    """The store (one etcd member) is killed before the job starts and comes back during
    the recovery of a fault: training and the recovery never wait for it; the controller says
    so, and writes what it held once the store answers."""
    need_etcd()
    with etcd_cluster.EtcdCluster(tmp_path / "etcd") as etcd:
        controller = cluster.start_controller("--store", etcd.url("cut"))
        etcd.kill_member(etcd.members[0])
        common = ["--nproc-per-node", "2", "--max-restarts", "2"]
        script = [str(SCRIPTS / "inprocess_job.py"), "--output", str(tmp_path / "sha"),
                  "--stall-replacement", "3"]
        hosts = [cluster.host(0, *common, *script),
                 cluster.host(1, *common, "--inject", "crash:2:20", *script)]
        hosts[0].wait_for("the decision", lambda: "decision:" in controller.output(),
                          timeout=120)
        etcd.start_member(etcd.members[0])
        assert cluster.wait_all(hosts) == [0, 0], "\n".join(h.output() for h in hosts)
        output = controller.output()
    assert (tmp_path / "sha").read_text() == reference, "not bitwise identical"
    recovery, = controller.events("job", "recovery-completed")
    assert recovery["steps_lost"] == 0
    assert "the store cannot be reached" in output
    assert "the store answers again after" in output
