"""How the job is going: steps per second for the console, step and snapshot times for the report.

Step intervals are rank 0's, from the start of one step to the start of the next within one
generation (a fault's gap is no step time); snapshot times are how long training was blocked.
"""

from __future__ import annotations

import dataclasses
import statistics

__all__ = ["Progress", "StepStatistics"]

_RECENT = 20  # steps the console's rate is taken over


@dataclasses.dataclass(frozen=True)
class Progress:
    generation: int
    step: int | None  # the step the furthest rank is in
    steps_per_second: float | None


class StepStatistics:
    def __init__(self) -> None:
        self.first_step_at: float | None = None  # monotonic: the job's first step began
        self.step_intervals: list[float] = []
        self.snapshot_seconds: list[float] = []
        self._last_begin: float | None = None

    def new_generation(self) -> None:
        self._last_begin = None

    def began(self, rank: int, at: float) -> None:
        if self.first_step_at is None:
            self.first_step_at = at
        if rank == 0:
            if self._last_begin is not None:
                self.step_intervals.append(at - self._last_begin)
            self._last_begin = at

    def snapshot(self, seconds: float) -> None:
        self.snapshot_seconds.append(seconds)

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
