"""Decisions across hosts, from the hosts' views: whose fault, the restore step and its donors,
spare hosts, and who may join a job."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

from trainguard.controller import agent_proxy, cluster_agents, cluster_job, spare_pool
from trainguard.faults import process
from trainguard.ipc import messages
from trainguard.job import replicas
from trainguard.proto import control_pb2 as pb


class FakeHost:
    """What ClusterAgents and ClusterGeneration read of a host's proxy."""

    def __init__(self, *, world: int = 4, dp: int = 2, disk: list[int] | None = None) -> None:
        self.layout = replicas.ReplicaLayout(world, dp)
        self.replicas_differ = ""
        self.disk_steps = disk or []
        self.gone: BaseException | None = None
        self.host = "h"
        self.left = asyncio.Event()

    @property
    def trusted_layout(self) -> replicas.ReplicaLayout | None:
        return None if self.replicas_differ else self.layout

    async def wait_gone(self) -> BaseException:
        await self.left.wait()
        assert self.gone is not None
        return self.gone

    def lose(self) -> None:
        self.gone = ConnectionError("the other end closed the stream")
        self.left.set()


def _worker(rank: int, held: tuple[int, ...]) -> agent_proxy.WorkerInfo:
    return agent_proxy.WorkerInfo(rank=rank, returncode=None, stopping=False, exited_at=None,
                                  alive=True, in_process=True, left=None, device=rank % 2,
                                  error="", held_steps=held)


def _agents(held: dict[int, tuple[int, ...]], **host: Any) -> cluster_agents.ClusterAgents:
    """Two hosts of two ranks each (dp 2: ranks 0 and 2, 1 and 3 are replicas)."""
    hosts: Any = {0: FakeHost(**host), 1: FakeHost(**host)}
    agents = cluster_agents.ClusterAgents(hosts, nproc_per_node=2)
    agents._current = types.SimpleNamespace(  # type: ignore[assignment]
        workers={rank: _worker(rank, steps) for rank, steps in held.items()})
    return agents


def test_the_restore_step_is_the_newest_every_rank_holds_on_its_host() -> None:
    agents = _agents({0: (12, 11), 1: (12, 11), 2: (11, 10), 3: (12, 11)})
    assert agents._restore_plan(fresh=()) == (11, {})


def test_a_replaced_hosts_ranks_get_their_state_from_replicas_on_the_other_host() -> None:
    agents = _agents({0: (12, 11), 1: (12, 11), 2: (), 3: ()})
    assert agents._restore_plan(fresh=[1]) == (12, {2: 0, 3: 1})


def test_a_step_no_replica_of_a_replaced_rank_holds_is_not_chosen() -> None:
    agents = _agents({0: (12, 11), 1: (11, 10), 2: (), 3: ()})
    assert agents._restore_plan(fresh=[1]) == (11, {2: 0, 3: 1})


def test_replicas_found_to_differ_send_a_replaced_host_nothing() -> None:
    """One host's ranks found the replicas different: the ranks of the host replaced get no
    replica's state, so every host restores what every node has on disk."""
    agents = _agents({0: (12, 11), 1: (12, 11), 2: (), 3: ()}, disk=[10, 5])
    host: Any = agents.hosts[0]
    host.replicas_differ = "replica groups [[0, 2], [1, 3]] at dp-size 2"
    assert agents.trusted_layout is None
    assert agents._restore_plan(fresh=[1]) == (10, {})


def test_with_nothing_in_memory_every_host_restores_the_newest_step_all_have_on_disk() -> None:
    hosts: Any = {0: FakeHost(disk=[40, 20]), 1: FakeHost(disk=[30, 20])}
    agents = cluster_agents.ClusterAgents(hosts, nproc_per_node=2)
    assert agents._restore_plan(fresh=()) == (20, {})
    hosts[1].disk_steps = []
    assert agents._restore_plan(fresh=()) == (0, {}), "nothing in common: afresh everywhere"


def test_a_replaced_node_without_replicas_elsewhere_restores_what_every_node_has_on_disk(
        ) -> None:
    """dp 1: no rank has a replica; the spare that took node 1 reads node 1's directory."""
    hosts: Any = {0: FakeHost(dp=1, disk=[40, 20]), 1: FakeHost(dp=1, disk=[40, 30])}
    agents = cluster_agents.ClusterAgents(hosts, nproc_per_node=2)
    agents._current = types.SimpleNamespace(  # type: ignore[assignment]
        workers={rank: _worker(rank, (42, 41) if rank < 2 else ()) for rank in range(4)})
    assert agents._restore_plan(fresh=[1]) == (40, {})
    hosts[1].disk_steps = []  # the spare sees no disk of node 1's: afresh
    assert agents._restore_plan(fresh=[1]) == (0, {})


