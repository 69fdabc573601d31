"""Which rank's fault a generation ends with, from what the workers report.

The reports race: a rank killed outright makes its peers' collectives fail at once, and their
errors can reach the agent before the dead rank's exit is seen; a worker that says why it is
about to die says it on its socket, which the exit notice can overtake. So each report waits a
moment, briefly and only when it has to, for the report that explains it, and the first fault
settles the generation (:meth:`workers.Generation.settle`; later ones are observations).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Coroutine

from trainguard import clock as clocks
from trainguard.agent import workers
from trainguard.faults import process
from trainguard.ipc import messages

__all__ = ["FaultAttribution"]

_ATTRIBUTION_SECONDS = 0.1  # how long an exception report waits for a rank's death to explain it
# How long a rank whose collective failed waits for the cause (a peer's exit or error) before
# the failure counts as the collective's own, with every rank alive.
_COMMUNICATION_SECONDS = 0.3
_LAST_WORDS_SECONDS = 0.5  # how long an exit waits for what the worker sent before it


class FaultAttribution:
    def __init__(self, clock: clocks.Clock) -> None:
        self._clock = clock
        self._reports: set[asyncio.Task[None]] = set()

    def exited(self, generation: workers.Generation, worker: workers.WorkerState) -> None:
        """A worker exited with an error by itself."""
        self._track(self._exited(generation, worker))

    def raised(self, generation: workers.Generation, worker: workers.WorkerState,
               error: str, *, code: str = "") -> None:
        """A worker reported an uncaught exception (a device fault: with its ``code``) as it
        began to exit."""
        self._track(self._raised(generation, worker, error, code=code))

    def left(self, generation: workers.Generation, worker: workers.WorkerState,
             left: messages.LeftGeneration) -> None:
        """A worker left its generation with an error (it stays, waiting for orders)."""
        if left.error and not process.lost_a_peer(left.error):
            self._track(self._raised(generation, worker, left.error))
        else:
            self._track(self._collective_failed(generation, worker, left))

    def _track(self, report: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(report)
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    async def _raised(self, generation: workers.Generation, worker: workers.WorkerState,
                      error: str, *, code: str = "") -> None:
        """The rank's own error: the root cause, unless another rank's death caused it (an
        error that was not injected waits a moment, and yields to a rank that exited)."""
        detected_at = self._clock.monotonic()
        if worker.injected is None:
            await asyncio.sleep(_ATTRIBUTION_SECONDS)
            if any(w.returncode not in (None, 0) and not w.stopping and w is not worker
                   for w in generation.workers.values()):
                return
        fault = worker.fault(process.ProcessFaultKind.RAISED, detected_at=detected_at,
                             detail=error.strip().splitlines()[-1] if error.strip() else "")
        fault = dataclasses.replace(fault, code=code)
        left = worker.left
        if left is not None:
            fault = dataclasses.replace(fault, code=left.code, alive=worker.alive,
                                        last_step=fault.last_step if left.step is None
                                        else left.step)
        generation.settle(process.GenerationOutcome(process.OutcomeKind.FAULT, fault=fault))

    async def _collective_failed(self, generation: workers.Generation,
                                 worker: workers.WorkerState,
                                 left: messages.LeftGeneration) -> None:
        """A peer-lost error: the cause is elsewhere (an exit, another rank's error, which
        arrive meanwhile); if none comes, the collective failed by itself."""
        detected_at = self._clock.monotonic()
        await asyncio.sleep(_COMMUNICATION_SECONDS)
        if generation.outcome.done() or not all(w.alive for w in generation.workers.values()):
            return
        struck = next((w for w in generation.workers.values() if w.injected is not None), worker)
        fault = struck.fault(process.ProcessFaultKind.COMMUNICATION, detected_at=detected_at,
                             detail="a collective failed while every rank is alive")
        fault = dataclasses.replace(fault, alive=True, error_excerpt=left.error)
        generation.settle(process.GenerationOutcome(process.OutcomeKind.FAULT, fault=fault))

    async def _exited(self, generation: workers.Generation,
                      worker: workers.WorkerState) -> None:
        """The exit's fault, once what the worker sent before dying is read (briefly)."""
        detected_at = worker.exited_at if worker.exited_at is not None else (
            self._clock.monotonic())
        if worker.link is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.disconnected.wait(), _LAST_WORDS_SECONDS)
        returncode = worker.returncode or 0
        kind = (process.ProcessFaultKind.SIGNALED if returncode < 0
                else process.ProcessFaultKind.EXITED)
        generation.settle(process.GenerationOutcome(
            process.OutcomeKind.FAULT, fault=worker.fault(kind, detected_at=detected_at)))
