"""Hang detection from step marks, with a deadline that adapts to the observed step time.

A rank inside a step (it sent the step's start mark, not yet its end) must move on within
``factor`` times the longest recent step interval, kept within [``floor``, ``cap``]: a job
stepping every 100 ms is caught in about ``floor`` seconds, and a job with 60 s steps is not
called hung at 61 s. Intervals are kept per job, across generations: the step time is the job's.

Between steps (after a step's end mark: checkpoints, evaluation, the end of the script) a rank
gets the long ``idle_timeout``. That costs nothing in detection: a rank stuck there holds its
peers up inside their next step, where the step deadline catches them, and the culprit is then
found among the ranks that did not get that far. Ranks that legitimately hold the others up, by
starting (no mark yet) or by declared work (checkpoint, restore, ``Session.busy()``), suspend
the step deadline of everyone while they do, and have deadlines of their own. Declared work
adapts as steps do: ``factor`` times the longest period of the same kind seen so far, within
[``busy_floor``, ``busy_timeout``]; ``busy_timeout`` until one has been seen.

A process that is stopped (SIGSTOP, a debugger) cannot mark at all, and while it holds the
others up nobody's step deadline runs: so a rank whose process stays stopped longer than
``stopped_timeout`` is hung whatever it was doing. Whether a process is stopped is read from the
system by the caller (the agent's watchdog) and passed in, as times are: this module is pure.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable

from trainguard.ipc import messages

__all__ = ["HangDetector", "HeartbeatSettings", "Overdue", "Suspect", "hung_rank"]


@dataclasses.dataclass(frozen=True)
class HeartbeatSettings:
    floor: float = 2.0
    """Shortest step deadline, seconds (> 0). 2 s: above scheduling noise on a loaded host."""
    cap: float = 600.0
    """Longest step deadline, seconds (>= floor); the 30-min collective timeout is what this
    replaces."""
    factor: float = 10.0
    """Step deadline = factor x the longest recent step interval (>= 1). 10 leaves room for the
    slow step that a busy neighbour causes."""
    window: int = 50
    """Step intervals remembered (>= 1)."""
    startup_timeout: float = 600.0
    """Seconds from a worker's start to its first mark: imports, rendezvous, model build."""
    busy_timeout: float = 1800.0
    """Longest deadline for a checkpoint, a restore or declared busy work, seconds; the deadline
    until a period of that kind has been seen (a first restore may come from a slow disk)."""
    busy_floor: float = 60.0
    """Shortest deadline for a checkpoint, a restore or declared busy work, seconds (busy work
    otherwise gets factor x the longest period of its kind seen). 60 s: a first snapshot after a
    restart also maps its memory (up to 17x the copy alone), and a restore that came
    from memory may come from disk next time; a stopped process is caught sooner anyway."""
    stopped_timeout: float = 1.0
    """Seconds a worker's process may stay stopped (SIGSTOP, a debugger) before it is hung,
    whatever it was doing. 1 s: a profiler's ptrace stop lasts milliseconds; raise it to
    debug a rank with gdb."""
    idle_timeout: float = 600.0
    """Seconds a worker may stay between two steps, or after its last one."""
    exit_timeout: float = 15.0
    """Seconds a worker may take to exit once its session is closed; then it is ended, and
    counts as finished. torch 2.13 can deadlock tearing a gloo process group down."""

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
        for name in ("startup_timeout", "busy_timeout", "busy_floor", "idle_timeout",
                     "exit_timeout", "stopped_timeout"):
            if not getattr(self, name) > 0:
                flag = "heartbeat-" + name.replace("_", "-")
                raise ValueError(f"{flag} must be > 0 seconds, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class Overdue:
    rank: int
    silent_seconds: float
    deadline_seconds: float
    waiting_for: str  # "first mark", "end of step", "next step", or the busy activity

    def describe(self) -> str:
        return (f"no mark for {self.silent_seconds:.1f} s while waiting for {self.waiting_for}; "
                f"deadline {self.deadline_seconds:.1f} s")


@dataclasses.dataclass
class _RankState:
    started_at: float
    last_mark: float | None = None
    in_step: bool = False
    last_begin: float | None = None
    busy: messages.ActivityKind | None = None
    busy_since: float = 0.0
    busy_seconds: float = 0.0  # spent busy since the last step began: not step time
    stopped_since: float | None = None  # first seen stopped, in the current stop

    @property
    def holding_up(self) -> bool:
        """Starting or busy: the others may be waiting for it, and rightly."""
        return self.busy is not None or self.last_mark is None


class HangDetector:
    def __init__(self, settings: HeartbeatSettings) -> None:
        self.settings = settings
        self._intervals: collections.deque[float] = collections.deque(maxlen=settings.window)
        self._busy_periods = {kind: collections.deque[float](maxlen=settings.window)
                              for kind in messages.ActivityKind}
        self._ranks: dict[int, _RankState] = {}

    def start(self, rank: int, *, at: float) -> None:
        """A (new) process for ``rank`` started at ``at``; forget its previous process."""
        self.forget(rank, at=at)
        self._ranks[rank] = _RankState(started_at=at)

    def forget(self, rank: int, *, at: float) -> None:
        """Stop watching ``rank`` (its process exited or left) at ``at``.

        Busy work it was doing counts as a period of at least that length: when its deadline
        was too short for the work, the next one grows by ``factor``, instead of cutting the
        same work short on every attempt.
        """
        state = self._ranks.pop(rank, None)
        if state is not None and state.busy is not None:
            self._busy_periods[state.busy].append(max(0.0, at - state.busy_since))

    def mark(self, rank: int, phase: messages.StepPhase, *, at: float) -> None:
        state = self._ranks.get(rank)
        if state is None:
            return
        if phase is messages.StepPhase.BEGIN:
            if state.last_begin is not None:
                self._intervals.append(max(0.0, at - state.last_begin - state.busy_seconds))
            state.last_begin = at
            state.busy_seconds = 0.0
        state.in_step = phase is messages.StepPhase.BEGIN
        state.last_mark = at

    def activity(self, rank: int, kind: messages.ActivityKind, active: bool, *, at: float) -> None:
        state = self._ranks.get(rank)
        if state is None:
            return
        if not active and state.busy is not None:
            state.busy_seconds += at - state.busy_since
            self._busy_periods[state.busy].append(max(0.0, at - state.busy_since))
        state.busy = kind if active else None
        state.busy_since = at
        state.in_step = False
        state.last_mark = at

    def stopped(self, rank: int, stopped: bool, *, at: float) -> None:
        """Whether ``rank``'s process was seen stopped at ``at``."""
        state = self._ranks.get(rank)
        if state is None:
            return
        if not stopped:
            state.stopped_since = None
        elif state.stopped_since is None:
            state.stopped_since = at

    def busy_deadline(self, kind: messages.ActivityKind) -> float:
        """Seconds a rank may spend in one period of ``kind``, from what was observed so far."""
        periods = self._busy_periods[kind]
        if not periods:
            return self.settings.busy_timeout
        return min(self.settings.busy_timeout,
                   max(self.settings.busy_floor, self.settings.factor * max(periods)))

    def step_deadline(self) -> float:
        """Seconds a rank may stay inside one step, from what was observed so far."""
        if not self._intervals:
            return self.settings.cap
        longest = max(self._intervals)
        return min(self.settings.cap, max(self.settings.floor, self.settings.factor * longest))

    def overdue(self, *, now: float) -> list[Overdue]:
        """Ranks past their deadline at ``now``, the longest silent first."""
        held_up = any(state.holding_up for state in self._ranks.values())
        late: list[Overdue] = []
        for rank, state in self._ranks.items():
            if held_up and state.stopped_since is None and not state.holding_up:
                continue  # waiting for a rank that is starting or busy is no hang
            since, allowed, waiting = self._allowance(state)
            if now - since > allowed:
                late.append(Overdue(rank, now - since, allowed, waiting))
        return sorted(late, key=lambda overdue: -overdue.silent_seconds)

    def leave_deadline(self, ranks: Iterable[int]) -> float:
        """Seconds ``ranks`` may take to leave their generation once told to. A rank leaves at
        its step's next collective (which fails at once, its connections cut) or at its next
        step boundary, so each gets the deadline of what it is doing (its step, its busy work,
        the wait for its next step); the longest of theirs, ``cap`` when none is watched."""
        return max((self._allowance(state)[1] for rank in ranks
                    if (state := self._ranks.get(rank)) is not None), default=self.settings.cap)

    def _allowance(self, state: _RankState) -> tuple[float, float, str]:
        """Since when, for how many seconds and waiting for what a rank may stay silent."""
        if state.stopped_since is not None:
            return (state.stopped_since, self.settings.stopped_timeout,
                    f"its stopped process to continue (in {self._doing(state)})")
        if state.busy is not None:
            return state.busy_since, self.busy_deadline(state.busy), str(state.busy)
        if state.last_mark is None:
            return state.started_at, self.settings.startup_timeout, "first mark"
        if state.in_step:
            return state.last_mark, self.step_deadline(), "end of step"
        return state.last_mark, self.settings.idle_timeout, "next step"

    @staticmethod
    def _doing(state: _RankState) -> str:
        if state.busy is not None:
            return str(state.busy)
        if state.last_mark is None:
            return "start-up"
        return "a step" if state.in_step else "the time between steps"


@dataclasses.dataclass(frozen=True)
class Suspect:
    """A live rank, as the agent sees it when some rank is overdue."""

    rank: int
    begun_step: int | None
    stopped: bool  # the process is stopped (SIGSTOP, a debugger)


def hung_rank(suspects: list[Suspect], overdue: list[Overdue]) -> tuple[int, Overdue]:
    """Which rank hung, once ``overdue`` is not empty; with the deadline it broke.

    The others are usually silent too, blocked in a collective waiting for it, and may even
    have gone silent first. So: a stopped process if there is one; else the rank furthest behind
    (it never reached the collective the others wait in); among those, the longest silent.
    """
    candidates = [s for s in suspects if s.stopped]
    if not candidates and suspects:
        behind = min(-1 if s.begun_step is None else s.begun_step for s in suspects)
        candidates = [s for s in suspects if (-1 if s.begun_step is None else s.begun_step)
                      == behind]
    silent = {item.rank: item for item in overdue}
    if not candidates:
        return overdue[0].rank, overdue[0]
    chosen = max(candidates, key=lambda s: silent[s.rank].silent_seconds
                 if s.rank in silent else -1.0)
    return chosen.rank, silent.get(chosen.rank, overdue[0])
