"""Hang detection from step marks, with a deadline that adapts to the observed step time.

A rank that stops sending marks is hung once its deadline passes. Between steps the deadline is
``factor`` times the longest recent step interval (start of one step to the start of the next),
kept within [``floor``, ``cap``]; so a job stepping every 100 ms is caught in about ``floor``
seconds, and a job with 60 s steps is not called hung at 61 s. Before a rank's first mark, and
while it says it is busy (checkpoint, restore, declared work), longer fixed timeouts apply.
Intervals are kept per job, across generations, because the step time is the job's.
"""

from __future__ import annotations

import collections
import dataclasses

from trainguard.ipc import messages

__all__ = ["HangDetector", "HeartbeatSettings", "Overdue"]


@dataclasses.dataclass(frozen=True)
class HeartbeatSettings:
    floor: float = 2.0
    """Shortest hang deadline, seconds (> 0). 2 s: above scheduling noise on a loaded host."""
    cap: float = 600.0
    """Longest deadline between steps, seconds (>= floor); the old 30-min collective timeout is
    what this replaces."""
    factor: float = 10.0
    """Deadline = factor x the longest recent step interval (>= 1). 10 leaves room for the slow
    step that a checkpoint or a busy neighbour causes."""
    window: int = 50
    """Step intervals remembered (>= 1)."""
    startup_timeout: float = 600.0
    """Seconds from a worker's start to its first mark: imports, rendezvous, model build."""
    busy_timeout: float = 1800.0
    """Seconds a worker may stay in a checkpoint, a restore or declared busy work."""

    def __post_init__(self) -> None:
        if not self.floor > 0:
            raise ValueError(f"heartbeat floor must be > 0 seconds, got {self.floor}")
        if not self.cap >= self.floor:
            raise ValueError(
                f"heartbeat cap ({self.cap} s) must be >= heartbeat floor ({self.floor} s)")
        if not self.factor >= 1:
            raise ValueError(f"heartbeat factor must be >= 1, got {self.factor}")
        if self.window < 1:
            raise ValueError(f"heartbeat window must be >= 1 interval, got {self.window}")
        for name in ("startup_timeout", "busy_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class Overdue:
    rank: int
    silent_seconds: float
    deadline_seconds: float
    waiting_for: str  # "first mark", "next step", or the busy activity

    def describe(self) -> str:
        return (f"no mark for {self.silent_seconds:.1f} s while waiting for {self.waiting_for}; "
                f"deadline {self.deadline_seconds:.1f} s")


@dataclasses.dataclass
class _RankState:
    started_at: float
    last_mark: float | None = None
    last_begin: float | None = None
    busy: messages.ActivityKind | None = None
    busy_since: float = 0.0
    busy_seconds: float = 0.0  # spent busy since the last step began: not step time


class HangDetector:
    def __init__(self, settings: HeartbeatSettings) -> None:
        self.settings = settings
        self._intervals: collections.deque[float] = collections.deque(maxlen=settings.window)
        self._ranks: dict[int, _RankState] = {}

    def start(self, rank: int, *, at: float) -> None:
        """A (new) process for ``rank`` started at ``at``; forget its previous process."""
        self._ranks[rank] = _RankState(started_at=at)

    def forget(self, rank: int) -> None:
        self._ranks.pop(rank, None)

    def mark(self, rank: int, phase: messages.StepPhase, *, at: float) -> None:
        state = self._ranks.get(rank)
        if state is None:
            return
        if phase is messages.StepPhase.BEGIN:
            if state.last_begin is not None:
                self._intervals.append(max(0.0, at - state.last_begin - state.busy_seconds))
            state.last_begin = at
            state.busy_seconds = 0.0
        state.last_mark = at

    def activity(self, rank: int, kind: messages.ActivityKind, active: bool, *, at: float) -> None:
        state = self._ranks.get(rank)
        if state is None:
            return
        if not active and state.busy is not None:
            state.busy_seconds += at - state.busy_since
        state.busy = kind if active else None
        state.busy_since = at
        state.last_mark = at

    def step_deadline(self) -> float:
        """Seconds a rank may stay silent between steps, from what was observed so far."""
        if not self._intervals:
            return self.settings.cap
        longest = max(self._intervals)
        return min(self.settings.cap, max(self.settings.floor, self.settings.factor * longest))

    def overdue(self, *, now: float) -> list[Overdue]:
        """Ranks past their deadline at ``now``, the longest silent first."""
        late: list[Overdue] = []
        for rank, state in self._ranks.items():
            if state.busy is not None:
                since, allowed, waiting = state.busy_since, self.settings.busy_timeout, str(
                    state.busy)
            elif state.last_mark is None:
                since, allowed, waiting = (
                    state.started_at, self.settings.startup_timeout, "first mark")
            else:
                since, allowed, waiting = state.last_mark, self.step_deadline(), "next step"
            if now - since > allowed:
                late.append(Overdue(rank, now - since, allowed, waiting))
        return sorted(late, key=lambda overdue: -overdue.silent_seconds)
