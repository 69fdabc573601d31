"""Recorded events for the report's tests, built from the real event types."""

from __future__ import annotations

from trainguard import clock as clocks
from trainguard.faults import process
from trainguard.job import events
from trainguard.store import api as store_api

__all__ = ["Recording", "decision", "fault", "recovered", "sample", "started"]

WALL = 1_800_000_000.0  # the first generation starts at this wall time
OFFSET = WALL - 500.0  # wall minus monotonic on the job's host: monotonic 500 is time 0


class Recording:
    """Events as the store holds them: each stored at a wall time, ``delay`` seconds after
    the monotonic moment ``at`` it describes."""

    def __init__(self) -> None:
        self.stored: list[store_api.StoredEvent] = []

    def add(self, event: events.Event, *, at: float, delay: float = 0.001) -> None:
        self.stored.append(store_api.StoredEvent(
            len(self.stored) + 1, clocks.iso_utc(at + OFFSET + delay), event.KIND,
            event.to_data()))


def started(generation: int, restore_step: int = 0) -> events.GenerationStarted:
    return events.GenerationStarted(job="j", generation=generation, world_size=4,
                                    master_port=1, restart_count=generation,
                                    restore_source="memory", restore_step=restore_step,
                                    plan_seconds=0.01)


def fault(*, rank: int, detected_at: float, detect_seconds: float | None, last_step: int,
          injected: str | None = "crash") -> events.FaultDetected:
    return events.FaultDetected(
        job="j", generation=0, rank=rank, pid=10, fault_kind=process.ProcessFaultKind.EXITED,
        returncode=-9, last_step=last_step, detect_seconds=detect_seconds,
        detected_at=detected_at, injected=injected, detail="", error_excerpt="",
        description="", code="")


def decision(strategy: str) -> events.DecisionMade:
    return events.DecisionMade(job="j", generation=0, strategy=strategy, reason="r",
                               restarts_left=2)


def recovered(*, rank: int, strategy: str, seconds: float, lost: int, restore_step: int
              ) -> events.RecoveryCompleted:
    return events.RecoveryCompleted(job="j", generation=1, fault_rank=rank, strategy=strategy,
                                    detect_seconds=0.1, recover_seconds=seconds,
                                    steps_lost=lost, restore_source="memory",
                                    restore_step=restore_step)


def sample(recording: Recording, generation: int, step: int, at: float) -> None:
    recording.add(events.StepProgress(job="j", generation=generation, step=step,
                                      steps_per_second=10.0, at=at), at=at)
