"""Messages between a training process (or a control client) and the node agent.

Wire format: ``trainguard/proto/worker.proto``, over the agent's Unix stream socket. Each message
below is a proto message of the same name and fields, sent in an envelope that names the protocol
version and the message (its field ``TYPE``), each envelope preceded by its length;
:mod:`trainguard.proto.worker_codec` converts. Times are ``time.monotonic()`` seconds, which all
processes of one host share (CLOCK_MONOTONIC).

A training process opens the connection with :class:`Hello`; a control client (the ``trainguard
fault`` command, tests) sends requests without one. Requests carry a ``request_id`` and are answered
by a message with the same id. The training side never waits for the agent except on the two
requests it makes outside the training step (:class:`ReserveSlot`, :class:`RestorePlanRequest`).
"""

from __future__ import annotations

import dataclasses
import enum
import signal
from typing import ClassVar

from trainguard.faults.device.device_events import Assertion

__all__ = [
    "COMPLETE_SHARES_WAIT",
    "STARTING_VARIABLE",
    "WORKER_SECRET_VARIABLE",
    "Abort",
    "Activity",
    "ActivityKind",
    "CompleteShares",
    "ControlReply",
    "DeviceFaultRequest",
    "FaultInjected",
    "Finished",
    "Hello",
    "InjectFault",
    "InjectRequest",
    "InjectionKind",
    "LeftGeneration",
    "Message",
    "MessageError",
    "Profiling",
    "ProfilingRequest",
    "RecoverySupported",
    "Rejoin",
    "ReplicasDiffer",
    "RequestFailed",
    "ReserveSlot",
    "RestorePlan",
    "RestorePlanRequest",
    "RestoreSource",
    "SlotGranted",
    "SnapshotCommitted",
    "SnapshotInterval",
    "StepMark",
    "StepPhase",
    "StopAt",
    "StopRequested",
    "WorkerFailing",
    "socket_name",
]

STACKS_SIGNAL = signal.SIGUSR2
"""The agent asks a worker under a session for its threads' stacks with this signal: the worker
writes them to its standard error (Python's faulthandler), which the agent keeps with its
output. Used when a worker does not do what it was told in time."""
WORKER_SECRET_VARIABLE = "TRAINGUARD_WORKER_SECRET"
"""The environment variable that hands a worker process its :attr:`Hello.secret`: the
environment, unlike the command line, is visible only to the same user and root."""
STARTING_VARIABLE = "TRAINGUARD_STARTING_PROCESSES"
"""How many processes the agent started on the host together with the one that reads it: a
process of a recovery in place starts on a host whose other ranks wait for it."""


def socket_name(address: str) -> str:
    """The name to bind or connect to for an agent ``address``: ``@name`` is an abstract Unix
    socket (Linux), written with a leading NUL, which the environment cannot carry."""
    return "\0" + address[1:] if address.startswith("@") else address


