"""A controller taking a job over, through a real controller and a host's link over gRPC: the
job's hosts register again, saying how long they look for a controller; one that does not
come back within that wait has stopped itself, so those that did are stopped and told why,
not left training on without their peers, unless a spare takes its place (end to end:
tests/e2e/test_controller_failover.py)."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import pytest

from tests.controller.agent_fakes import FakeAgent
from tests.controller.test_controller_job_controller import FakeClock
from trainguard.agent import controller_link, joining
from trainguard.controller import cluster_job, job_record, policy, service
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_security
from trainguard.store import sqlite_kv

CLIENT = grpc_security.ClientSecurity(insecure=True)
RECOVERY = service.recovery_to_pb(policy.RecoverySettings())


def _link(agent: FakeAgent, connection: Any, host: str) -> asyncio.Task[pb.EndJob | None]:
    """``agent`` served over its link to the controller, as a host's agent is."""
    link_agent: Any = agent
    return asyncio.create_task(controller_link.ControllerLink(
        link_agent, connection.channel, host=host).serve())


async def _join_as_spare(settings: joining.ClusterSettings, spare: FakeAgent, *, job: str = "job",
                         nnodes: int = 2) -> asyncio.Task[pb.EndJob | None]:
    """A new host joins ``job`` (and is placed as a spare); its link, served."""
    spare.settings = types.SimpleNamespace(node_rank=None, spare=True)
    joined, placement = await joining.join(settings, pb.Register(
        job=job, nnodes=nnodes, max_nodes=nnodes + 1, nproc_per_node=2, host="host-2",
        recovery=RECOVERY), on_retry=print)
    assert placement.spare
    return _link(spare, joined, "host-2")


async def _until_started(agent: FakeAgent) -> None:
    async with asyncio.timeout(20):
        while not any(name == "start" for name, _ in agent.calls):
            await asyncio.sleep(0.05)


async def _stop(controller: service.ControllerService,
                links: list[asyncio.Task[pb.EndJob | None]]) -> None:
    await controller.stop()
    for link in links:
        link.cancel()
    await asyncio.gather(*links, return_exceptions=True)


def _rejoin_node_1() -> pb.Register:
    """Host 1 of a 2-host job (and a spare) registering again, looking 1 s for a controller."""
    return pb.Register(job="job", node_rank=1, nnodes=2, max_nodes=3, nproc_per_node=2,
                       host="host-1", recovery=RECOVERY,
                       rejoin=pb.Rejoin(generation=1, wait=1.0))


def _controller(tmp_path: Path, *, host_wait: float) -> service.ControllerService:
    return service.ControllerService(
        service.ControllerSettings(run_root=tmp_path / "controller", host_wait=host_wait,
                                   security=grpc_security.ServerSecurity(insecure=True)),
        clock=FakeClock())


def test_a_takeover_whose_host_never_returns_stops_those_that_did(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "TAKEOVER_MARGIN", 0.5)

    async def scenario() -> tuple[pb.EndJob | None, list[tuple[str, Any]], float]:
        controller = _controller(tmp_path, host_wait=0.5)
        port = await controller.start("127.0.0.1:0")
        agent = FakeAgent()
        try:
            settings = joining.ClusterSettings(endpoint=f"127.0.0.1:{port}", nnodes=2,
                                               security=CLIENT)
            register = pb.Register(job="job", node_rank=1, nnodes=2, nproc_per_node=2,
                                   host="host-1", rejoin=pb.Rejoin(generation=1, wait=1.0))
            connection, _ = await joining.rejoin(settings, register, within=10)
            started = asyncio.get_running_loop().time()
            link_agent: Any = agent
            link = controller_link.ControllerLink(link_agent, connection.channel,
                                                  host="host-1")
            end = await asyncio.wait_for(link.serve(), 30)
            waited = asyncio.get_running_loop().time() - started
            await connection.disconnect()
            async with asyncio.timeout(10):  # once the host's acknowledgement is read
                while controller.status().jobs:
                    await asyncio.sleep(0.05)
        finally:
            await controller.stop()
        return end, agent.calls, waited

    end, calls, waited = asyncio.run(scenario())
    assert end is not None, "the host was told how its job ended"
    assert (end.exit_code, end.outcome) == (1, "stopped")
    assert "node rank(s) [0] did not register again within 1.5 s" in end.reason
    assert "no spare host took their place within 0.5 s more" in end.reason
    assert [name for name, _ in calls] == ["stop", "flush"], \
        "its workers stopped, then its memory written to disk"
    assert 1.5 <= waited < 10.0, "ended once the hosts' wait, the margin and the host wait " \
        "had passed"


