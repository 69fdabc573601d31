"""The agent's watch over one generation, every monitor interval.

A rank past its heartbeat deadline makes the generation's outcome a hang (which rank hung is
chosen by :func:`trainguard.detect.heartbeat.hung_rank`, with the processes' stopped state read
from the system); a worker that finished its work but is stuck on its way out is ended.
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
            overdue = self._detector.overdue(now=self._clock.monotonic())
            if overdue:
                generation.settle(process.GenerationOutcome(
                    process.OutcomeKind.FAULT, fault=self._hang_fault(generation, overdue)))

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

    def _hang_fault(self, generation: workers.Generation,
                    overdue: list[heartbeat.Overdue]) -> process.ProcessFault:
        def stopped(worker: workers.WorkerState) -> bool:
            try:
                return worker.pid is not None and psutil.Process(worker.pid).status() in (
                    psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
            except psutil.Error:
                return False

        suspects = [heartbeat.Suspect(w.rank, w.begun_step, stopped(w))
                    for w in generation.workers.values() if w.alive]
        rank, deadline = heartbeat.hung_rank(suspects, overdue)
        return generation.workers[rank].fault(
            process.ProcessFaultKind.HUNG, detected_at=self._clock.monotonic(),
            detail=deadline.describe())
