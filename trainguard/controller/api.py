"""What the controller needs from a node agent and from a generation of workers."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from typing import Protocol

from trainguard.faults import process
from trainguard.ipc import messages
from trainguard.job import replicas

__all__ = ["AgentHandle", "GenerationHandle", "RestoreView", "WorkerView"]


class WorkerView(Protocol):
    @property
    def rank(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def exited_at(self) -> float | None: ...
    @property
    def alive(self) -> bool: ...
    @property
    def in_process(self) -> bool:
        """It trains under Session.run: it can leave a generation and join the next."""
        ...
    @property
    def left(self) -> messages.LeftGeneration | None: ...
    @property
    def device(self) -> int:
        """The device it runs on; its faults' codes are graded against that device's history."""
        ...
    @property
    def host(self) -> str:
        """The host it runs on, in a job across hosts ("" in a job on one host): device 0 of
        one host is not device 0 of another."""
        ...
    @property
    def begun_step(self) -> int | None:
        """The step it began last in this generation."""
        ...
    @property
    def snapshot_step(self) -> int | None:
        """The step of its newest snapshot in its host's memory."""
        ...

    def excerpt(self) -> str:
        """The worker's error: its error file or the end of its stderr."""
        ...


class RestoreView(Protocol):
    @property
    def source(self) -> messages.RestoreSource: ...
    @property
    def step(self) -> int: ...
    @property
    def note(self) -> str: ...
    @property
    def label(self) -> str:
        """Where the state comes from, for people (``memory and peers``)."""
        ...


class GenerationHandle(Protocol):
    @property
    def number(self) -> int: ...
    @property
    def master_port(self) -> int: ...
    @property
    def started_at(self) -> float: ...
    @property
    def kept(self) -> int:
        """Processes carried over from the previous generation."""
        ...
    @property
    def restore(self) -> RestoreView: ...
    @property
    def plan_seconds(self) -> float:
        """Seconds spent choosing and verifying the state to restore."""
        ...
    @property
    def outcome(self) -> asyncio.Future[process.GenerationOutcome]: ...
    @property
    def all_stepping(self) -> asyncio.Future[float]:
        """Resolves with the time the last rank began its first step."""
        ...
    @property
    def completed_step(self) -> int | None: ...
    @property
    def workers(self) -> Mapping[int, WorkerView]: ...


class AgentHandle(Protocol):
    @property
    def spares_left(self) -> int: ...
    @property
    def layout(self) -> replicas.ReplicaLayout: ...
    @property
    def trusted_layout(self) -> replicas.ReplicaLayout | None:
        """``layout`` while a replica may stand in for another; None once the ranks found
        the replicas different."""
        ...

    async def start_generation(self, number: int, *, restart_count: int,
                               move: Collection[int] = ()) -> GenerationHandle:
        """Start every rank anew, the ranks in ``move`` on spare devices (the controller found
        their devices isolated).

        Raises:
            RecoveryError (of the agent): fewer spare devices are left than ranks to move.
        """
        ...

    async def recover(self, number: int, *, restart_count: int, replace: Collection[int],
                      to_spares: bool) -> GenerationHandle:
        """Form the next generation from the survivors and new processes for ``replace``.

        Raises:
            RecoveryError (of the agent): it could not be formed.
        """
        ...

    async def dump(self, *, failed: Collection[int]) -> int | None:
        """Save the newest state the healthy replicas hold; returns its step."""
        ...

    async def complete_snapshots(self, *, failed_rank: int, step: int | None,
                                 timeout: float) -> None:
        """Give healthy ranks up to ``timeout`` seconds to finish their snapshots in progress
        and to hold ``step`` (the newest any rank holds, which the failed rank may have), so
        that a restart loses no completed step."""
        ...

    async def stop_workers(self) -> None:
        """End every worker of the current generation now and wait for their exits."""
        ...

    async def describe(self) -> GenerationHandle:
        """The current generation as the agent sees it now (the view before a decision)."""
        ...

    async def stop_at(self, step: int | None) -> None:
        """Every worker saves its state once it has finished ``step`` and exits (None: no rank
        has begun a step; each is ended as torchrun would)."""
        ...

    async def settle(self, *, timeout: float) -> None:
        """Wait until every worker has exited by itself, or ``timeout`` seconds."""
        ...

    async def flush_checkpoints(self) -> None:
        """Make the newest complete snapshot durable on disk."""
        ...
