"""Real faults on purpose, for demonstrations and tests (``trainguard fault inject``, --inject).

A crash or hang asked for now is a signal the agent sends (SIGKILL, SIGSTOP). Anything at a
given step, and any exception, is an order to the worker's session, which strikes inside that
step; orders for a rank whose session is not connected yet (it is restarting) wait for it. A
planned fault (--inject) is delivered to every new process of its rank until it has struck once.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import signal
from collections.abc import Callable

from trainguard import clock as clocks
from trainguard.agent import workers
from trainguard.ipc import messages

__all__ = ["FaultInjector", "InjectionError", "PlannedFault"]


class InjectionError(ValueError):
    """A fault injection that cannot be done; the message says why."""


@dataclasses.dataclass(frozen=True)
class PlannedFault:
    """Inject ``kind`` into ``rank`` when it starts step ``step`` (once per job)."""

    kind: messages.InjectionKind
    rank: int
    step: int


class FaultInjector:
    def __init__(self, plan: tuple[PlannedFault, ...], *, clock: clocks.Clock,
                 on_injection: Callable[[int, messages.InjectionKind, int | None], None]
                 ) -> None:
        self._plan = list(plan)
        self._clock = clock
        self._on_injection = on_injection
        self._queued: dict[int, list[messages.InjectFault]] = collections.defaultdict(list)
        self._sessions_seen = False

    def connected(self, worker: workers.WorkerState) -> None:
        """A worker's session connected: hand it the orders for its rank."""
        self._sessions_seen = True
        for planned in self._plan:
            if planned.rank == worker.rank:
                worker.send(messages.InjectFault(planned.kind, planned.step))
        for queued in self._queued.pop(worker.rank, []):
            worker.send(queued)

    def struck(self, worker: workers.WorkerState, report: messages.FaultInjected) -> None:
        """A worker reports an injected fault taking effect: a planned one is done."""
        worker.injected = report
        self._plan = [p for p in self._plan
                      if not (p.rank == worker.rank and p.kind == report.kind)]

    def inject(self, generation: workers.Generation | None, rank: int,
               kind: messages.InjectionKind, at_step: int | None) -> str:
        """Cause a real fault in a worker; returns what was done.

        Raises:
            InjectionError: no such rank, or a fault the rank's script cannot receive.
        """
        if generation is None:
            raise InjectionError("no workers are running yet")
        worker = generation.workers.get(rank)
        if worker is None:
            raise InjectionError(
                f"there is no rank {rank}; the job has ranks 0..{len(generation.workers) - 1}")
        signalled = kind in (messages.InjectionKind.CRASH, messages.InjectionKind.HANG)
        if at_step is None and signalled and worker.alive:
            assert worker.pid is not None
            self._on_injection(rank, kind, at_step)
            signum = signal.SIGKILL if kind is messages.InjectionKind.CRASH else signal.SIGSTOP
            worker.injected = messages.FaultInjected(kind, worker.begun_step or 0,
                                                     self._clock.monotonic())
            os.kill(worker.pid, signum)
            return f"sent {signum.name} to rank {rank} (pid {worker.pid})"
        order = messages.InjectFault(kind, at_step)
        when = f"at step {at_step}" if at_step is not None else "at its next step"
        if worker.send(order):
            self._on_injection(rank, kind, at_step)
            return f"rank {rank} gets the {kind} {when}"
        if self._sessions_seen:
            self._on_injection(rank, kind, at_step)
            self._queued[rank].append(order)
            return f"queued: rank {rank} gets the {kind} {when} once its session connects"
        raise InjectionError(
            f"rank {rank} does not use trainguard.train, so only an immediate crash or hang "
            "can be injected (no --at-step)")
