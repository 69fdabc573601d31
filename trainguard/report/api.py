"""Value types of a run's report; times are seconds since the job's first generation started."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["FaultSpan", "RateSample", "ReportError", "RunReport"]


class ReportError(RuntimeError):
    """The report cannot be made (no events, matplotlib missing); the message says what to do."""


@dataclasses.dataclass(frozen=True)
class RateSample:
    """Steps per second between two progress samples of one generation."""

    start: float  # seconds since the job started
    end: float
    generation: int
    step: int  # the step the furthest rank was in at ``end``
    steps_per_second: float


@dataclasses.dataclass(frozen=True)
class FaultSpan:
    """One fault, from when it occurred through its detection to every rank stepping again."""

    rank: int
    kind: str  # what was injected, else the fault's kind (exited, hung, ...)
    step: int | None  # the last step the rank began
    occurred: float  # seconds since the job started
    detected: float
    recovered: float | None  # None: never recovered (the job failed or stopped first)
    strategy: str  # the last decision's strategy: the one that recovered, or failed
    steps_lost: int | None
    restored_from: str | None  # "memory@120": where the state came from, and its step

    @property
    def detect_seconds(self) -> float:
        return self.detected - self.occurred

    @property
    def recover_seconds(self) -> float | None:
        return None if self.recovered is None else self.recovered - self.occurred


@dataclasses.dataclass(frozen=True)
class RunReport:
    job: str
    started: str  # ISO-8601 UTC: the first generation started
    outcome: str | None  # None: the run has not finished (or its process was killed)
    reason: str
    wall_seconds: float | None
    steps_completed: int | None
    step_seconds: float | None  # median, rank 0
    training_seconds: float | None
    goodput: float | None
    faults: tuple[FaultSpan, ...]
    rates: tuple[RateSample, ...]

    @property
    def steps_lost(self) -> int:
        return sum(fault.steps_lost or 0 for fault in self.faults)

    def to_data(self) -> dict[str, Any]:
        """The report as JSON (``trainguard report --json``)."""
        return {
            **{field.name: getattr(self, field.name) for field in dataclasses.fields(self)
               if field.name not in ("faults", "rates")},
            "steps_lost": self.steps_lost,
            "faults": [{**dataclasses.asdict(fault), "detect_seconds": fault.detect_seconds,
                        "recover_seconds": fault.recover_seconds} for fault in self.faults],
            "rates": [dataclasses.asdict(rate) for rate in self.rates],
        }
