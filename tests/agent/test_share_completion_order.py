"""The agent's wait for a lost rank's share to be written again (CompleteShares) ends as soon as
a rank has written it, or every rank asked has answered or left."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.agent.fake_workers import FakeWriter, fake_worker
from trainguard import clock as clocks
from trainguard.agent import checkpoint_memory, node_agent, workers
from trainguard.agent.settings import AgentSettings
from trainguard.detect import heartbeat
from trainguard.ipc import messages


def _agent() -> tuple[node_agent.NodeAgent, list[workers.WorkerState], list[FakeWriter]]:
    settings = AgentSettings(nproc_per_node=4, run_id="job", run_dir=Path("/nonexistent"),
                             program=workers.ProgramSpec("path", "train.py", ()))
    checkpoints: Any = None
    agent = node_agent.NodeAgent(
        settings, detector=heartbeat.HangDetector(heartbeat.HeartbeatSettings()),
        checkpoints=checkpoints, clock=clocks.SystemClock(), base_env={},
        on_injection=lambda *_: None)
    restore = checkpoint_memory.RestoreChoice(messages.RestoreSource.MEMORY, 0, {}, "")
    generation = workers.Generation(number=1, restart_count=0, master_port=29500,
                                    started_at=0.0, restore=restore)
    writers = []
    for rank in range(4):
        generation.workers[rank], writer = fake_worker(rank, 5)
        writers.append(writer)
    agent._generation = generation
    return agent, [generation.workers[rank] for rank in (1, 2, 3)], writers


def _hello(rank: int) -> messages.Hello:
    return messages.Hello(rank=rank, local_rank=rank, pid=100 + rank, generation=1)


def _order(writer: FakeWriter) -> messages.CompleteShares:
    [order] = [m for m in writer.sent if isinstance(m, messages.CompleteShares)]
    return order


def test_the_wait_ends_once_the_successor_has_written_the_share() -> None:
    async def scenario() -> float:
        agent, healthy, writers = _agent()
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = asyncio.create_task(agent._complete_shares(healthy, 0, timeout=30.0))
        await asyncio.sleep(0.05)
        order = _order(writers[1])
        assert order.holder == 0
        # rank 1 (rank 0's ring successor) wrote it; ranks 2 and 3 never answer
        agent.worker_message(_hello(1), messages.ControlReply(order.request_id, True, ""))
        await asyncio.wait_for(waiting, 10.0)
        return loop.time() - started

    assert asyncio.run(scenario()) < 5.0, "not the 30 s the others could take"


def test_a_rank_that_leaves_without_answering_ends_its_wait() -> None:
    async def scenario() -> float:
        agent, healthy, writers = _agent()
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = asyncio.create_task(agent._complete_shares(healthy, 0, timeout=30.0))
        await asyncio.sleep(0.05)
        for rank in (2, 3):
            agent.worker_message(_hello(rank), messages.ControlReply(
                _order(writers[rank]).request_id, False, "not the ring successor"))
        agent.worker_disconnected(_hello(1))  # the successor exits (a plain Session's error)
        await asyncio.wait_for(waiting, 10.0)
        return loop.time() - started

    assert asyncio.run(scenario()) < 5.0


def test_without_answers_the_wait_lasts_its_timeout() -> None:
    async def scenario() -> float:
        agent, healthy, _ = _agent()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(agent._complete_shares(healthy, 0, timeout=1.5), 10.0)
        return loop.time() - started

    assert 1.4 < asyncio.run(scenario()) < 5.0
