"""The agent's wait for a lost rank's share to be written again (CompleteShares) ends as soon as
a rank has written it, or every rank asked has answered or left."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tests.agent.fake_workers import FakeWriter, agent_with_workers
from trainguard.agent import node_agent, workers
from trainguard.ipc import messages


def _agent() -> tuple[node_agent.NodeAgent, list[workers.WorkerState], list[FakeWriter]]:
    agent, writers = agent_with_workers((5, 5, 5, 5))
    return agent, [agent._current().workers[rank] for rank in (1, 2, 3)], writers


def _hello(rank: int) -> messages.Hello:
    return messages.Hello(rank=rank, local_rank=rank, pid=100 + rank, generation=1)


def _order(writer: FakeWriter) -> messages.CompleteShares:
    [order] = [m for m in writer.sent if isinstance(m, messages.CompleteShares)]
    return order


def _waited(answer: Callable[[node_agent.NodeAgent, list[FakeWriter]], None]) -> float:
    """Seconds the agent waits (of 30 at most) for rank 0's share when ``answer`` is all the
    ranks do once asked."""
    async def scenario() -> float:
        agent, healthy, writers = _agent()
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = asyncio.create_task(agent._complete_shares(healthy, 0, timeout=30.0))
        await asyncio.sleep(0.05)
        answer(agent, writers)
        await asyncio.wait_for(waiting, 10.0)
        return loop.time() - started

    return asyncio.run(scenario())


def test_the_wait_ends_once_the_successor_has_written_the_share() -> None:
    def successor_writes(agent: node_agent.NodeAgent, writers: list[FakeWriter]) -> None:
        order = _order(writers[1])
        assert order.holder == 0
        # rank 1 (rank 0's ring successor) wrote it; ranks 2 and 3 never answer
        agent.worker_message(_hello(1), messages.ControlReply(order.request_id, True, ""))

    assert _waited(successor_writes) < 5.0, "not the 30 s the others could take"


def test_a_rank_that_leaves_without_answering_ends_its_wait() -> None:
    def successor_leaves(agent: node_agent.NodeAgent, writers: list[FakeWriter]) -> None:
        for rank in (2, 3):
            agent.worker_message(_hello(rank), messages.ControlReply(
                _order(writers[rank]).request_id, False, "not the ring successor"))
        agent.worker_disconnected(_hello(1))  # the successor exits (a plain Session's error)

    assert _waited(successor_leaves) < 5.0


def test_without_answers_the_wait_lasts_its_timeout() -> None:
    async def scenario() -> float:
        agent, healthy, _ = _agent()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(agent._complete_shares(healthy, 0, timeout=1.5), 10.0)
        return loop.time() - started

    assert 1.4 < asyncio.run(scenario()) < 5.0