def test_after_a_takeover_a_node_a_spare_took_gets_the_state_the_others_reported_in_memory(
        ) -> None:
    """A takeover in which host 1 never registered again: its node went to a spare, which runs
    no generation, so none is adopted; the restart restores the newest step host 0 reported
    holding, node 1's ranks from their replicas there, not the older step on every disk."""
    hosts: Any = {0: FakeHost(disk=[8]), 1: FakeHost(disk=[8])}
    hosts[0].adopt = lambda: types.SimpleNamespace(
        number=3, workers={0: _worker(0, (12, 11)), 1: _worker(1, (12, 11))})
    hosts[1].adopt = lambda: None
    agents = cluster_agents.ClusterAgents(hosts, nproc_per_node=2, taken=[1])
    assert asyncio.run(agents.adopt()) == (None, 3)
    assert agents._restore_plan(fresh=[1]) == (12, {2: 0, 3: 1})
    assert agents._restore_plan(fresh=()) == (8, {}), "node 1's own ranks hold nothing"


def test_each_worker_is_known_by_its_host() -> None:
    async def scenario() -> list[tuple[int, str, int]]:
        first, second = FakeHost(), FakeHost()
        first.host, second.host = "a", "b"
        generation, views = _generation({0: first, 1: second})
        for node, view in views.items():
            view.workers = {rank: _worker(rank, ()) for rank in (2 * node, 2 * node + 1)}
        return [(rank, w.host, w.device) for rank, w in sorted(generation.workers.items())]

    assert asyncio.run(scenario()) == [(0, "a", 0), (1, "a", 1), (2, "b", 0), (3, "b", 1)]


class PersistingHost(FakeHost):
    """A host whose workers hold ``held`` (rank -> steps) and that writes what it is told."""

    def __init__(self, generation: Any, held: dict[int, tuple[int, ...]]) -> None:
        super().__init__()
        self.generation, self.held = generation, held
        self.ordered: list[int] = []
        self.durable = True

    async def describe(self) -> None:  # the acknowledgement updates the generation's view
        for rank, steps in self.held.items():
            self.generation.workers[rank] = _worker(rank, steps)

    async def persist(self, step: int) -> bool:
        self.ordered.append(step)
        return self.durable


def test_every_host_is_ordered_to_persist_the_newest_step_all_ranks_hold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_agents, "PERSIST_RETRY", 0.01)

    async def scenario() -> tuple[list[int], list[int]]:
        loop = asyncio.get_running_loop()
        current = types.SimpleNamespace(workers={}, outcome=loop.create_future())
        hosts: Any = {0: PersistingHost(current, {0: (9, 8), 1: (9, 8)}),
                      1: PersistingHost(current, {2: (8, 7), 3: (9, 8)})}
        agents = cluster_agents.ClusterAgents(hosts, nproc_per_node=2)
        agents._current = current  # type: ignore[assignment]
        hosts[1].durable = False  # the workers outran step 8 there: ordered again
        ordering = asyncio.create_task(agents.order_persists(0.01))
        while len(hosts[1].ordered) < 2:
            await asyncio.sleep(0.01)
        hosts[1].durable = True
        for host in hosts.values():
            host.held = {rank: (10, 9) for rank in host.held}
        while 10 not in hosts[0].ordered:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # step 10 written everywhere: not ordered again
        ordering.cancel()
        return hosts[0].ordered, hosts[1].ordered

    first, second = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert first == second
    assert first[:2] == [8, 8], "ordered again after a host could not write it"
    assert (first[-1], first.count(10)) == (10, 1), "a step written everywhere, once"


def _outcome(rank: int, kind: process.ProcessFaultKind, error: str = ""
             ) -> process.GenerationOutcome:
    return process.GenerationOutcome(process.OutcomeKind.FAULT, fault=process.ProcessFault(
        rank=rank, pid=10 + rank, kind=kind, detected_at=1.0, error_excerpt=error))