class MessageError(ValueError):
    """Bytes that are not a valid message, or a value a message cannot hold; ``field`` names the
    offending field, if one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InjectionKind(enum.StrEnum):
    """Faults that ``trainguard fault inject`` can cause in a worker."""

    CRASH = "crash"  # SIGKILL: the process vanishes, as on a device or host loss
    HANG = "hang"  # SIGSTOP: the process stays but makes no progress
    EXCEPTION = "exception"  # a real Python exception raised in the training step
    MEMORY_ERROR = "memory-error"  # a simulated device memory error (UCE 80E01801) in the step
    LINK_ERROR = "link-error"  # the rank's links drop mid-step: its collectives fail, all live
    DEVICE_ERROR = "device-error"  # a simulated device fault that takes the device out of use


class StepPhase(enum.StrEnum):
    BEGIN = "begin"
    END = "end"


class ActivityKind(enum.StrEnum):
    """Long operations outside a step, during which the hang deadline is the long-operation one."""

    CHECKPOINT = "checkpoint"
    RESTORE = "restore"
    USER = "user"  # work the script declared with Session.busy(), such as an evaluation


class RestoreSource(enum.StrEnum):
    MEMORY = "memory"
    PEER = "peer"  # a healthy data-parallel replica sends it over torch.distributed
    REPLICA = "replica"  # the rank reads a data-parallel replica's snapshot from host memory
    DISK = "disk"
    NONE = "none"


@dataclasses.dataclass(frozen=True)
class Message:
    """Base of all messages; ``TYPE`` is the wire name (the envelope's field that carries it)."""

    TYPE: ClassVar[str] = ""


# --- training process -> agent ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Hello(Message):
    """The first message of a worker's connection. ``secret`` is the one the agent gave this worker
    process (``TRAINGUARD_WORKER_SECRET``): without it a hello naming a rank and a pid read from
    ``ps`` would pass for the worker. It is never shown (repr) or logged."""

    TYPE: ClassVar[str] = "hello"
    rank: int
    local_rank: int
    pid: int
    generation: int
    secret: str = dataclasses.field(default="", repr=False)


@dataclasses.dataclass(frozen=True)
class StepMark(Message):
    """Start or end of a training step; doubles as the heartbeat."""

    TYPE: ClassVar[str] = "step"
    step: int
    phase: StepPhase
    time: float


@dataclasses.dataclass(frozen=True)
class Activity(Message):
    TYPE: ClassVar[str] = "activity"
    kind: ActivityKind
    active: bool
    time: float


@dataclasses.dataclass(frozen=True)
class SnapshotCommitted(Message):
    """A snapshot is complete in shared-memory slot ``slot``; ``step`` is the step to resume at."""

    TYPE: ClassVar[str] = "snapshot"
    step: int
    slot: int
    seq: int
    nbytes: int
    copy_seconds: float
    time: float


@dataclasses.dataclass(frozen=True)
class FaultInjected(Message):
    """Sent just before an injected fault takes effect, so the agent knows when it happened."""

    TYPE: ClassVar[str] = "fault_injected"
    kind: InjectionKind
    step: int
    time: float


@dataclasses.dataclass(frozen=True)
class WorkerFailing(Message):
    """An uncaught exception is ending the worker; sent before the (slow) interpreter teardown."""

    TYPE: ClassVar[str] = "failing"
    error: str
    time: float
    code: str = ""  # the device fault code when the error is a device fault


@dataclasses.dataclass(frozen=True)
class RecoverySupported(Message):
    """The worker runs its training under ``Session.run``: it can leave a generation and join
    the next without exiting (the original's ReportRecoverStrategy)."""

    TYPE: ClassVar[str] = "recovery_supported"
    strategies: list[str]


@dataclasses.dataclass(frozen=True)
class LeftGeneration(Message):
    """The worker left its generation: its communicator is cut and it waits for :class:`Rejoin`.

    ``error`` (with its traceback) is empty when it left because the agent said so
    (:class:`Abort`); ``code`` is the device fault code when the error was a device fault.
    """

    TYPE: ClassVar[str] = "left"
    generation: int
    step: int | None
    error: str
    code: str
    time: float


@dataclasses.dataclass(frozen=True)
class Finished(Message):
    """The worker's session closed: its work is done and the process is about to exit."""

    TYPE: ClassVar[str] = "finished"
    time: float


@dataclasses.dataclass(frozen=True)
class StopRequested(Message):
    """The worker got SIGTERM; the agent coordinates a stop of every rank at one step."""

    TYPE: ClassVar[str] = "stop_requested"
    time: float


@dataclasses.dataclass(frozen=True)
class ReserveSlot(Message):
    """Ask for shared-memory slot ``slot`` (0 or 1) of at least ``nbytes``."""

    TYPE: ClassVar[str] = "reserve_slot"
    request_id: int
    slot: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class RestorePlanRequest(Message):
    TYPE: ClassVar[str] = "restore_plan_request"
    request_id: int


@dataclasses.dataclass(frozen=True)
class ReplicasDiffer(Message):
    """The ranks' comparison found replicas that should hold the same state holding different
    state (a script that is not data parallel, a wrong dp-size): no replica's snapshot may
    stand in for a rank's from now on. ``detail`` names the groups, for the agent's log."""

    TYPE: ClassVar[str] = "replicas_differ"
    detail: str
    time: float


# --- agent -> training process ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SlotGranted(Message):
    """``path`` opens the slot's memory (the agent owns it); ``capacity`` in bytes."""

    TYPE: ClassVar[str] = "slot_granted"
    request_id: int
    slot: int
    path: str
    capacity: int


@dataclasses.dataclass(frozen=True)
class RestorePlan(Message):
    """Where this rank's state comes from; every rank of a generation gets the same ``step``.

    ``slot_paths`` lists the rank's two memory slots (their memory may not exist yet: empty
    string); ``next_slot`` is where the next snapshot goes, so the restored one stays intact.
    """

    TYPE: ClassVar[str] = "restore_plan"
    request_id: int
    source: RestoreSource
    step: int
    path: str
    next_slot: int
    slot_paths: list[str]
    note: str
    peer: int | None = None  # PEER: the rank that sends the state; REPLICA: whose snapshot
    send_to: list[int] = dataclasses.field(default_factory=list)  # ranks this one sends to
    holder_paths: list[str] = dataclasses.field(default_factory=list)
    """By rank: its snapshot of ``step`` (or the replica's standing in for it), where the
    shares a snapshot leaves to its holders are read; empty string: none on this host."""


@dataclasses.dataclass(frozen=True)
class RequestFailed(Message):
    TYPE: ClassVar[str] = "request_failed"
    request_id: int
    error: str


@dataclasses.dataclass(frozen=True)
class InjectFault(Message):
    """Cause ``kind`` at the start of step ``at_step`` (or the next step when None)."""

    TYPE: ClassVar[str] = "inject"
    kind: InjectionKind
    at_step: int | None


@dataclasses.dataclass(frozen=True)
class StopAt(Message):
    """Finish step ``step``, save the state (dying checkpoint) and exit."""

    TYPE: ClassVar[str] = "stop_at"
    step: int


@dataclasses.dataclass(frozen=True)
class Abort(Message):
    """Leave generation ``generation`` now: cut the communicator, roll back, wait for orders."""

    TYPE: ClassVar[str] = "abort"
    generation: int


@dataclasses.dataclass(frozen=True)
class Rejoin(Message):
    """Join generation ``generation``: a new process group at ``master_addr:master_port`` (the
    host serving the store may change from one generation to the next across hosts)."""

    TYPE: ClassVar[str] = "rejoin"
    generation: int
    master_addr: str
    master_port: int
    restart_count: int


@dataclasses.dataclass(frozen=True)
class SnapshotInterval(Message):
    """Snapshot every ``every`` steps, counted from step ``from_step``: ``checkpoint(step=s)``
    saves when ``s >= from_step`` and ``(s - from_step) % every == 0``, and before ``from_step``
    keeps the rule it had. The agent names a step no rank has reached, so that every rank
    snapshots the same steps (a step is complete only once every rank has it)."""

    TYPE: ClassVar[str] = "snapshot_interval"
    every: int
    from_step: int

    def __post_init__(self) -> None:
        if self.every < 1:
            raise MessageError(f"{self.TYPE}: field 'every' is {self.every}, expected >= 1",
                               field="every")


@dataclasses.dataclass(frozen=True)
class Profiling(Message):
    """Record the lightweight-profiling marks ``switch`` has on from now on (the original's
    profilingSwitch JSON, :class:`trainguard.job.profiling_switch.ProfilingSwitch`)."""

    TYPE: ClassVar[str] = "profiling"
    switch: str


@dataclasses.dataclass(frozen=True)
class CompleteShares(Message):
    """Rank ``holder`` is lost, and with it the run of replicated state it alone held (its
    share) of steps it may not have snapshotted: write your newest snapshot again holding that
    run too, from your live state, if it still is that snapshot's (train/agent_memory.py).
    Answered with a ``ControlReply`` of the same ``request_id``: ``ok`` when written, else
    why not."""

    TYPE: ClassVar[str] = "complete_shares"
    request_id: int
    holder: int


COMPLETE_SHARES_WAIT = 0.5
"""Seconds a rank waits, on a ``CompleteShares``, for the snapshot that follows an optimizer
step or for one in progress; past them it declines (its training thread may be stuck in a
collective inside a snapshot: the replicas' comparison). The agent waits at least twice as
long for the answer, so that no completion lands in a slot after the restore was planned."""


# --- control client <-> agent ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class InjectRequest(Message):
    TYPE: ClassVar[str] = "inject_request"
    request_id: int
    rank: int
    kind: InjectionKind
    at_step: int | None


@dataclasses.dataclass(frozen=True)
class DeviceFaultRequest(Message):
    """A fault on one of the host's simulated devices, which reaches the job through the device
    detector as a driver's event would (``trainguard fault inject --device``)."""

    TYPE: ClassVar[str] = "device_fault_request"
    request_id: int
    device: int
    code: str
    assertion: Assertion  # the device backend checks the device and the code


@dataclasses.dataclass(frozen=True)
class ProfilingRequest(Message):
    """Switch the job's lightweight profiling: a preset's name or the original's JSON; empty:
    only say what it is (``trainguard profiling``)."""

    TYPE: ClassVar[str] = "profiling_request"
    request_id: int
    switch: str


@dataclasses.dataclass(frozen=True)
class ControlReply(Message):
    TYPE: ClassVar[str] = "control_reply"
    request_id: int
    ok: bool
    detail: str