def test_a_spare_that_cannot_take_the_missing_node_is_passed_over_and_told_the_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "TAKEOVER_MARGIN", 0.5)

    async def serve(port: int, agent: FakeAgent, *, node: int, spare: bool) -> pb.EndJob | None:
        settings = joining.ClusterSettings(endpoint=f"127.0.0.1:{port}", nnodes=2,
                                           security=CLIENT)
        register = pb.Register(job="job", node_rank=node, nnodes=2, max_nodes=3,
                               nproc_per_node=2, host=f"host-{node}",
                               rejoin=pb.Rejoin(generation=1, wait=1.0, spare=spare))
        connection, _ = await joining.rejoin(settings, register, within=10)
        link_agent: Any = agent
        try:
            return await asyncio.wait_for(controller_link.ControllerLink(
                link_agent, connection.channel, host=f"host-{node}").serve(), 30)
        finally:
            await connection.disconnect()

    async def scenario() -> tuple[list[pb.EndJob | None], list[tuple[str, Any]]]:
        controller = _controller(tmp_path, host_wait=0.5)
        port = await controller.start("127.0.0.1:0")
        host, spare = FakeAgent(), FakeAgent()
        spare.settings = types.SimpleNamespace(node_rank=2, spare=True)
        spare.refuse = "node 0's checkpoint directory is not writable here"
        try:
            ends = await asyncio.gather(serve(port, host, node=1, spare=False),
                                        serve(port, spare, node=2, spare=True))
        finally:
            await controller.stop()
        return list(ends), spare.calls

    ends, calls = asyncio.run(scenario())
    assert ("take_ranks", 0) in calls
    for end in ends:
        assert end is not None, "every host, the spare too, was told how the job ended"
        assert (end.exit_code, end.outcome) == (1, "stopped")
        assert "node rank(s) [0] did not register again" in end.reason
        assert "no spare host took their place" in end.reason


def test_a_host_started_after_the_takeover_wait_takes_the_missing_node_as_a_spare(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No spare came back with the job's hosts: a host started afresh within the host wait
    joins as a spare and takes the missing node, as after a host's loss."""
    monkeypatch.setattr(service, "TAKEOVER_MARGIN", 0.5)

    async def scenario() -> tuple[list[tuple[str, Any]], list[tuple[str, Any]], float]:
        controller = _controller(tmp_path, host_wait=30.0)
        port = await controller.start("127.0.0.1:0")
        host, spare = FakeAgent(), FakeAgent()
        settings = joining.ClusterSettings(endpoint=f"127.0.0.1:{port}", nnodes=2,
                                           security=CLIENT)
        rejoined, _ = await joining.rejoin(settings, _rejoin_node_1(), within=10)
        serving = [_link(host, rejoined, "host-1")]
        started = asyncio.get_running_loop().time()
        try:
            await asyncio.sleep(2.5)  # past the takeover's wait (1 s and the margin)
            assert controller.status().jobs, "the job waits for a spare, not stopped"
            serving.append(await _join_as_spare(settings, spare))
            await _until_started(spare)
            took = asyncio.get_running_loop().time() - started
        finally:
            await _stop(controller, serving)
        return host.calls, spare.calls, took

    host_calls, spare_calls, took = asyncio.run(scenario())
    assert ("take_ranks", 0) in spare_calls
    assert spare_calls.index(("take_ranks", 0)) < next(
        i for i, (name, _) in enumerate(spare_calls) if name == "start")
    assert any(name == "start" for name, _ in host_calls), "the job restarted on both hosts"
    assert took < 20.0


def test_a_takeover_gives_up_on_missing_hosts_once_those_back_train_no_more() -> None:
    """A host whose ranks live trains with the ranks of the hosts that came back; once none of
    those trains, the missing host's ranks are gone and a spare may take its node at once."""
    job = cluster_job.ClusterJob(pb.Register(job="job", nnodes=2, max_nodes=3, nproc_per_node=2,
                                          host="host-0", rejoin=pb.Rejoin(wait=60)))
    host: Any = types.SimpleNamespace(training=True, gone=None)
    job.hosts[0] = host
    assert not service.ControllerService._lost_in_takeover(job), "node 1's ranks may live"
    host.training = False
    assert not service.ControllerService._lost_in_takeover(job), "no spare to take node 1"
    spare: Any = types.SimpleNamespace(gone=None)
    job.spares.add(spare)
    assert service.ControllerService._lost_in_takeover(job)
    host.training = True
    assert not service.ControllerService._lost_in_takeover(job)


def test_a_new_host_reaching_the_new_leader_first_does_not_shut_out_those_that_rejoin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store holds the job's record (its controller went away): a spare started to replace
    a lost host registers before the host that lived; that one is let in, and the spare takes
    the lost node once the host trains no more."""
    monkeypatch.setattr(service, "TAKEOVER_MARGIN", 0.5)

    async def scenario() -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
        run_root = tmp_path / "controller"
        run_root.mkdir()
        store = sqlite_kv.SqliteKeyValueStore.open(run_root / service.KV_NAME)
        await store.put(job_record.PREFIX + "job",
                        job_record.JobRecord(job="job", generation=1).to_json())
        await store.close()
        controller = _controller(tmp_path, host_wait=10.0)
        port = await controller.start("127.0.0.1:0")
        host, spare = FakeAgent(), FakeAgent()
        settings = joining.ClusterSettings(endpoint=f"127.0.0.1:{port}", nnodes=2,
                                           security=CLIENT)
        links = []
        try:
            links.append(await _join_as_spare(settings, spare))
            rejoined, _ = await joining.rejoin(settings, _rejoin_node_1(), within=10)
            links.append(_link(host, rejoined, "host-1"))
            await _until_started(spare)
        finally:
            await _stop(controller, links)
        return host.calls, spare.calls

    host_calls, spare_calls = asyncio.run(scenario())
    assert ("take_ranks", 0) in spare_calls
    assert any(name == "start" for name, _ in host_calls), "the host that lived is in the job"
