"""How the job is going: steps per second for the console, step and snapshot times for the report,
and each rank's latest signs of life for ``trainguard status`` and the metrics.

Step intervals are rank 0's, from the start of one step to the start of the next within one
generation (a fault's gap is no step time); snapshot times are how long training was blocked.
Per rank it keeps its recent step starts (its own rate), when it was last heard from and its
newest snapshot. Times are monotonic seconds.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics

__all__ = ["Progress", "RankActivity", "StepStatistics"]

_RECENT = 20  # steps the console's rate and each rank's rate are taken over
_RECENT_STALLS = 64  # snapshot steps whose slowest stall is kept
_WARM_UP_SNAPSHOTS = 2
"""A rank's first snapshots in each generation, which the stalls leave out: its first write into
each of its two slots maps and fills the slot, and the first of a generation also compares the
replicas (a collective). On the demo's job they stalled 4-18 ms against 0.4 ms for the rest,
and ``--snapshot-every auto``'s first choice, on the median of the first three, ranged from
every step to every 11 steps where the rest asked for every 2."""


@dataclasses.dataclass(frozen=True)
class Progress:
    generation: int
    step: int | None  # the step the furthest rank is in
    steps_per_second: float | None


@dataclasses.dataclass(frozen=True)
class RankActivity:
    """One rank as last seen: what ``trainguard status`` shows and the metrics export."""

    rank: int
    pid: int | None  # None: no process now
    device: int
    step: int | None  # the step it is in
    steps_per_second: float | None  # over its recent steps in this generation
    heard_at: float | None  # monotonic: its last message to the agent
    snapshot_step: int | None  # the step its newest snapshot resumes at
    snapshot_at: float | None  # monotonic: that snapshot was committed
    snapshot_bytes: int | None
    snapshot_seconds: float | None  # training was blocked this long for it


@dataclasses.dataclass
class _RankRecord:
    begins: collections.deque[float] = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=_RECENT + 1))
    heard_at: float | None = None
    snapshot_step: int | None = None
    snapshot_at: float | None = None
    snapshot_bytes: int | None = None
    snapshot_seconds: float | None = None
    snapshots_in_generation: int = 0


class StepStatistics:
    def __init__(self) -> None:
        self.first_step_at: float | None = None  # monotonic: the job's first step began
        self.step_intervals: list[float] = []
        self.snapshot_seconds: list[float] = []
        self.slowest_stalls: collections.OrderedDict[int, float] = collections.OrderedDict()
        """Step -> the longest any rank was blocked for its snapshot of that step, for the
        recent snapshot steps: the others wait for the slowest at their next collective. Each
        rank's first :data:`_WARM_UP_SNAPSHOTS` of a generation are left out."""
        self._last_begin: float | None = None
        self._ranks: dict[int, _RankRecord] = collections.defaultdict(_RankRecord)

    def new_generation(self) -> None:
        self._last_begin = None
        for record in self._ranks.values():
            record.begins.clear()
            record.snapshots_in_generation = 0

    def heard(self, rank: int, at: float) -> None:
        self._ranks[rank].heard_at = at

    def began(self, rank: int, at: float) -> None:
        if self.first_step_at is None:
            self.first_step_at = at
        self._ranks[rank].begins.append(at)
        if rank == 0:
            if self._last_begin is not None:
                self.step_intervals.append(at - self._last_begin)
            self._last_begin = at

    def snapshot(self, rank: int, *, step: int, nbytes: int, seconds: float, at: float) -> None:
        self.snapshot_seconds.append(seconds)
        record = self._ranks[rank]
        record.snapshots_in_generation += 1
        if record.snapshots_in_generation > _WARM_UP_SNAPSHOTS:
            self.slowest_stalls[step] = max(seconds, self.slowest_stalls.get(step, 0.0))
            if len(self.slowest_stalls) > _RECENT_STALLS:
                self.slowest_stalls.popitem(last=False)
        record.snapshot_step, record.snapshot_at = step, at
        record.snapshot_bytes, record.snapshot_seconds = nbytes, seconds

    @property
    def step_seconds(self) -> float | None:
        """Median step interval."""
        return statistics.median(self.step_intervals) if self.step_intervals else None

    @property
    def median_snapshot_seconds(self) -> float | None:
        return statistics.median(self.snapshot_seconds) if self.snapshot_seconds else None

    def progress(self, generation: int, step: int | None) -> Progress:
        recent = self.step_intervals[-_RECENT:]
        median = statistics.median(recent) if recent else 0.0
        return Progress(generation, step, 1.0 / median if median > 0 else None)

    def activity(self, rank: int, *, pid: int | None, device: int, step: int | None
                 ) -> RankActivity:
        record = self._ranks[rank]
        begins = record.begins
        span = begins[-1] - begins[0] if len(begins) > 1 else 0.0
        return RankActivity(
            rank=rank, pid=pid, device=device, step=step,
            steps_per_second=(len(begins) - 1) / span if span > 0 else None,
            heard_at=record.heard_at, snapshot_step=record.snapshot_step,
            snapshot_at=record.snapshot_at, snapshot_bytes=record.snapshot_bytes,
            snapshot_seconds=record.snapshot_seconds)
