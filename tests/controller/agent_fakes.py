"""A node agent as the controller link sees it, for tests of the controller protocol."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from trainguard.agent import checkpoint_memory, workers
from trainguard.faults import process
from trainguard.ipc import messages
from trainguard.job import profiling_switch, replicas


class FakePump:
    def __init__(self, text: str) -> None:
        self.text = text

    def tail(self) -> str:
        return self.text


class FakeAgent:
    """What the controller link calls on a NodeAgent, recording the calls."""

    def __init__(self) -> None:
        self.layout = replicas.ReplicaLayout(4, 2)
        self.replicas_differ = ""
        self.settings = types.SimpleNamespace(node_rank=0, spare=False)
        self.placed: list[tuple[tuple[str, int] | None, int | None]] = []
        """Each generation's rendezvous and restore step, as the controller ordered them."""
        self.spares_left = 1
        self.generation: workers.Generation | None = None
        self.calls: list[tuple[str, Any]] = []
        self.refuse: str | None = None
        self.fail: Exception | None = None
        self.settling: asyncio.Event | None = None  # set: settle waits until it is set
        self.snapshots: dict[int, int] = {}  # rank -> the step of its newest snapshot

    def _form(self, number: int) -> workers.Generation:
        restore = checkpoint_memory.RestoreChoice(messages.RestoreSource.MEMORY, 12, {}, "intact")
        generation = workers.Generation(number=number, restart_count=number, master_port=29500,
                                        started_at=5.0, restore=restore, plan_seconds=0.25,
                                        kept=3 if number else 0)
        for rank in range(4):
            pump: Any = FakePump(f"stderr of rank {rank}")
            generation.workers[rank] = workers.WorkerState(
                rank=rank, local_rank=rank, error_file=Path("/nonexistent"), stdout=pump,
                stderr=pump, started_at=5.0, pid=100 + rank, device=rank)
        self.generation = generation
        return generation

    async def start_generation(self, number: int, *, restart_count: int,
                               move: Collection[int] = (),
                               rendezvous: tuple[str, int] | None = None,
                               restore_step: int | None = None,
                               peers: Mapping[int, int] | None = None) -> workers.Generation:
        self.calls.append(("start", (number, restart_count, sorted(move))))
        self.placed.append((rendezvous, restore_step))
        return self._form(number)

    def take_ranks(self, node_rank: int) -> None:
        self.calls.append(("take_ranks", node_rank))
        if self.refuse is not None:
            raise process.RecoveryError(self.refuse)

    async def host_store(self) -> tuple[str, int]:
        self.calls.append(("host_store", None))
        return "10.0.0.2", 29517

    async def leave(self, *, replace: Collection[int]) -> None:
        self.calls.append(("leave", sorted(replace)))

    async def recover(self, number: int, *, restart_count: int, replace: Collection[int],
                      to_spares: bool, rendezvous: tuple[str, int] | None = None,
                      restore_step: int | None = None,
                      peers: Mapping[int, int] | None = None) -> workers.Generation:
        self.calls.append(("recover", (number, sorted(replace), to_spares)))
        self.placed.append((rendezvous, restore_step))
        if self.refuse is not None:
            raise process.RecoveryError(self.refuse)
        return self._form(number)

    async def dump(self, *, failed: Collection[int]) -> int | None:
        self.calls.append(("dump", sorted(failed)))
        return 17 if failed else None

    async def settle(self, *, timeout: float) -> None:
        self.calls.append(("settle", timeout))
        if self.settling is not None:
            await self.settling.wait()
        if self.fail is not None:
            raise self.fail

    def disk_steps(self) -> list[int]:
        return [8]

    def held_steps(self, rank: int) -> list[int]:
        return [self.snapshots[rank]] if rank in self.snapshots else []

    async def stop_workers(self) -> None:
        self.calls.append(("stop", None))

    async def graceful_stop(self, stop_step: int | None) -> None:
        self.calls.append(("graceful_stop", stop_step))

    async def flush_checkpoints(self) -> None:
        self.calls.append(("flush", None))

    def switch_profiling(self, switch: str) -> None:
        self.calls.append(("profiling", switch))
        profiling_switch.ProfilingSwitch.from_json(switch)
