"""The agent's watch over one generation, every monitor interval.

A rank past its heartbeat deadline makes the generation's outcome a hang (which rank hung is
chosen by :func:`trainguard.detect.heartbeat.hung_rank`). Each round also reads from the system
whether each live worker's process is stopped and tells the detector, for which a process stopped
too long is a hang at any time. A worker that finished its work but is stuck on its way out is
ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psutil

from trainguard import clock as clocks
from trainguard.agent import workers
from trainguard.detect import heartbeat
from trainguard.faults import process

__all__ = ["Watchdog"]


class Watchdog:
    def __init__(self, *, detector: heartbeat.HangDetector, clock: clocks.Clock,
                 interval: float, end: Callable[[workers.WorkerState], None],
                 log: logging.LoggerAdapter[logging.Logger]) -> None:
        self._detector = detector
        self._clock = clock
        self._interval = interval
        self._end = end
        self._log = log

    async def watch(self, generation: workers.Generation) -> None:
        """Until the generation has an outcome."""
        while not generation.outcome.done():
            await asyncio.sleep(self._interval)
            self._end_stuck_exits(generation)
            now = self._clock.monotonic()
            stopped = {worker.rank: _stopped(worker)
                       for worker in generation.workers.values() if worker.alive}
            for rank, is_stopped in stopped.items():
                self._detector.stopped(rank, is_stopped, at=now)
            overdue = self._detector.overdue(now=now)
            if overdue:
                generation.settle(process.GenerationOutcome(
                    process.OutcomeKind.FAULT,
                    fault=self._hang_fault(generation, overdue, stopped)))

    def _end_stuck_exits(self, generation: workers.Generation) -> None:
        timeout = self._detector.settings.exit_timeout
        for worker in generation.workers.values():
            if (worker.alive and worker.finished_at is not None
                    and not worker.ended_after_finishing
                    and self._clock.monotonic() - worker.finished_at > timeout):
                self._log.warning(
                    "rank %d finished its work %.0f s ago but has not exited (torch can "
                    "deadlock tearing a process group down); ending it", worker.rank, timeout)
                worker.ended_after_finishing = True
                self._end(worker)

    def _hang_fault(self, generation: workers.Generation, overdue: list[heartbeat.Overdue],
                    stopped: dict[int, bool]) -> process.ProcessFault:
        suspects = [heartbeat.Suspect(rank, generation.workers[rank].begun_step, is_stopped)
                    for rank, is_stopped in stopped.items()]
        rank, deadline = heartbeat.hung_rank(suspects, overdue)
        return generation.workers[rank].fault(
            process.ProcessFaultKind.HUNG, detected_at=self._clock.monotonic(),
            detail=deadline.describe())


def _stopped(worker: workers.WorkerState) -> bool:
    """The worker's process is stopped (SIGSTOP, or a debugger holds it)."""
    try:
        return worker.pid is not None and psutil.Process(worker.pid).status() in (
            psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:  # it exited meanwhile: the exit is reported on its own
        return False
