"""What to do about a process fault (SPEC D7, H2, H12, I3): a pure function of what was seen.

Unknown process failures are retried unconditionally while the job's retry budget
(``--max-restarts``, the original's ``fault-retry-times``) lasts, with a job-level restart; every
recovery spends one retry. When every rank fails within a few seconds of a (re)start, before any
step completed, the job has a problem no restart will fix (a crash loop): it fails at once, with
the workers' errors, instead of burning the budget. A rank killed with SIGKILL or found hung is
never taken for a crash loop: those come from outside the script; nor is a rank whose error says
that a peer went away: its failure was caused by another's.
"""

from __future__ import annotations

import dataclasses
import enum
import signal
from collections.abc import Sequence

from trainguard.faults import process

__all__ = ["Decision", "FaultContext", "RecoverySettings", "Strategy", "decide",
           "may_be_crash_loop"]


class Strategy(enum.StrEnum):
    EXIT = "exit"  # job-level restart: every worker stops and all start again (the original's name)
    FAIL = "fail"  # nothing more to try: the job ends


@dataclasses.dataclass(frozen=True)
class RecoverySettings:
    max_restarts: int = 0
    """Retry budget (torchrun's --max-restarts; the original's fault-retry-times), >= 0."""
    crash_loop_window: float = 10.0
    """Seconds after a (re)start within which all ranks failing, before any step completed, is a
    crash loop (>= 0). Covers imports and model setup on a loaded host."""
    crash_loop_settle: float = 3.0
    """Seconds to wait, after an early failure, for the other ranks to fail too (>= 0)."""
    snapshot_grace: float = 2.0
    """Seconds healthy ranks get to finish the snapshot a failed rank already committed,
    before they are stopped (>= 0); usually they need milliseconds."""

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max-restarts must be >= 0, got {self.max_restarts}")
        for name in ("crash_loop_window", "crash_loop_settle", "snapshot_grace"):
            if not getattr(self, name) >= 0:  # NaN fails this too
                flag = name.replace("_", "-")
                raise ValueError(f"{flag} must be >= 0 seconds, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class FaultContext:
    """What the decision looks at, observed by the controller."""

    fault: process.ProcessFault
    age: float  # seconds from the generation's start to the fault
    progressed: bool  # some rank completed a step in this generation
    world_size: int
    failed: Sequence[process.ProcessFault]  # every rank that failed by itself, the fault included
    restarts_left: int


@dataclasses.dataclass(frozen=True)
class Decision:
    strategy: Strategy
    reason: str


def may_be_crash_loop(settings: RecoverySettings, context: FaultContext) -> bool:
    """Worth waiting for the other ranks before deciding: early, no progress, from the script."""
    fault = context.fault
    return (context.age <= settings.crash_loop_window and not context.progressed
            and fault.kind is not process.ProcessFaultKind.HUNG
            and fault.returncode != -signal.SIGKILL)


def decide(settings: RecoverySettings, context: FaultContext) -> Decision:
    # A rank that failed because a peer vanished did not fail on its own.
    independent = [f for f in context.failed if not process.lost_a_peer(f.error_excerpt)]
    if may_be_crash_loop(settings, context) and len(independent) >= context.world_size:
        return Decision(Strategy.FAIL, (
            f"crash loop: all {context.world_size} ranks failed within "
            f"{context.age:.1f} s of the start, before completing a step; not retried"))
    if context.restarts_left <= 0:
        return Decision(Strategy.FAIL, (
            f"retry budget exhausted (max-restarts {settings.max_restarts}); "
            f"last fault: {context.fault.describe()}"))
    return Decision(Strategy.EXIT, f"{context.fault.kind} process: job-level restart")
