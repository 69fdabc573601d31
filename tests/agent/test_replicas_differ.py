"""The agent told that the replicas differ lets none stand in for a lost rank from then on."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping

import pytest

from tests.agent.fake_workers import agent_with_workers
from trainguard.agent import checkpoint_memory, node_agent
from trainguard.faults import process
from trainguard.ipc import messages
from trainguard.job import events, replicas

DETAIL = "replica groups [[0, 1]] at dp-size 2"


class Checkpoints:
    """Plans every restore from memory, keeping the replica layout each plan was given."""

    def __init__(self) -> None:
        self.layouts: list[replicas.ReplicaLayout | None] = []

    async def plan_restore(self, *, lost: Collection[int],
                           layout: replicas.ReplicaLayout | None, step: int | None,
                           peers: Mapping[int, int] | None) -> checkpoint_memory.RestoreChoice:
        self.layouts.append(layout)
        return checkpoint_memory.RestoreChoice(messages.RestoreSource.MEMORY, 7, {}, "")


def _hello(rank: int) -> messages.Hello:
    return messages.Hello(rank=rank, local_rank=rank, pid=100 + rank, generation=1)


def test_once_told_the_replicas_differ_the_agent_lets_none_stand_in() -> None:
    recorded: list[events.Event] = []
    checkpoints = Checkpoints()

    async def scenario() -> node_agent.NodeAgent:
        agent, _ = agent_with_workers((5, 5), recorded=recorded, checkpoints=checkpoints)
        await agent._plan_restore(lost=(), step=None, peers=None)
        for rank in (1, 0):  # every rank finds it; the first one says so
            agent.worker_message(_hello(rank), messages.ReplicasDiffer(DETAIL, 3.0))
        await agent._plan_restore(lost=[1], step=None, peers=None)
        with pytest.raises(process.RecoveryError, match=r"the replicas differ \(replica groups"):
            await agent._plan_restore(lost=(), step=7, peers={1: 0})
        return agent

    agent = asyncio.run(scenario())
    assert checkpoints.layouts == [replicas.ReplicaLayout(2, 2), None]
    assert agent.layout == replicas.ReplicaLayout(2, 2)  # what the job was given, still
    assert agent.trusted_layout is None
    assert recorded == [events.ReplicasDiffer(job="job", rank=1, detail=DETAIL)]
    assert recorded[0].summary() == (f"rank 1: the replicas differ ({DETAIL}): no replica "
                                     "stands in for a lost rank from now on")
