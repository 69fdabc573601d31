"""The controller drives an agent through the controller protocol only: commands with ids
and acknowledgements, reports that keep each generation's view current, refusals and
failures that surface as the errors the controller handles."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.controller.agent_fakes import FakeAgent
from trainguard.agent import controller_link
from trainguard.controller import agent_proxy
from trainguard.faults import process
from trainguard.ipc import messages
from trainguard.job import replicas
from trainguard.proto import channel
from trainguard.proto import control_pb2 as pb


async def _connected(agent: FakeAgent
                     ) -> tuple[agent_proxy.AgentProxy, asyncio.Task[pb.EndJob | None]]:
    agent_end, controller_end = channel.in_process_pair()
    link_agent: Any = agent
    link = controller_link.ControllerLink(link_agent, agent_end, host="host-a")
    serving = asyncio.create_task(link.serve())
    proxy = agent_proxy.AgentProxy(controller_end)
    await proxy.connect(timeout=5)
    return proxy, serving


def test_a_generation_is_seen_as_its_agent_reports_it() -> None:
    async def scenario() -> None:
        agent = FakeAgent()
        proxy, serving = await _connected(agent)
        assert (proxy.host, proxy.spares_left, proxy.layout, proxy.trusted_layout) == (
            "host-a", 1, replicas.ReplicaLayout(4, 2), replicas.ReplicaLayout(4, 2))
        view = await proxy.start_generation(0, restart_count=0, move=[3, 1])
        assert agent.calls == [("start", (0, 0, [1, 3]))]
        assert (view.number, view.master_port, view.started_at, view.kept) == (0, 29500, 5.0, 0)
        assert view.restore == agent_proxy.RestoreInfo(messages.RestoreSource.MEMORY, 12,
                                                       "intact", "memory")
        assert view.plan_seconds == 0.25
        assert sorted(view.workers) == [0, 1, 2, 3]
        assert view.workers[2].alive
        assert view.workers[2].device == 2
        assert view.workers[2].excerpt() == ""  # no error yet: none sent

        generation = agent.generation
        assert generation is not None
        for rank in range(4):
            generation.begun(rank, 6.0 + rank)
        assert await asyncio.wait_for(view.all_stepping, 5) == 9.0

        # The ranks found the replicas different: the report of the outcome says so.
        agent.replicas_differ = "replica groups [[0, 2], [1, 3]] at dp-size 2"
        worker = generation.workers[1]
        worker.returncode, worker.exited_at, worker.completed_step = -9, 20.0, 30
        fault = process.ProcessFault(rank=1, pid=101, kind=process.ProcessFaultKind.SIGNALED,
                                     detected_at=20.5, returncode=-9, last_step=31)
        generation.settle(process.GenerationOutcome(process.OutcomeKind.FAULT, fault=fault))
        assert await asyncio.wait_for(view.outcome, 5) == process.GenerationOutcome(
            process.OutcomeKind.FAULT, fault=fault)
        assert view.completed_step == 30
        assert view.workers[1].returncode == -9
        assert not view.workers[1].alive
        assert view.workers[1].excerpt() == "stderr of rank 1"
        assert view.workers[0].excerpt() == "stderr of rank 0"  # ended: every excerpt sent
        assert proxy.layout == replicas.ReplicaLayout(4, 2)
        assert proxy.trusted_layout is None

        await proxy.close()
        await asyncio.wait_for(serving, 5)

    asyncio.run(scenario())


def test_commands_carry_their_arguments_and_results() -> None:
    async def scenario() -> None:
        agent = FakeAgent()
        proxy, serving = await _connected(agent)
        await proxy.start_generation(0, restart_count=0)
        assert await proxy.dump(failed=[2]) == 17
        assert await proxy.dump(failed=[]) is None
        await proxy.settle(timeout=1.5)
        view = await proxy.recover(1, restart_count=1, replace=[2], to_spares=True)
        assert view.number == 1
        assert view.kept == 3
        assert agent.calls[1:] == [("dump", [2]), ("dump", []), ("settle", 1.5),
                                   ("recover", (1, [2], True))]
        await proxy.close()
        await asyncio.wait_for(serving, 5)

    asyncio.run(scenario())


def test_a_graceful_stop_is_described_then_ordered_at_the_step_the_controller_agreed() -> None:
    async def scenario() -> None:
        agent = FakeAgent()
        proxy, serving = await _connected(agent)
        await proxy.start_generation(0, restart_count=0)
        generation = agent.generation
        assert generation is not None
        generation.workers[0].begun_step = 41  # reported only when described
        agent.snapshots[1] = 40
        view = await proxy.describe()
        assert view.workers[0].begun_step == 41
        assert view.workers[1].begun_step is None
        assert (view.workers[0].snapshot_step, view.workers[1].snapshot_step) == (None, 40)
        await proxy.stop_at(42)
        await proxy.stop_at(None)
        assert agent.calls[1:] == [("graceful_stop", 42), ("graceful_stop", None)]
        await proxy.close()
        await asyncio.wait_for(serving, 5)

    asyncio.run(scenario())


def test_a_refused_recovery_is_a_recovery_error_and_a_failure_is_named() -> None:
    async def scenario() -> None:
        agent = FakeAgent()
        proxy, serving = await _connected(agent)
        agent.refuse = "no saved state, and the survivors progressed"
        with pytest.raises(process.RecoveryError, match="no saved state"):
            await proxy.recover(1, restart_count=1, replace=[0], to_spares=False)
        await proxy.start_generation(0, restart_count=0)
        agent.snapshots = None  # type: ignore[assignment]  # describing the agent fails
        with pytest.raises(agent_proxy.AgentCommandError,
                           match="describing the agent failed: TypeError"):
            await proxy.stop_workers()
        agent.snapshots = {}
        agent.fail = OSError("disk gone")
        with pytest.raises(agent_proxy.AgentCommandError,
                           match="failed to carry out settle: OSError: disk gone"):
            await proxy.settle(timeout=1)
        await proxy.stop_workers()  # the agent still serves after both
        await proxy.close()
        await asyncio.wait_for(serving, 5)

    asyncio.run(scenario())


def test_an_agent_gone_fails_the_waiting_command_and_every_later_one() -> None:
    async def scenario() -> None:
        agent_end, controller_end = channel.in_process_pair()
        proxy = agent_proxy.AgentProxy(controller_end)
        agent_end.send(b"")  # not an envelope: the agent's end is unreadable
        with pytest.raises(agent_proxy.AgentCommandError, match="went away before it reported"):
            await proxy.connect(timeout=5)
        with pytest.raises(agent_proxy.AgentCommandError, match="the agent is gone"):
            await proxy.stop_workers()
        await proxy.close()

    asyncio.run(scenario())


def test_an_agent_that_never_reports_is_named_after_the_timeout() -> None:
    async def scenario() -> None:
        _, controller_end = channel.in_process_pair()
        proxy = agent_proxy.AgentProxy(controller_end)
        with pytest.raises(agent_proxy.AgentCommandError, match=r"did not report within 0.1 s"):
            await proxy.connect(timeout=0.1)
        await proxy.close()

    asyncio.run(scenario())


def test_an_agent_on_another_clock_has_its_times_taken_onto_the_controllers() -> None:
    """Monotonic clocks of two machines have nothing in common: each report says when the
    agent sent it, and the controller shifts the times it carries by receipt - sent."""
    ahead = 500.0  # the controller's clock, 500 s ahead of the agent's

    async def scenario() -> tuple[float, float, float, float]:
        agent = FakeAgent()
        agent_end, controller_end = channel.in_process_pair()
        link_agent: Any = agent
        link = controller_link.ControllerLink(link_agent, agent_end, host="host-b")
        serving = asyncio.create_task(link.serve())
        proxy = agent_proxy.AgentProxy(controller_end, clock=lambda: time.monotonic() + ahead)
        await proxy.connect(timeout=5)
        view = await proxy.start_generation(0, restart_count=0)
        generation = agent.generation
        assert generation is not None
        for rank in range(4):
            generation.begun(rank, 6.0 + rank)
        stepping = await asyncio.wait_for(view.all_stepping, 5)
        fault = process.ProcessFault(rank=1, pid=101, kind=process.ProcessFaultKind.SIGNALED,
                                     detected_at=20.5, returncode=-9, occurred_at=20.25)
        generation.settle(process.GenerationOutcome(process.OutcomeKind.FAULT, fault=fault))
        seen = (await asyncio.wait_for(view.outcome, 5)).fault
        assert seen is not None
        assert seen.occurred_at is not None
        await proxy.close()
        link.close()
        await asyncio.gather(serving, return_exceptions=True)
        return view.started_at, stepping, seen.detected_at, seen.occurred_at

    started, stepping, detected, occurred = asyncio.run(scenario())
    for got, agent_time in ((started, 5.0), (stepping, 9.0), (detected, 20.5), (occurred, 20.25)):
        assert got - agent_time == pytest.approx(ahead, abs=0.5)


def test_a_fenced_host_counts_as_gone_at_once_and_is_dismissed_through_its_open_channel(
        ) -> None:
    async def scenario() -> None:
        agent = FakeAgent()
        proxy, serving = await _connected(agent)
        proxy.fence("node host-a is UnHealthy: Power Supply 81 08000001 (SeparateFault)")
        assert isinstance(await proxy.wait_gone(), agent_proxy.HostFencedError)
        with pytest.raises(agent_proxy.AgentCommandError, match="is UnHealthy"):
            await proxy.stop_workers()  # nothing else is asked of it
        end = pb.EndJob(exit_code=4, outcome="stopped", reason="its node is UnHealthy")
        assert await proxy.dismiss(end, timeout=5)
        assert agent.calls == [("stop", None)]
        assert await asyncio.wait_for(serving, 5) == end
        await proxy.close()

    asyncio.run(scenario())


def test_a_fenced_host_that_does_not_answer_is_left_after_the_timeout() -> None:
    async def scenario() -> None:
        agent_end, controller_end = channel.in_process_pair()
        proxy = agent_proxy.AgentProxy(controller_end)
        link_agent: Any = FakeAgent()
        link = controller_link.ControllerLink(link_agent, agent_end, host="host-a")
        link._send(pb.Envelope(report=link._report()))  # it reports, then says nothing more
        await proxy.connect(timeout=5)
        proxy.fence("node host-a is UnHealthy")
        started = time.monotonic()
        assert not await proxy.dismiss(pb.EndJob(exit_code=4), timeout=0.2)
        assert time.monotonic() - started < 2
        await proxy.close()

    asyncio.run(scenario())
