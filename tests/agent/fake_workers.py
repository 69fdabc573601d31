"""Workers as the node agent sees them, without processes: each link a writer that keeps the
messages sent to it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainguard import clock as clocks
from trainguard.agent import checkpoint_memory, node_agent, workers
from trainguard.agent.settings import AgentSettings
from trainguard.detect import heartbeat
from trainguard.ipc import messages
from trainguard.job import events
from trainguard.proto import versioned, worker_codec

__all__ = ["FakeWriter", "agent_with_workers", "fake_worker"]


class FakeWriter:
    def __init__(self) -> None:
        self.sent: list[messages.Message] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        assert versioned.frame_length(data[:versioned.LENGTH_SIZE]) == len(data) - 4
        self.sent.append(worker_codec.decode(data[versioned.LENGTH_SIZE:]))


def fake_worker(rank: int, begun: int | None) -> tuple[workers.WorkerState, FakeWriter]:
    pump: Any = None
    writer = FakeWriter()
    link: Any = writer
    worker = workers.WorkerState(rank=rank, local_rank=rank, error_file=Path("/nonexistent"),
                                 stdout=pump, stderr=pump, started_at=0.0, pid=100 + rank,
                                 link=link, begun_step=begun)
    return worker, writer


def agent_with_workers(begun: Sequence[int | None], *, generation: int = 1,
                       restored: checkpoint_memory.RestoreChoice | None = None,
                       recorded: list[events.Event] | None = None, checkpoints: Any = None,
                       **settings: Any) -> tuple[node_agent.NodeAgent, list[FakeWriter]]:
    """A node agent (no processes; no checkpoints unless given) in ``generation``, with a fake
    worker per entry of ``begun`` (the step it began, or None); the events it records go to
    ``recorded``; ``settings``: more AgentSettings."""
    agent = node_agent.NodeAgent(
        AgentSettings(nproc_per_node=len(begun), run_id="job", run_dir=Path("/nonexistent"),
                      program=workers.ProgramSpec("path", "train.py", ()), **settings),
        detector=heartbeat.HangDetector(heartbeat.HeartbeatSettings()),
        checkpoints=checkpoints, clock=clocks.SystemClock(), base_env={},
        on_injection=lambda *_: None,
        record=(recorded if recorded is not None else []).append)
    current = workers.Generation(
        number=generation, restart_count=generation, master_port=29500, started_at=0.0,
        restore=restored or checkpoint_memory.RestoreChoice(messages.RestoreSource.NONE, 0,
                                                            {}, ""))
    writers = []
    for rank, step in enumerate(begun):
        current.workers[rank], writer = fake_worker(rank, step)
        writers.append(writer)
    agent._generation = current
    return agent, writers