def _generation(hosts: dict[int, FakeHost]) -> tuple[cluster_agents.ClusterGeneration,
                                                     dict[int, Any]]:
    loop = asyncio.get_running_loop()
    views: dict[int, Any] = {}
    for node in hosts:
        views[node] = types.SimpleNamespace(
            outcome=loop.create_future(), all_stepping=loop.create_future(), started_at=1.0,
            kept=0, plan_seconds=0.0, completed_step=None, workers={},
            restore=agent_proxy.RestoreInfo(messages.RestoreSource.MEMORY, 5, "", "memory"))
    proxies: Any = hosts
    return cluster_agents.ClusterGeneration(3, views, master_port=1, hosts=proxies,
                                            nproc_per_node=2), views


def test_a_lost_collective_on_one_host_yields_to_the_cause_another_host_reports() -> None:
    async def scenario() -> process.GenerationOutcome:
        generation, views = _generation({0: FakeHost(), 1: FakeHost()})
        views[0].outcome.set_result(_outcome(
            0, process.ProcessFaultKind.RAISED, "Connection closed by peer [10.0.0.3]:4000"))
        await asyncio.sleep(0.2)
        views[1].outcome.set_result(_outcome(2, process.ProcessFaultKind.SIGNALED))
        return await asyncio.wait_for(generation.outcome, 5)

    fault = asyncio.run(scenario()).fault
    assert fault is not None
    assert (fault.rank, fault.kind) == (2, process.ProcessFaultKind.SIGNALED)


def test_a_hang_on_one_host_yields_to_the_loss_of_another() -> None:
    async def scenario() -> process.GenerationOutcome:
        hosts = {0: FakeHost(), 1: FakeHost()}
        generation, views = _generation(hosts)
        views[0].outcome.set_result(_outcome(1, process.ProcessFaultKind.HUNG))
        await asyncio.sleep(0.2)
        hosts[1].lose()
        return await asyncio.wait_for(generation.outcome, 5)

    fault = asyncio.run(scenario()).fault
    assert fault is not None
    assert (fault.rank, fault.kind) == (2, process.ProcessFaultKind.HOST_LOST)
    assert "node 1, h: the other end closed the stream" in fault.detail


def test_success_needs_every_host_and_a_later_fault_wins() -> None:
    async def scenario() -> process.GenerationOutcome:
        generation, views = _generation({0: FakeHost(), 1: FakeHost()})
        views[0].outcome.set_result(process.GenerationOutcome(process.OutcomeKind.SUCCEEDED))
        await asyncio.sleep(0.1)
        assert not generation.outcome.done()
        views[1].outcome.set_result(_outcome(3, process.ProcessFaultKind.EXITED))
        return await asyncio.wait_for(generation.outcome, 5)

    assert asyncio.run(scenario()).kind is process.OutcomeKind.FAULT


def test_every_rank_stepping_is_when_the_last_host_says_so() -> None:
    async def scenario() -> float:
        generation, views = _generation({0: FakeHost(), 1: FakeHost()})
        views[1].all_stepping.set_result(7.5)
        views[0].all_stepping.set_result(7.0)
        return await asyncio.wait_for(generation.all_stepping, 5)

    assert asyncio.run(scenario()) == 7.5


def test_a_spare_is_taken_once_and_a_gone_one_never() -> None:
    async def scenario() -> list[Any]:
        pool = spare_pool.SparePool()
        first: Any = FakeHost()
        second: Any = FakeHost()
        pool.add(first)
        pool.add(second)
        first.lose()
        taken = [await pool.take(1.0), await pool.take(0.1)]
        return [taken[0] is second, taken[1]]

    assert asyncio.run(scenario()) == [True, None]


def test_a_spare_that_refuses_a_node_is_passed_over_and_stays_a_spare() -> None:
    async def scenario() -> tuple[bool, list[int], bool, Any]:
        pool = spare_pool.SparePool()
        refusing: Any = FakeHost()
        willing: Any = FakeHost()
        taken: list[int] = []

        async def refuse(node: int) -> None:
            raise process.RecoveryError(f"node {node}'s checkpoints are not writable here")

        async def accept(node: int) -> None:
            taken.append(node)

        refusing.take_ranks, willing.take_ranks = refuse, accept
        pool.add(refusing)
        pool.add(willing)
        placed = await pool.place(1, wait=0.1)
        return (placed is willing, taken, pool.waiting() == [refusing],
                await pool.place(0, wait=0.1))

    assert asyncio.run(scenario()) == (True, [1], True, None)


