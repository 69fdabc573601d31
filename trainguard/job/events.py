"""Typed events: what the controller and agent record in the store and show to users.

Each event serialises to a flat JSON object (:meth:`Event.to_data`); ``KIND`` is its name in the
store. Times inside events are seconds measured on the monotonic clock (durations), or steps.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, ClassVar

from trainguard.faults import process

__all__ = [
    "CheckpointPersisted",
    "CheckpointRejected",
    "DecisionMade",
    "DeviceFaultGraded",
    "DeviceFaultReported",
    "DeviceLevelChanged",
    "Event",
    "FaultConfigLoaded",
    "FaultDetected",
    "FaultInjectionRequested",
    "GenerationStarted",
    "JobFinished",
    "JobOutcome",
    "ProfilingSwitched",
    "RecoveryCompleted",
    "RecoveryFailed",
    "ReplicasDiffer",
    "RunMeasured",
    "SlowNodeDetected",
    "SlowNodeRecovered",
    "SnapshotIntervalChosen",
    "StepProgress",
    "SurvivorsEnded",
    "goodput",
    "known_kinds",
]


class JobOutcome(enum.StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # retry budget exhausted, crash loop, or a fault that is not retried
    STOPPED = "stopped"  # SIGINT/SIGTERM to trainguard: graceful stop with a dying checkpoint


@dataclasses.dataclass(frozen=True)
class Event:
    KIND: ClassVar[str] = ""
    job: str

    def to_data(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        return {key: (str(value) if isinstance(value, enum.Enum) else value)
                for key, value in data.items()}

    def summary(self) -> str:
        """One line for the console and the log."""
        return self.KIND


@dataclasses.dataclass(frozen=True)
class GenerationStarted(Event):
    KIND: ClassVar[str] = "generation-started"
    generation: int
    world_size: int
    master_port: int
    restart_count: int
    restore_source: str  # where the ranks' state comes from: memory, disk or none
    restore_step: int
    plan_seconds: float  # choosing and verifying that state, before any rank started
    kept_processes: int = 0  # ranks whose process carried on from the previous generation

    def summary(self) -> str:
        start = (f"state of step {self.restore_step} from {self.restore_source}"
                 if self.restore_source != "none" else "no saved state")
        kept = f", {self.kept_processes} processes kept" if self.kept_processes else ""
        return (f"generation {self.generation}: {self.world_size} ranks{kept}, rendezvous on "
                f"port {self.master_port}, {start} (chosen in {self.plan_seconds:.2f} s)")


@dataclasses.dataclass(frozen=True)
class FaultDetected(Event):
    KIND: ClassVar[str] = "fault-detected"
    generation: int
    rank: int
    pid: int
    fault_kind: process.ProcessFaultKind
    returncode: int | None
    last_step: int | None
    detect_seconds: float | None
    detected_at: float  # monotonic seconds, the clock workers' marks use on this host
    injected: str | None
    detail: str
    error_excerpt: str
    description: str
    code: str

    @classmethod
    def of(cls, *, job: str, generation: int, fault: process.ProcessFault) -> FaultDetected:
        return cls(
            job=job,
            generation=generation,
            rank=fault.rank,
            pid=fault.pid,
            fault_kind=fault.kind,
            returncode=fault.returncode,
            last_step=fault.last_step,
            detect_seconds=fault.detect_seconds,
            detected_at=fault.detected_at,
            injected=fault.injected,
            detail=fault.detail,
            error_excerpt=fault.error_excerpt,
            description=fault.describe(),
            code=fault.code,
        )

    def summary(self) -> str:
        took = f"; detected {self.detect_seconds:.3f} s after it occurred" if (
            self.detect_seconds is not None) else ""
        return f"fault: {self.description}{took}"


@dataclasses.dataclass(frozen=True)
class DecisionMade(Event):
    KIND: ClassVar[str] = "decision"
    generation: int
    strategy: str  # "exit" = job-level restart (H2); "fail" = stop the job
    reason: str
    restarts_left: int

    def summary(self) -> str:
        return f"decision: {self.strategy} ({self.reason}; {self.restarts_left} restarts left)"


@dataclasses.dataclass(frozen=True)
class RecoveryCompleted(Event):
    KIND: ClassVar[str] = "recovery-completed"
    generation: int
    fault_rank: int
    strategy: str
    detect_seconds: float | None
    recover_seconds: float  # fault (or its detection when unknown) -> every rank stepping again
    steps_lost: int  # completed steps that had to be redone
    restore_source: str
    restore_step: int

    def summary(self) -> str:
        return (f"recovered: every rank stepping again {self.recover_seconds:.2f} s after the "
                f"fault; state of step {self.restore_step} from {self.restore_source}; "
                f"{self.steps_lost} completed steps lost")


@dataclasses.dataclass(frozen=True)
class RecoveryFailed(Event):
    """An attempt at one strategy failed or missed its deadline; the next one is tried."""

    KIND: ClassVar[str] = "recovery-failed"
    generation: int
    fault_rank: int
    strategy: str
    reason: str
    seconds: float  # from the decision to the failure

    def summary(self) -> str:
        return f"{self.strategy} failed after {self.seconds:.2f} s: {self.reason}"


@dataclasses.dataclass(frozen=True)
class SurvivorsEnded(Event):
    """Ranks told to leave their generation were still in it when their time was up (gloo can
    hold one in a wait that cutting its connections does not end): their processes were ended,
    and the recovery restarts them from their own snapshots instead of the job restarting."""

    KIND: ClassVar[str] = "survivors-ended"
    generation: int  # the one they did not leave
    ranks: list[int]
    waited_seconds: float

    def summary(self) -> str:
        return (f"ranks {self.ranks} did not leave generation {self.generation} within "
                f"{self.waited_seconds:.0f} s: ended, to restart from their snapshots")


@dataclasses.dataclass(frozen=True)
class DeviceFaultGraded(Event):
    """A fault's device code was graded: the device's level, from its codes and history."""

    KIND: ClassVar[str] = "device-fault-graded"
    generation: int
    rank: int
    device: str
    code: str
    level: str
    reset_policy: str
    fault_type: str
    upgrade_reasons: list[dict[str, object]]  # UpgradeFaultReason entries added now

    def summary(self) -> str:
        why = ", ".join(f"{reason['upgrade_type']} of {reason['fault_code']}"
                        for reason in self.upgrade_reasons)
        return (f"{self.device}: {self.code} -> {self.level} (policy {self.reset_policy}"
                + (f"; raised by {why})" if why else ")"))


@dataclasses.dataclass(frozen=True)
class DeviceFaultReported(Event):
    """A fault of a device reported from outside the job's processes (a public fault, SPEC
    D8), graded; a level that isolates the device moves the rank on it (``rank``) off it."""

    KIND: ClassVar[str] = "device-fault-reported"
    generation: int
    device: str
    code: str
    assertion: str
    level: str  # the device's level once the report is taken in
    reported_by: str  # e.g. "public fault CCAE/fault-0001"
    rank: int | None  # the job's rank on the device; None: the job does not use it
    moves: bool  # the rank is moved off the device

    def summary(self) -> str:
        where = f"{self.device} (rank {self.rank})" if self.rank is not None else self.device
        then = "; its rank moves off it" if self.moves else "; recorded"
        return (f"{where}: {self.code} {self.assertion} from {self.reported_by} -> "
                f"{self.level}{then}")


@dataclasses.dataclass(frozen=True)
class DeviceFaultNoticed(Event):
    """A host's device detector saw a fault event: the original device plugin's Kubernetes
    event (type Warning, reason Occur, Recovery or Notice, the code's level as the action),
    whose fields as the original names them are in ``notice``."""

    KIND: ClassVar[str] = "device-fault-noticed"
    node: str
    device: str  # its public name, e.g. Ascend910-3
    code: str
    reason: str  # Occur, Recovery or Notice
    level: str  # the code's level alone
    notice: dict[str, object]

    def summary(self) -> str:
        return f"{self.node} {self.device}: {self.code} {self.reason} ({self.level})"


@dataclasses.dataclass(frozen=True)
class DeviceLevelChanged(Event):
    """A device's level changed, or an upgrade reason came or went, with time alone."""

    KIND: ClassVar[str] = "device-level-changed"
    device: str
    before: str
    level: str
    reset_policy: str
    added: list[dict[str, object]]
    removed: list[dict[str, object]]  # UpgradeFaultReason entries removed: the level came down

    def summary(self) -> str:
        why = "; ".join([f"+{r['upgrade_type']} of {r['fault_code']}" for r in self.added]
                        + [f"-{r['upgrade_type']} of {r['fault_code']}" for r in self.removed])
        return (f"{self.device}: {self.before} -> {self.level} (policy {self.reset_policy}"
                + (f"; {why})" if why else ")"))


@dataclasses.dataclass(frozen=True)
class FaultConfigLoaded(Event):
    """The fault configuration files were read (at start, or again after a change)."""

    KIND: ClassVar[str] = "fault-config-loaded"
    directory: str
    reloaded: bool  # a change took effect in the running job
    problems: list[str]  # each entry ignored or defaulted, each file that could not be used

    def summary(self) -> str:
        what = "reloaded" if self.reloaded else "read"
        found = (f"; {len(self.problems)} problems: " + "; ".join(self.problems)
                 if self.problems else "")
        return f"fault configuration {what} from {self.directory}{found}"


@dataclasses.dataclass(frozen=True)
class CheckpointPersisted(Event):
    KIND: ClassVar[str] = "checkpoint-persisted"
    step: int
    path: str
    nbytes: int
    seconds: float

    def summary(self) -> str:
        return f"checkpoint of step {self.step} persisted to {self.path} in {self.seconds:.2f} s"


@dataclasses.dataclass(frozen=True)
class CheckpointRejected(Event):
    KIND: ClassVar[str] = "checkpoint-rejected"
    path: str
    reason: str

    def summary(self) -> str:
        return f"checkpoint skipped: {self.path}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class FaultInjectionRequested(Event):
    KIND: ClassVar[str] = "fault-injection"
    rank: int
    kind: str
    at_step: int | None

    def summary(self) -> str:
        when = f" at step {self.at_step}" if self.at_step is not None else " now"
        return f"injecting {self.kind} into rank {self.rank}{when}"


@dataclasses.dataclass(frozen=True)
class ReplicasDiffer(Event):
    """Ranks that should hold the same state do not (their checksums differ): from now on no
    replica stands in for a lost rank."""

    KIND: ClassVar[str] = "replicas-differ"
    rank: int  # the first rank to say so (every rank found the same)
    detail: str  # which replica groups, at which dp-size

    def summary(self) -> str:
        return (f"rank {self.rank}: the replicas differ ({self.detail}): no replica stands in "
                "for a lost rank from now on")


@dataclasses.dataclass(frozen=True)
class JobFinished(Event):
    KIND: ClassVar[str] = "job-finished"
    outcome: JobOutcome
    reason: str
    generations: int
    restarts_used: int
    exit_code: int
    wall_seconds: float

    def summary(self) -> str:
        return f"job {self.outcome}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class ControllerTookOver(Event):
    """A controller took over a running job from one that went away (controller failover)."""

    KIND: ClassVar[str] = "controller-took-over"
    generation: int
    adopted: bool  # the hosts trained on in that generation; else it was started afresh
    reason: str

    def summary(self) -> str:
        how = "took over" if self.adopted else "restarted"
        return f"this controller {how} generation {self.generation}: {self.reason}"


def goodput(*, steps_completed: int, step_seconds: float | None,
            training_seconds: float | None) -> float | None:
    """Share of the training time that produced the final state: steps kept x step time."""
    if not step_seconds or not training_seconds:
        return None
    return min(1.0, steps_completed * step_seconds / training_seconds)


@dataclasses.dataclass(frozen=True)
class StepProgress(Event):
    """How far the job is, sampled every progress interval: the report's steps per second."""

    KIND: ClassVar[str] = "step-progress"
    generation: int
    step: int  # the step the furthest rank is in
    steps_per_second: float | None  # over rank 0's recent steps, as the console shows it
    at: float  # monotonic seconds, the clock of FaultDetected.detected_at

    def summary(self) -> str:
        rate = f", {self.steps_per_second:.1f} steps/s" if self.steps_per_second else ""
        return f"step {self.step}{rate} (generation {self.generation})"


@dataclasses.dataclass(frozen=True)
class RunMeasured(Event):
    """The end-of-run figures, recorded as the job ends, so that a report can show them."""

    KIND: ClassVar[str] = "run-measured"
    steps_completed: int  # steps whose result the final state holds
    step_seconds: float | None  # median time from one step's start to the next's, rank 0
    snapshot_seconds: float | None  # median time training was blocked per snapshot
    training_seconds: float | None  # first step started -> job ended

    @property
    def goodput(self) -> float | None:
        return goodput(steps_completed=self.steps_completed, step_seconds=self.step_seconds,
                       training_seconds=self.training_seconds)

    def summary(self) -> str:
        share = f", goodput {self.goodput:.1%}" if self.goodput is not None else ""
        return f"{self.steps_completed} steps completed{share}"


@dataclasses.dataclass(frozen=True)
class SnapshotIntervalChosen(Event):
    """How many steps lie between memory snapshots, and why (R4): at the first snapshot, once
    measured, and whenever the interval or the recommendation changes."""

    KIND: ClassVar[str] = "snapshot-interval"
    interval: int  # steps between snapshots from now on
    requested: str  # --snapshot-every: "auto" or a number of steps
    recommended: int | None  # what auto would choose; None before the first measurement
    stall_seconds: float | None  # median time training was blocked per snapshot
    step_seconds: float | None  # median step, its snapshot left out
    share: float  # --snapshot-share
    mtbf_seconds: float | None  # the job's mean time between failures that was assumed
    mtbf_observed: bool  # that was the job's own rate, not the prior
    optimum_steps: int | None  # the Young/Daly optimum
    persist_optimum_seconds: float | None  # the same rule for --persist-interval
    reason: str
    ranks_per_core: float = 1.0  # the host's, at least 1: how many times the stall counts

    def summary(self) -> str:
        return self.reason


@dataclasses.dataclass(frozen=True)
class ProfilingSwitched(Event):
    """The job's lightweight-profiling marks were switched (D10): what the ranks record from
    now on, and where."""

    KIND: ClassVar[str] = "profiling-switched"
    profiling_switch: str  # the original's profilingSwitch JSON
    marks: str  # the marks on, by the original's names, or "off"
    directory: str | None  # the task's folder of records; None: each host's (a controller's)

    def summary(self) -> str:
        where = f" (records under {self.directory})" if self.directory else ""
        return f"profiling: {self.marks}{where}"


@dataclasses.dataclass(frozen=True)
class SlowNodeDetected(Event):
    """Ranks of a host whose steps grew slower than their own baseline (D11), or another set
    of them than said last."""

    KIND: ClassVar[str] = "slow-node-detected"
    node: str
    ranks: list[int]
    degradation: float  # the largest: their newest steps' mean over the baseline, less 1
    degradation_level: str  # the same, as the original writes it ("35.00%")

    def summary(self) -> str:
        return (f"slow node {self.node}: rank(s) {self.ranks} {self.degradation_level} slower "
                "than their baseline")


@dataclasses.dataclass(frozen=True)
class SlowNodeRecovered(Event):
    """No rank of the host is slow any more (D11)."""

    KIND: ClassVar[str] = "slow-node-recovered"
    node: str

    def summary(self) -> str:
        return f"slow node {self.node}: its ranks step at their baseline again"


def known_kinds() -> list[str]:
    """Every event kind the store can hold, sorted: what ``trainguard events --kind`` accepts."""
    found: set[str] = set()
    pending: list[type[Event]] = [Event]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.KIND:
            found.add(cls.KIND)
    return sorted(found)
