"""Workers as the node agent sees them, without processes: each link a writer that keeps the
messages sent to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainguard.agent import workers
from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec

__all__ = ["FakeWriter", "fake_worker"]


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
