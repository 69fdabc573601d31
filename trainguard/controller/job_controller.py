"""Runs one job through its generations: start, watch, decide, recover, until it ends.

Every fault, decision and recovery is recorded (and so survives this process); the job's current
state is published as the document ``job-status-<job>`` for ``trainguard status``, and its
record (restarts spent, a recovery under way) goes to the controller's store for a successor.

Why one module past 500 lines: the decision loop, its counters (restarts, retries, repeats,
isolated devices) and the three ways a fault comes in (a generation's outcome, a device fault
reported from outside, a successor taking the job over) change together: each reads and
spends the same counters, and splitting them would pass that state between modules. What
could stand alone already does: the policy (:mod:`.policy`), the cluster view
(:mod:`.cluster_view`), the record (:mod:`.job_record`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from typing import Any

from trainguard import clock as clocks
from trainguard.controller import api, cluster_view, job_record, policy
from trainguard.faults import process
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level
from trainguard.job import events
from trainguard.store import recorder

__all__ = ["ISOLATING", "FaultRecord", "JobController", "JobResult"]

logger = logging.getLogger(__name__)


ISOLATING = frozenset({Level.SEPARATE_NPU, Level.MANUALLY_SEPARATE_NPU})
"""Device levels that take a device out of use for the rest of the job: no restart, at any
level, places a rank on it again (its ranks go to spare devices)."""
ACTING = ISOLATING | {Level.RESTART_BUSINESS, Level.RESTART_NPU}
"""Device levels reported from outside that end the generation as the fault of the rank on the
device: the rank restarts (in place for RestartBusiness), or moves off an isolated device.
Lower levels (and FreeRestartNPU, PreSeparateNPU: acted on when the device is free) are
recorded only."""


def _failure_signature(fault: process.ProcessFault) -> tuple[object, ...]:
    """What makes two failures the same: rank, kind, exit status and the error's last line,
    its numbers blanked (ports, pids and addresses change from start to start). Values that
    the job's record carries to a controller that takes over (the kind, a string enum, equals
    its value read back)."""
    lines = fault.error_excerpt.strip().splitlines()
    error = re.sub(r"\d+", "N", lines[-1]) if lines else fault.detail
    return (fault.rank, fault.kind, fault.returncode, error)


@dataclasses.dataclass(frozen=True)
class FaultRecord:
    fault: process.ProcessFault
    generation: int
    decision: policy.Decision
    recovery: events.RecoveryCompleted | None = None


@dataclasses.dataclass(frozen=True)
class _Recovery:
    """A recovery under way: the fault it answers (index in the job's faults), how, since when."""

    index: int
    strategy: policy.Strategy
    decided_at: float


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
        device_faults: device_health.FaultEngine | None = None,
        journal: job_record.JobJournal | None = None,
        node: str = "",
    ) -> None:
        """``journal``: where the job's record goes, for a controller that takes it over;
        ``node``: the host's name on one host, where the workers do not name theirs."""
        self.settings = settings
        self.device_faults = device_faults or device_health.FaultEngine()
        """Grades device codes: swapped for one with new configuration at run time."""
        self._graded: dict[tuple[int, int], device_health.DeviceHealth] = {}
        self._isolated: set[str] = set()
        """Devices graded at an isolating level: no rank is placed on them again."""
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
        self._retries_used = 0  # unconditional retries: failures with no hardware cause
        self._repeated: tuple[tuple[object, ...] | None, int] = (None, 0)
        """The last failure that came before any step completed, and how often in a row."""
        self._journal = journal
        self._generation: api.GenerationHandle | None = None
        self._reported: dict[str, tuple[device_health.DeviceHealth, str]] = {}
        """Devices reported isolated from outside, not yet acted on: health, code."""
        self._reported_ready = asyncio.Event()
        self._node = node

    def request_stop(self, reason: str, *, exit_code: int) -> None:
        """Stop the job gracefully (dying checkpoint), e.g. on SIGINT or SIGTERM."""
        if not self._stop.is_set():
            self._stop_reason, self._stop_exit_code = reason, exit_code
            self._stop.set()

    def device_ranks(self) -> dict[str, int]:
        """Each device the current generation uses, by its name in the fault engine -> its
        rank (none before the first generation)."""
        generation = self._generation
        if generation is None:
            return {}
        return {self._device_name(w): rank for rank, w in generation.workers.items()}

    def _device_name(self, worker: api.WorkerView) -> str:
        """The name a worker's device has in the fault engine: its host's, then its own (a
        device of a host that names none: its own)."""
        host = worker.host or self._node
        return f"{host}/device-{worker.device}" if host else f"device-{worker.device}"

    async def device_fault(self, event: DeviceFaultEvent, *, reported_by: str
                           ) -> device_health.DeviceHealth:
        """A device's fault reported from outside the job's processes (a public fault, a
        host's device detector), graded (at the level its sender's configuration gives, if
        ``event.level``) and recorded; its device's health. A fault that leaves the device at
        an :data:`ACTING` level ends the generation as the fault of the rank on it; a recovery
        never does."""
        return self.device_graded(event, self.device_faults.report(event),
                                  reported_by=reported_by)

    def device_graded(self, event: DeviceFaultEvent, health: device_health.DeviceHealth, *,
                      reported_by: str) -> device_health.DeviceHealth:
        """As :meth:`device_fault`, for an event graded already (by the controller, before
        its fault centre let it through to the job)."""
        on_it = self._act(health, event.code, act=event.assertion is not Assertion.RECOVER)
        generation = self._generation
        self._record(events.DeviceFaultReported(
            job=self._job, generation=generation.number if generation is not None else -1,
            device=event.device, code=event.code, assertion=str(event.assertion),
            level=str(health.level), reported_by=reported_by,
            rank=on_it[0] if on_it else None,
            moves=health.level in ISOLATING and bool(on_it)))
        return health

    def device_level_changed(self, health: device_health.DeviceHealth) -> None:
        """A device's level changed with time alone (a fault outlasting its FaultDuration
        timeout, a release window passing), recorded; a rise to an :data:`ACTING` level acts
        as a reported fault does."""
        code = next((reason.fault_code for reason in health.added), "")
        self._act(health, code, act=health.level.severity > health.previous.severity)
        self._record(events.DeviceLevelChanged(
            job=self._job, device=health.device, before=str(health.previous),
            level=str(health.level), reset_policy=str(health.reset_policy),
            added=[reason.to_data() for reason in health.added],
            removed=[reason.to_data() for reason in health.removed]))

    def _act(self, health: device_health.DeviceHealth, code: str, *, act: bool) -> list[int]:
        """The ranks on the device; a rank on it is handed over as faulty when ``act`` and the
        level calls for it."""
        generation = self._generation
        on_it = [] if generation is None else [
            w.rank for w in generation.workers.values() if self._device_name(w) == health.device]
        if health.level in ISOLATING:
            self._isolated.add(health.device)
        if act and on_it and health.level in ACTING:
            self._reported[health.device] = (health, code)
            self._reported_ready.set()
        return on_it

    def _reported_fault(self, generation: api.GenerationHandle) -> process.ProcessFault | None:
        """A rank on a device reported isolated from outside, as its fault (graded already)."""
        self._reported_ready.clear()
        while self._reported:
            device, (health, code) = self._reported.popitem()
            for w in generation.workers.values():
                if self._device_name(w) == device:
                    self._graded[(generation.number, w.rank)] = health
                    return process.ProcessFault(
                        rank=w.rank, pid=0, kind=process.ProcessFaultKind.DEVICE_REPORTED,
                        detected_at=self._clock.monotonic(), alive=w.alive, code=code,
                        detail=f"{device} is {health.level}", device=device, level=health.level)
        return None

    async def run(self, *, resume: job_record.JobRecord | None = None,
                  adopted: api.GenerationHandle | None = None,
                  restart_reason: str | None = None) -> JobResult:
        """``resume``: the record of the job taken over from another controller; ``adopted``:
        the generation its hosts train on, which this controller goes on with (None: it
        starts the generation after the record's, restoring from memory, without spending a
        restart: the decision that would have is the predecessor's); ``restart_reason``: why
        it is not adopted, where the caller knows better than the record."""
        started = self._clock.monotonic()
        if self._stop.is_set():
            return await self._finish(events.JobOutcome.STOPPED, self._stop_reason,
                                      self._stop_exit_code, 0, started)
        if resume is not None:
            self._restarts_used, self._retries_used = resume.restarts_used, resume.retries_used
            self._isolated.update(resume.isolated)
            self._resume_step = resume.resume_step
            self._repeated = (resume.repeated, resume.repeats)
        if adopted is not None:
            generation = self._generation = adopted
            self._record(events.ControllerTookOver(
                job=self._job, generation=generation.number, adopted=True,
                reason="every host trains on in it"))
            self._note(generation.number)
        else:
            if resume is not None:
                await self._agent.stop_workers()
            generation = await self._agent.start_generation(
                resume.generation + 1 if resume is not None else 0,
                restart_count=self._restarts_used)
            if resume is not None:
                self._record(events.ControllerTookOver(
                    job=self._job, generation=generation.number, adopted=False,
                    reason=restart_reason or ("a recovery was under way" if resume.recovering
                                              else "the hosts were not all in one generation")))
            self._started(generation)
        number = generation.number
        recovering: _Recovery | None = None
        while True:
            outcome = await self._watch(generation, recovering)
            self._note_progress(generation)
            if outcome is None or outcome.kind is process.OutcomeKind.STOP_REQUESTED:
                current = await self._agent.describe()
                await self._agent.stop_at(cluster_view.stop_step(
                    w.begun_step for w in current.workers.values()))
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
            failed_strategy = None
            if (recovering is not None and recovering.strategy in policy.IN_PROCESS
                    and self._faults[recovering.index].recovery is None):
                # A fault, or the deadline, before every rank stepped: that strategy failed.
                failed_strategy = recovering.strategy
                reason = (f"a new fault before every rank stepped: {outcome.fault.describe()}"
                          if outcome.fault else outcome.detail)
                self._record(events.RecoveryFailed(
                    job=self._job, generation=generation.number,
                    fault_rank=self._faults[recovering.index].fault.rank,
                    strategy=str(recovering.strategy), reason=reason,
                    seconds=self._clock.monotonic() - recovering.decided_at))
            if outcome.fault is not None:
                fault, new = outcome.fault, True
            else:  # the deadline passed: the same fault goes one strategy further down
                assert recovering is not None
                fault, new = self._faults[recovering.index].fault, False
            result = await self._handle_fault(generation, fault, new=new, after=failed_strategy,
                                              number=number + 1)
            if isinstance(result, str):
                await self._agent.flush_checkpoints()
                reason = self._faults[-1].decision.reason
                return await self._finish(events.JobOutcome.FAILED, reason, 1, number + 1,
                                          started, errors=result)
            generation, recovering = result
            number = generation.number

    async def _watch(self, generation: api.GenerationHandle, recovering: _Recovery | None
                     ) -> process.GenerationOutcome | None:
        """The generation's outcome (None if a stop was requested first); when an in-process
        recovery misses its deadline, a fault outcome without a fault, saying so."""
        stop = asyncio.create_task(self._stop.wait())
        reported = asyncio.create_task(self._reported_ready.wait())
        watcher = None
        waiting: list[asyncio.Future[Any]] = [generation.outcome, stop, reported]
        if recovering is not None:
            watcher = asyncio.create_task(self._measure_recovery(generation, recovering))
            if recovering.strategy in policy.IN_PROCESS:
                waiting.append(watcher)
        try:
            while True:
                timeout = None
                if recovering is not None and watcher in waiting:
                    timeout = max(0.0, recovering.decided_at + self.settings.recover_timeout
                                  - self._clock.monotonic())
                done, _ = await asyncio.wait(waiting, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if self._stop.is_set():
                    return None
                if generation.outcome.done():
                    return generation.outcome.result()
                if reported in done:
                    if (fault := self._reported_fault(generation)) is not None:
                        return process.GenerationOutcome(process.OutcomeKind.FAULT, fault=fault)
                    waiting[waiting.index(reported)] = reported = asyncio.create_task(
                        self._reported_ready.wait())
                    continue
                if watcher is not None and watcher in done:
                    waiting.remove(watcher)  # recovered: watch the generation as any other
                    continue
                if not done:  # the deadline passed before every rank stepped
                    return process.GenerationOutcome(
                        process.OutcomeKind.FAULT, detail="not every rank stepping within "
                        f"{self.settings.recover_timeout:g} s")
        finally:
            for task in (stop, reported, watcher):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    async def _handle_fault(self, generation: api.GenerationHandle, fault: process.ProcessFault,
                            *, new: bool, after: policy.Strategy | None, number: int
                            ) -> tuple[api.GenerationHandle, _Recovery] | str:
        """Decide and carry out the recovery of a ``new`` fault (or of the last one again,
        after ``after`` failed), falling down the chain when a strategy cannot be carried out;
        returns the next generation, or the workers' errors when the job fails."""
        first, spent = new, not new
        failed_because = ""
        if new:
            if policy.may_be_crash_loop(self.settings, self._context(generation, fault)):
                await self._agent.settle(timeout=self.settings.crash_loop_settle)
            current = await self._agent.describe()
            await self._agent.complete_snapshots(
                failed_rank=fault.rank,
                step=cluster_view.newest_snapshot(w.snapshot_step
                                                  for w in current.workers.values()),
                timeout=self.settings.snapshot_grace)
            fault = dataclasses.replace(fault,
                                        error_excerpt=generation.workers[fault.rank].excerpt())
            self._record(events.FaultDetected.of(job=self._job, generation=generation.number,
                                                 fault=fault))
            self._count_repeats(generation, fault)
        fault = self._grade(generation, fault)
        others = [self._grade(generation, other) for other in self._others(generation, fault)]
        while True:
            context = self._context(generation, fault, others=others, spent=spent)
            decision = policy.decide(self.settings, context, after=after,
                                     failed_because=failed_because)
            decided_at = self._clock.monotonic()
            if not spent and decision.strategy is not policy.Strategy.FAIL:
                self._restarts_used += 1
                self._retries_used += not fault.hardware_cause
                spent = True
            if first:
                self._faults.append(FaultRecord(fault, generation.number, decision))
                first = False
            else:
                index = len(self._faults) - 1
                self._faults[index] = dataclasses.replace(self._faults[index], decision=decision)
            self._record(events.DecisionMade(
                job=self._job, generation=generation.number, strategy=str(decision.strategy),
                reason=decision.reason,
                restarts_left=self.settings.max_restarts - self._restarts_used))
            if self._journal is not None:
                self._note(generation.number, recovering=True)
                await self._journal.settle()
            strategy = decision.strategy
            index = len(self._faults) - 1
            failed = sorted({f.rank for f in context.failed})
            if strategy is policy.Strategy.FAIL:
                await self._agent.stop_workers()
                return self._errors(generation, fault)
            if strategy in policy.IN_PROCESS:
                replace = () if strategy is policy.Strategy.RETRY else failed
                try:
                    formed = await self._agent.recover(
                        number, restart_count=self._restarts_used, replace=replace,
                        to_spares=strategy is policy.Strategy.RECOVER)
                except process.RecoveryError as error:
                    failed_because = self._recovery_failed(generation, fault, strategy, error,
                                                           decided_at)
                    after = strategy
                    number += 1  # some hosts may have formed it: the next try is another
                    continue
            elif strategy is policy.Strategy.DUMP:
                step = await self._agent.dump(failed=failed)
                logger.info("dying checkpoint: %s", f"step {step} saved to disk"
                            if step is not None else "nothing newer to save")
                after = strategy
                continue
            else:
                await self._agent.stop_workers()
                try:
                    formed = await self._agent.start_generation(
                        number, restart_count=self._restarts_used, move=context.isolated)
                except process.RecoveryError as error:  # a host lost, and none to replace it
                    failed_because = self._recovery_failed(generation, fault, strategy, error,
                                                           decided_at)
                    after = strategy
                    number += 1
                    continue
            # Across hosts the failed generation's progress is known as its hosts report it:
            # their answers to the orders above carried their newest.
            self._note_progress(generation)
            self._started(formed)
            return formed, _Recovery(index, strategy, decided_at)

    def _recovery_failed(self, generation: api.GenerationHandle, fault: process.ProcessFault,
                         strategy: policy.Strategy, error: process.RecoveryError,
                         decided_at: float) -> str:
        """Record that ``strategy`` could not be carried out; returns why."""
        self._record(events.RecoveryFailed(
            job=self._job, generation=generation.number, fault_rank=fault.rank,
            strategy=str(strategy), reason=str(error),
            seconds=self._clock.monotonic() - decided_at))
        return str(error)

    def _started(self, generation: api.GenerationHandle) -> None:
        self._generation = generation
        self._record(events.GenerationStarted(
            job=self._job, generation=generation.number, world_size=self._world_size,
            master_port=generation.master_port, restart_count=self._restarts_used,
            restore_source=generation.restore.label,
            restore_step=generation.restore.step, plan_seconds=generation.plan_seconds,
            kept_processes=generation.kept))
        self._publish("running" if generation.number == 0 else "recovering", generation)
        self._note(generation.number)

    def _note(self, generation: int, *, recovering: bool = False) -> None:
        """The job's record, for a controller that takes it over."""
        if self._journal is not None:
            self._journal.note(job_record.JobRecord(
                job=self._job, generation=generation, restarts_used=self._restarts_used,
                retries_used=self._retries_used, isolated=tuple(sorted(self._isolated)),
                resume_step=self._resume_step, repeated=self._repeated[0],
                repeats=self._repeated[1], recovering=recovering))

    def _context(self, generation: api.GenerationHandle, fault: process.ProcessFault, *,
                 others: list[process.ProcessFault] | None = None,
                 spent: bool = False) -> policy.FaultContext:
        """What the policy looks at; ``others``: the other ranks that failed by themselves;
        ``spent``: this fault's retry is already counted."""
        workers = generation.workers.values()
        return policy.FaultContext(
            fault=fault, age=fault.detected_at - generation.started_at,
            progressed=generation.completed_step is not None, world_size=self._world_size,
            failed=[*(others or []), fault],
            restarts_left=self.settings.max_restarts - self._restarts_used + spent,
            retries_left=None if self.settings.fault_retry_times is None else (
                self.settings.fault_retry_times - self._retries_used
                + (spent and not fault.hardware_cause)),
            repeats=self._repeated[1],
            in_process=all(w.in_process for w in workers),
            alive=[w.rank for w in workers if w.alive],
            spares_left=self._agent.spares_left, layout=self._agent.layout,
            replicas_differ=self._agent.trusted_layout is None,
            isolated=[w.rank for w in workers if self._device_name(w) in self._isolated])

    def _count_repeats(self, generation: api.GenerationHandle,
                       fault: process.ProcessFault) -> None:
        """A failure before any step completed counts one more when it is the last one again.
        Without a step begun either (a script that reports no steps), only a failure within the
        crash-loop window of the start counts: a plain script may have trained for hours."""
        early = fault.detected_at - generation.started_at <= self.settings.crash_loop_window
        if generation.completed_step is not None or (fault.last_step is None and not early):
            self._repeated = (None, 0)
            return
        last, count = self._repeated
        same = _failure_signature(fault)
        self._repeated = (same, count + 1 if same == last else 1)

    def _grade(self, generation: api.GenerationHandle, fault: process.ProcessFault
               ) -> process.ProcessFault:
        """A fault with a device code gets its device's level; the code enters the device's
        history once, however often the fault is looked at."""
        if not fault.code:
            return fault
        key = (generation.number, fault.rank)
        health = self._graded.get(key)
        if health is None:
            device = self._device_name(generation.workers[fault.rank])
            health = self.device_faults.report(
                DeviceFaultEvent(device, fault.code, Assertion.ONCE, self._clock.wall()))
            self._graded[key] = health
            if health.level in ISOLATING:
                self._isolated.add(device)
            self._record(events.DeviceFaultGraded(
                job=self._job, generation=generation.number, rank=fault.rank, device=device,
                code=fault.code, level=str(health.level), reset_policy=str(health.reset_policy),
                fault_type=str(health.fault_type or ""),
                upgrade_reasons=[reason.to_data() for reason in health.added]))
        return dataclasses.replace(fault, device=health.device, level=health.level)

    def _others(self, generation: api.GenerationHandle, fault: process.ProcessFault
                ) -> list[process.ProcessFault]:
        """The other ranks that failed by themselves, as faults."""
        return [
            process.ProcessFault(
                rank=w.rank, pid=0, kind=process.ProcessFaultKind.EXITED if not w.alive
                else process.ProcessFaultKind.RAISED,
                detected_at=w.exited_at or fault.detected_at, returncode=w.returncode,
                error_excerpt=w.excerpt(), code=w.left.code if w.left else "", alive=w.alive)
            for w in self._failed_by_themselves(generation, fault) if w.rank != fault.rank
        ]

    @staticmethod
    def _failed_by_themselves(generation: api.GenerationHandle, fault: process.ProcessFault
                              ) -> list[api.WorkerView]:
        """Workers that exited with an error without the agent ending them, or left their
        generation with an error of their own (the fault's rank always counts, even when the
        agent ended it: a hung rank)."""
        def failed(w: api.WorkerView) -> bool:
            if w.rank == fault.rank:
                return True
            if w.left is not None and w.alive:
                return bool(w.left.error) and not process.lost_a_peer(w.left.error)
            return w.returncode not in (None, 0) and not w.stopping
        return [w for w in generation.workers.values() if failed(w)]

    def _errors(self, generation: api.GenerationHandle, fault: process.ProcessFault) -> str:
        """Every failed rank's error, the root cause (earliest failure) first."""
        failed = self._failed_by_themselves(generation, fault)
        failed.sort(key=lambda w: (w.rank != fault.rank, w.exited_at or 0.0))
        parts = []
        for worker in failed:
            code = process.describe_returncode(worker.returncode or 0)
            if worker.rank == fault.rank and fault.kind is process.ProcessFaultKind.HOST_LOST:
                code = f"lost with its host ({fault.detail})"
            title = "root cause" if worker.rank == fault.rank else "also failed"
            excerpt = worker.excerpt().strip() or "(no error output)"
            indented = "\n".join("    " + line for line in excerpt.splitlines())
            parts.append(f"[{title}] rank {worker.rank}: {code}\n{indented}")
        return "\n".join(parts)

    async def _measure_recovery(self, generation: api.GenerationHandle,
                                recovering: _Recovery) -> None:
        index = recovering.index
        fault = self._faults[index].fault
        stepping_at = await generation.all_stepping
        origin = fault.occurred_at if fault.occurred_at is not None else fault.detected_at
        restore = generation.restore
        recovery = events.RecoveryCompleted(
            job=self._job, generation=generation.number, fault_rank=fault.rank,
            strategy=str(recovering.strategy), detect_seconds=fault.detect_seconds,
            recover_seconds=max(0.0, stepping_at - origin),
            steps_lost=max(0, self._resume_step - restore.step),
            restore_source=restore.label, restore_step=restore.step)
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
        if self._journal is not None:
            self._journal.note(None)
        return JobResult(outcome=outcome, reason=reason, exit_code=exit_code,
                         faults=tuple(self._faults), generations=generations,
                         restarts_used=self._restarts_used, wall_seconds=wall,
                         resume_step=self._resume_step, errors=errors)
