"""Faults of training processes (SPEC D7): exits, signals and hangs."""

from __future__ import annotations

import dataclasses
import enum
import signal

from trainguard.faults.device import device_health, fault_codes
from trainguard.faults.levels import Level

__all__ = [
    "GenerationOutcome",
    "OutcomeKind",
    "ProcessFault",
    "ProcessFaultKind",
    "RecoveryError",
    "describe_returncode",
    "lost_a_peer",
]


class ProcessFaultKind(enum.StrEnum):
    EXITED = "exited"  # the process exited with a non-zero code (an uncaught exception: 1)
    SIGNALED = "signaled"  # the process was ended by a signal (SIGKILL, SIGSEGV, ...)
    HUNG = "hung"  # the process lives but missed its heartbeat deadline
    RAISED = "raised"  # an exception in the step (uncaught, or caught by the step guard)
    COMMUNICATION = "communication"  # a collective failed while every rank is alive
    HOST_LOST = "host-lost"  # its host's agent is gone (killed, cut off): its ranks with it
    # Its device was reported at an isolating level from outside (a public fault): the process
    # may be healthy, but must move off the device.
    DEVICE_REPORTED = "device-reported"


_PEER_LOSS = (
    "connection closed by peer",  # gloo, the peer's process is gone
    "connection reset by peer",
    "broken pipe",
    "nccl communicator was aborted",
)


def lost_a_peer(error: str) -> bool:
    """Whether a worker's error says a peer went away: a consequence, not a cause."""
    text = error.lower()
    return any(phrase in text for phrase in _PEER_LOSS)


def describe_returncode(returncode: int) -> str:
    """``-9`` -> ``"SIGKILL"``, ``1`` -> ``"exit code 1"`` (subprocess's convention)."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


@dataclasses.dataclass(frozen=True)
class ProcessFault:
    """One rank's fault as the agent saw it.

    Times are monotonic seconds. ``occurred_at`` is known only when the fault was injected (the
    worker reports the moment); otherwise the detection time is the best estimate.
    """

    rank: int
    pid: int
    kind: ProcessFaultKind
    detected_at: float
    returncode: int | None = None
    last_step: int | None = None
    occurred_at: float | None = None
    injected: str | None = None  # the injected fault's kind, when it was injected
    detail: str = ""
    error_excerpt: str = ""
    code: str = ""  # the device fault code, for a device fault
    alive: bool = False  # the process is still there (it left its generation without exiting)
    device: str = ""  # the device it ran on
    level: Level | None = None
    """The device's level when the fault came (its codes, escalated by its history); without
    it, the level of ``code`` alone in the default table."""

    @property
    def device_level(self) -> Level:
        if self.level is not None:
            return self.level
        if not self.code:
            return Level.NORMAL_NPU
        return fault_codes.default_table().level_of(fault_codes.code_key(self.code))

    @property
    def retryable(self) -> bool:
        """Redoing the step may succeed: a link error, or a device error a retry clears on a
        device whose level lets it stay in use (H5)."""
        if self.kind is ProcessFaultKind.COMMUNICATION:
            return True
        return self.retry_code and self.in_place

    @property
    def hardware_cause(self) -> bool:
        """A device reported a code, or the host was lost: not a failure of the script or of
        unknown cause, which unconditional retry (H12) handles."""
        return bool(self.code) or self.kind is ProcessFaultKind.HOST_LOST

    @property
    def retry_code(self) -> bool:
        """Its device code is one a step retry is known to clear."""
        return bool(self.code) and fault_codes.code_key(self.code) in device_health.RETRY_CODES

    @property
    def in_place(self) -> bool:
        """Restarting the process on its device may succeed (H4 recover-in-place)."""
        return device_health.allows_in_place(self.device_level)

    @property
    def detect_seconds(self) -> float | None:
        if self.occurred_at is None:
            return None
        return max(0.0, self.detected_at - self.occurred_at)

    def describe(self) -> str:
        if self.kind is ProcessFaultKind.HUNG:
            what = f"hung ({self.detail})" if self.detail else "hung"
        elif self.kind is ProcessFaultKind.RAISED:
            what = f"raised {self.detail}" if self.detail else "raised an exception"
        elif self.kind is ProcessFaultKind.COMMUNICATION:
            what = f"lost its collective ({self.detail})" if self.detail else "lost its collective"
        elif self.kind is ProcessFaultKind.HOST_LOST:
            what = f"was lost with its host ({self.detail})" if self.detail else "lost its host"
        elif self.kind is ProcessFaultKind.DEVICE_REPORTED:
            what = (f"must {'leave' if not self.in_place else 'restart on'} its device "
                    f"({self.detail}, reported from outside)")
        elif self.returncode is not None:
            what = f"failed with {describe_returncode(self.returncode)}"
        else:
            what = str(self.kind)
        where = f" at step {self.last_step}" if self.last_step is not None else ""
        cause = f" [injected {self.injected}]" if self.injected else ""
        return f"rank {self.rank} (pid {self.pid}) {what}{where}{cause}"


class RecoveryError(RuntimeError):
    """A process-level recovery could not be carried out; the message says what failed."""


class OutcomeKind(enum.StrEnum):
    SUCCEEDED = "succeeded"  # every rank exited with 0
    FAULT = "fault"  # a rank failed or hung
    STOP_REQUESTED = "stop-requested"  # a worker got SIGTERM, or the job was told to stop
    FATAL = "fatal"  # a problem no restart can fix (not enough memory for snapshots)


@dataclasses.dataclass(frozen=True)
class GenerationOutcome:
    kind: OutcomeKind
    fault: ProcessFault | None = None
    detail: str = ""
