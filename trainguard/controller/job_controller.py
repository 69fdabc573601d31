"""Runs one job through its generations: start, watch, decide, recover, until it ends.

Every fault, decision and recovery is recorded (and so survives this process); the job's current
state is published as the document ``job-status-<job>`` for ``trainguard status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Any

from trainguard import clock as clocks
from trainguard.controller import api, policy
from trainguard.faults import events, process
from trainguard.store import recorder

__all__ = ["FaultRecord", "JobController", "JobResult"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FaultRecord:
    fault: process.ProcessFault
    generation: int
    decision: policy.Decision
    recovery: events.RecoveryCompleted | None = None


@dataclasses.dataclass(frozen=True)
class JobResult:
    outcome: events.JobOutcome
    reason: str
    exit_code: int
    faults: tuple[FaultRecord, ...]
    generations: int
    restarts_used: int
    wall_seconds: float
    resume_step: int  # steps completed when the job ended (the step a later run resumes at)
    errors: str = ""  # the workers' errors, root cause first, when the job failed


class JobController:
    def __init__(
        self,
        settings: policy.RecoverySettings,
        *,
        job: str,
        world_size: int,
        agent: api.AgentHandle,
        recorder: recorder.EventRecorder,
        clock: clocks.Clock,
    ) -> None:
        self.settings = settings
        self._job = job
        self._world_size = world_size
        self._agent = agent
        self._recorder = recorder
        self._clock = clock
        self._stop = asyncio.Event()
        self._stop_reason = ""
        self._stop_exit_code = 1
        self._faults: list[FaultRecord] = []
        self._resume_step = 0
        self._restarts_used = 0

    def request_stop(self, reason: str, *, exit_code: int) -> None:
        """Stop the job gracefully (dying checkpoint), e.g. on SIGINT or SIGTERM."""
        if not self._stop.is_set():
            self._stop_reason, self._stop_exit_code = reason, exit_code
            self._stop.set()

    async def run(self) -> JobResult:
        started = self._clock.monotonic()
        number = 0
        recovering: int | None = None  # index in self._faults of the fault being recovered
        while True:
            if self._stop.is_set():
                return await self._finish(events.JobOutcome.STOPPED, self._stop_reason,
                                          self._stop_exit_code, number, started)
            generation = await self._agent.start_generation(
                number, restart_count=self._restarts_used)
            self._record(events.GenerationStarted(
                job=self._job, generation=number, world_size=self._world_size,
                master_port=generation.master_port, restart_count=self._restarts_used,
                restore_source=str(generation.restore.source),
                restore_step=generation.restore.step, plan_seconds=generation.plan_seconds))
            self._publish("running" if recovering is None else "recovering", generation)
            watcher = None
            if recovering is not None:
                watcher = asyncio.create_task(self._measure_recovery(generation, recovering))
            outcome = await self._outcome(generation)
            if watcher is not None and not watcher.done():
                watcher.cancel()
            self._note_progress(generation)
            if outcome is None or outcome.kind is process.OutcomeKind.STOP_REQUESTED:
                await self._agent.graceful_stop()
                await self._agent.flush_checkpoints()
                self._note_progress(generation)
                reason = self._stop_reason or (outcome.detail if outcome else "stop requested")
                code = self._stop_exit_code if self._stop.is_set() else 143
                return await self._finish(events.JobOutcome.STOPPED, reason, code, number + 1,
                                          started)
            if outcome.kind is process.OutcomeKind.SUCCEEDED:
                await self._agent.stop_workers()
                await self._agent.flush_checkpoints()
                return await self._finish(events.JobOutcome.SUCCEEDED, "every rank finished", 0,
                                          number + 1, started)
            if outcome.kind is process.OutcomeKind.FATAL:
                await self._agent.stop_workers()
                await self._agent.flush_checkpoints()
                return await self._finish(events.JobOutcome.FAILED, outcome.detail, 1,
                                          number + 1, started)
            assert outcome.fault is not None
            decision, errors = await self._handle_fault(generation, outcome.fault)
            if decision.strategy is policy.Strategy.FAIL:
                await self._agent.flush_checkpoints()
                return await self._finish(events.JobOutcome.FAILED, decision.reason, 1,
                                          number + 1, started, errors=errors)
            self._restarts_used += 1
            number += 1
            recovering = len(self._faults) - 1

    async def _outcome(self, generation: api.GenerationHandle
                       ) -> process.GenerationOutcome | None:
        """The generation's outcome, or None if a stop was requested first."""
        stop = asyncio.create_task(self._stop.wait())
        waiting: list[asyncio.Future[Any]] = [generation.outcome, stop]
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stop
        if self._stop.is_set():
            return None
        return generation.outcome.result()

    async def _handle_fault(self, generation: api.GenerationHandle, fault: process.ProcessFault
                            ) -> tuple[policy.Decision, str]:
        if policy.may_be_crash_loop(self.settings, self._context(generation, fault)):
            await self._agent.settle(timeout=self.settings.crash_loop_settle)
        await self._agent.complete_snapshots(failed_rank=fault.rank,
                                             timeout=self.settings.snapshot_grace)
        await self._agent.stop_workers()
        fault = dataclasses.replace(fault, error_excerpt=generation.workers[fault.rank].excerpt())
        others = [
            process.ProcessFault(rank=w.rank, pid=0, kind=process.ProcessFaultKind.EXITED,
                                 detected_at=w.exited_at or fault.detected_at,
                                 returncode=w.returncode, error_excerpt=w.excerpt())
            for w in self._failed_by_themselves(generation, fault) if w.rank != fault.rank
        ]
        context = self._context(generation, fault, others=others)
        self._record(events.FaultDetected.of(job=self._job, generation=generation.number,
                                             fault=fault))
        decision = policy.decide(self.settings, context)
        self._faults.append(FaultRecord(fault, generation.number, decision))
        self._record(events.DecisionMade(
            job=self._job, generation=generation.number, strategy=str(decision.strategy),
            reason=decision.reason, restarts_left=context.restarts_left
            - (decision.strategy is policy.Strategy.EXIT)))
        return decision, self._errors(generation, fault)

    def _context(self, generation: api.GenerationHandle, fault: process.ProcessFault, *,
                 others: list[process.ProcessFault] | None = None) -> policy.FaultContext:
        """What the policy looks at; ``others``: the other ranks that failed by themselves."""
        return policy.FaultContext(
            fault=fault, age=fault.detected_at - generation.started_at,
            progressed=generation.completed_step is not None, world_size=self._world_size,
            failed=[*(others or []), fault],
            restarts_left=self.settings.max_restarts - self._restarts_used)

    @staticmethod
    def _failed_by_themselves(generation: api.GenerationHandle, fault: process.ProcessFault
                              ) -> list[api.WorkerView]:
        """Workers that exited with an error without the agent ending them (the fault's rank
        always counts, even when the agent ended it: a hung rank)."""
        return [w for w in generation.workers.values()
                if w.returncode not in (None, 0) and (not w.stopping or w.rank == fault.rank)]

    def _errors(self, generation: api.GenerationHandle, fault: process.ProcessFault) -> str:
        """Every failed rank's error, the root cause (earliest failure) first."""
        failed = self._failed_by_themselves(generation, fault)
        failed.sort(key=lambda w: (w.rank != fault.rank, w.exited_at or 0.0))
        parts = []
        for worker in failed:
            code = process.describe_returncode(worker.returncode or 0)
            title = "root cause" if worker.rank == fault.rank else "also failed"
            excerpt = worker.excerpt().strip() or "(no error output)"
            indented = "\n".join("    " + line for line in excerpt.splitlines())
            parts.append(f"[{title}] rank {worker.rank}: {code}\n{indented}")
        return "\n".join(parts)

    async def _measure_recovery(self, generation: api.GenerationHandle, index: int) -> None:
        fault = self._faults[index].fault
        stepping_at = await generation.all_stepping
        origin = fault.occurred_at if fault.occurred_at is not None else fault.detected_at
        restore = generation.restore
        recovery = events.RecoveryCompleted(
            job=self._job, generation=generation.number, fault_rank=fault.rank,
            strategy=str(policy.Strategy.EXIT), detect_seconds=fault.detect_seconds,
            recover_seconds=max(0.0, stepping_at - origin),
            steps_lost=max(0, self._resume_step - restore.step),
            restore_source=str(restore.source), restore_step=restore.step)
        self._record(recovery)
        self._faults[index] = dataclasses.replace(self._faults[index], recovery=recovery)
        self._publish("running", generation)

    def _note_progress(self, generation: api.GenerationHandle) -> None:
        if generation.completed_step is not None:
            self._resume_step = max(self._resume_step, generation.completed_step + 1)

    def _record(self, event: events.Event) -> None:
        self._recorder.record(event)

    def _publish(self, state: str, generation: api.GenerationHandle) -> None:
        self._recorder.publish(f"job-status-{self._job}", {
            "job": self._job, "state": state, "generation": generation.number,
            "restarts_used": self._restarts_used,
            "restarts_left": self.settings.max_restarts - self._restarts_used,
        })

    async def _finish(self, outcome: events.JobOutcome, reason: str, exit_code: int,
                      generations: int, started: float, *, errors: str = "") -> JobResult:
        wall = self._clock.monotonic() - started
        self._record(events.JobFinished(
            job=self._job, outcome=outcome, reason=reason, generations=generations,
            restarts_used=self._restarts_used, exit_code=exit_code, wall_seconds=wall))
        self._recorder.publish(f"job-status-{self._job}", {
            "job": self._job, "state": str(outcome), "reason": reason,
            "restarts_used": self._restarts_used, "exit_code": exit_code})
        return JobResult(outcome=outcome, reason=reason, exit_code=exit_code,
                         faults=tuple(self._faults), generations=generations,
                         restarts_used=self._restarts_used, wall_seconds=wall,
                         resume_step=self._resume_step, errors=errors)
