"""From a run's recorded events to its report: the one place the report's figures come from.

Events carry two clocks: every stored event has its wall time, and fault and progress events
also carry the host's monotonic time of what they describe. The monotonic times are placed on
the wall clock by the smallest gap seen between the two (an event is stored just after its
monotonic time is read), so that a fault's detection is where it happened, not where it was
written down.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
from collections.abc import Sequence
from typing import Any

from trainguard.controller import policy
from trainguard.job import events
from trainguard.report import api
from trainguard.store import api as store_api

__all__ = ["build"]


def _wall(event: store_api.StoredEvent) -> float:
    return datetime.datetime.fromisoformat(event.time).timestamp()


def _monotonic_offset(recorded: Sequence[store_api.StoredEvent]) -> float:
    """Wall minus monotonic seconds on the job's host (0 when no event has a monotonic time:
    then none is placed)."""
    gaps = [_wall(event) - float(event.data["at"]) for event in recorded
            if event.kind == events.StepProgress.KIND]
    gaps += [_wall(event) - float(event.data["detected_at"]) for event in recorded
             if event.kind == events.FaultDetected.KIND]
    return min(gaps, default=0.0)


@dataclasses.dataclass(frozen=True)
class _Point:
    """Where the job was: a generation's start (its restored step), a progress sample, or a
    fault (the step its rank was in)."""

    time: float  # seconds since the job started
    generation: int
    step: int


def _rates(points: Sequence[_Point]) -> tuple[api.RateSample, ...]:
    """Steps per second between consecutive points of one generation (a fault's gap has none)."""
    ordered = sorted(points, key=lambda point: point.time)  # a fault is stored after later samples
    return tuple(
        api.RateSample(start=before.time, end=after.time, generation=after.generation,
                       step=after.step,
                       steps_per_second=(after.step - before.step) / (after.time - before.time))
        for before, after in itertools.pairwise(ordered)
        if before.generation == after.generation and after.step >= before.step
        and after.time > before.time)


@dataclasses.dataclass
class _Open:
    """A fault whose recovery has not been seen yet."""

    data: dict[str, Any]
    occurred: float
    detected: float
    strategy: str = ""
    recovery: dict[str, Any] | None = None

    def span(self) -> api.FaultSpan:
        recovery = self.recovery
        return api.FaultSpan(
            rank=int(self.data["rank"]),
            kind=str(self.data.get("injected") or self.data["fault_kind"]),
            step=self.data.get("last_step"), occurred=self.occurred, detected=self.detected,
            recovered=(self.occurred + float(recovery["recover_seconds"])
                       if recovery is not None else None),
            strategy=_shown(str(recovery["strategy"]) if recovery is not None
                            else self.strategy),
            steps_lost=int(recovery["steps_lost"]) if recovery is not None else None,
            restored_from=(f"{recovery['restore_source']}@{recovery['restore_step']}"
                           if recovery is not None else None))


def _shown(strategy: str) -> str:
    """A recorded strategy (the original's name) in the words the console uses."""
    try:
        return policy.Strategy(strategy).shown
    except ValueError:  # none decided yet, or a name from another version
        return strategy


def build(recorded: Sequence[store_api.StoredEvent]) -> api.RunReport:
    """The report of the run whose events (oldest first) are ``recorded``.

    Raises:
        api.ReportError: there are no events.
    """
    if not recorded:
        raise api.ReportError("the run recorded no events")
    generations = [event for event in recorded if event.kind == events.GenerationStarted.KIND]
    zero = _wall(generations[0] if generations else recorded[0])
    offset = _monotonic_offset(recorded)

    def since_start(monotonic: float) -> float:
        return monotonic + offset - zero

    faults: list[_Open] = []
    points: list[_Point] = []
    measured: dict[str, Any] = {}
    finished: dict[str, Any] = {}
    for event in recorded:
        data = event.data
        if event.kind == events.FaultDetected.KIND:
            detected = since_start(float(data["detected_at"]))
            occurred = detected - float(data["detect_seconds"] or 0.0)
            faults.append(_Open(data, occurred=occurred, detected=detected))
            if data["last_step"] is not None:
                points.append(_Point(occurred, int(data["generation"]), int(data["last_step"])))
        elif event.kind == events.DecisionMade.KIND and faults:
            faults[-1].strategy = str(data["strategy"])
        elif event.kind == events.RecoveryCompleted.KIND:
            for fault in reversed(faults):
                if fault.recovery is None and fault.data["rank"] == data["fault_rank"]:
                    fault.recovery = data
                    break
        elif event.kind == events.GenerationStarted.KIND:
            points.append(_Point(_wall(event) - zero, int(data["generation"]),
                                 int(data["restore_step"])))
        elif event.kind == events.StepProgress.KIND:
            points.append(_Point(since_start(float(data["at"])), int(data["generation"]),
                                 int(data["step"])))
        elif event.kind == events.RunMeasured.KIND:
            measured = data  # its time is the job's end, after the workers stopped: no point
        elif event.kind == events.JobFinished.KIND:
            finished = data
    run = (events.RunMeasured(**{key: measured[key] for key in (
        "job", "steps_completed", "step_seconds", "snapshot_seconds", "training_seconds")})
        if measured else None)
    return api.RunReport(
        job=str(recorded[0].data.get("job", "")),
        started=(generations[0] if generations else recorded[0]).time,
        outcome=finished.get("outcome"), reason=str(finished.get("reason", "")),
        wall_seconds=finished.get("wall_seconds"),
        steps_completed=run.steps_completed if run else None,
        step_seconds=run.step_seconds if run else None,
        training_seconds=run.training_seconds if run else None,
        goodput=run.goodput if run else None,
        faults=tuple(fault.span() for fault in faults), rates=_rates(points))