def test_a_spare_joining_during_the_wait_is_taken() -> None:
    async def scenario() -> bool:
        pool = spare_pool.SparePool()
        late: Any = FakeHost()
        asyncio.get_running_loop().call_later(0.2, pool.add, late)
        return await pool.take(5.0) is late

    assert asyncio.run(scenario())


def _register(host: str, node: int | None = None, **changes: Any) -> pb.Register:
    register = pb.Register(job="j", nnodes=2, max_nodes=3, nproc_per_node=2, program="train.py",
                           version="1", host=host, address="10.0.0.1", dp_size=0,
                           recovery=pb.Recovery(max_restarts=2))
    if node is not None:
        register.node_rank = node
    for name, value in changes.items():
        setattr(register, name, value)
    return register


def test_hosts_get_the_free_nodes_then_spare_places() -> None:
    job = cluster_job.ClusterJob(_register("a"))
    assert [job.admit(_register(h)) for h in "abc"] == [(0, False), (1, False), (2, True)]
    with pytest.raises(cluster_job.JoinError, match="its 2 hosts and 1 spares are all there"):
        job.admit(_register("d"))


def test_a_claimed_node_rank_is_refused_naming_its_holder_and_freed_when_it_goes() -> None:
    job = cluster_job.ClusterJob(_register("a"))
    assert job.admit(_register("a", 1)) == (1, False)
    with pytest.raises(cluster_job.JoinError, match="host b claims node rank 1 of job j, which "
                                                "host a holds"):
        job.admit(_register("b", 1))
    job.release(1)
    assert job.admit(_register("b", 1)) == (1, False)


def test_once_the_job_runs_every_newcomer_is_a_spare() -> None:
    job = cluster_job.ClusterJob(_register("a"))
    job.admit(_register("a"))
    job.admit(_register("b"))
    job.started = True
    job.release(1)  # host b is lost
    assert job.admit(_register("c", 1)) == (1, True)


def _rejoin(host: str, node: int) -> pb.Register:
    register = _register(host, node)
    register.rejoin.CopyFrom(pb.Rejoin(generation=1, wait=60))
    return register


def test_a_host_new_to_a_job_being_taken_over_takes_a_spare_place_first() -> None:
    """The nodes stay free, as far as places allow, for the hosts that held them, which
    register again; a host started to replace one that does not joins as a spare."""
    job = cluster_job.ClusterJob(_rejoin("a", 1))
    assert job.admit(_rejoin("a", 1)) == (1, False)
    assert job.admit(_register("c")) == (2, True)
    assert job.admit(_rejoin("b", 0)) == (0, False)
    with pytest.raises(cluster_job.JoinError, match="host f rejoins job j, which was formed by "
                                                "this controller"):
        cluster_job.ClusterJob(_register("a")).admit(_rejoin("f", 0))


def test_a_job_the_store_says_ran_elsewhere_is_taken_over_whoever_registers_first() -> None:
    """A new host may reach the new leader before those that register again: the job is
    still one being taken over, and they are let in; a host naming a node takes it (the job
    started anew, its hosts gone)."""
    job = cluster_job.ClusterJob(_register("c"), running=True)
    assert job.adopting
    assert job.admit(_register("c")) == (2, True)
    assert job.admit(_rejoin("a", 1)) == (1, False)
    assert job.admit(_register("d", 0)) == (0, False)
    with pytest.raises(cluster_job.JoinError, match="host b claims node rank 0 of job j, which "
                                                "host d holds"):
        job.admit(_rejoin("b", 0))


@pytest.mark.parametrize(("change", "said"), [
    ({"nproc_per_node": 4}, "it has nproc_per_node 4, the job has 2"),
    ({"program": "other.py"}, "it has program 'other.py', the job has 'train.py'"),
    ({"version": "2"}, "it has version '2', the job has '1'"),
    ({"recovery": pb.Recovery(max_restarts=5)}, "it has recovery.max_restarts 5, the job has 2"),
])
def test_a_host_that_disagrees_is_refused_with_both_values(change: dict[str, Any],
                                                           said: str) -> None:
    job = cluster_job.ClusterJob(_register("a"))
    other = _register("b")
    for name, value in change.items():
        if isinstance(value, pb.Recovery):
            other.recovery.CopyFrom(value)
        else:
            setattr(other, name, value)
    with pytest.raises(cluster_job.JoinError, match=f"host b may not join job j: {said}"):
        job.admit(other)
