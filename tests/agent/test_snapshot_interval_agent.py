"""The agent tells every rank the snapshot interval, counted from a step no rank has begun, on
the grid of the restored step."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.agent.fake_workers import FakeWriter, agent_with_workers
from trainguard.agent import checkpoint_memory
from trainguard.ipc import messages


def test_a_new_interval_reaches_every_rank_from_the_same_unbegun_step() -> None:
    async def scenario() -> tuple[list[list[messages.Message]], int, list[messages.Message]]:
        agent, writers = agent_with_workers(
            (30, 31, None), snapshot_every="auto",
            restored=checkpoint_memory.RestoreChoice(messages.RestoreSource.MEMORY, 12, {}, ""))
        agent.pace_snapshots(1)  # unchanged: nothing sent
        agent.pace_snapshots(4)
        sent = [list(writer.sent) for writer in writers]
        # A rank that (re)connects counts from the step its generation restores.
        reconnected = FakeWriter()
        stream: Any = reconnected
        assert agent.worker_connected(messages.Hello(rank=2, local_rank=2, pid=102,
                                                     generation=1), stream)
        return sent, agent.snapshot_every, reconnected.sent

    sent, every, reconnected = asyncio.run(scenario())
    assert every == 4
    # The furthest rank began 31: 33 is the first step none can have reached; 36 is the next
    # on the grid of the restored step 12, which a rank connecting later counts from.
    assert sent == [[messages.SnapshotInterval(every=4, from_step=36)]] * 3
    assert reconnected == [messages.SnapshotInterval(every=4, from_step=12)]


def test_a_hello_before_the_pid_is_known_is_taken_on_the_workers_secret_alone() -> None:
    """Under load a forked worker can say hello before the standby's answer with its pid is
    read: its own secret admits it then; a wrong secret, or a worker not yet spawned (no
    secret), does not."""
    async def scenario() -> list[bool]:
        agent, _ = agent_with_workers((None, None), generation=0)
        generation = agent._current()
        for worker in generation.workers.values():
            worker.pid = None
        generation.workers[0].secret = "secret-of-rank-0"
        stream: Any = FakeWriter()
        return [agent.worker_connected(messages.Hello(
                    rank=rank, local_rank=rank, pid=4242, generation=0, secret=secret), stream)
                for rank, secret in ((0, "secret-of-rank-0"), (0, "wrong"), (1, ""))]

    assert asyncio.run(scenario()) == [True, False, False]
