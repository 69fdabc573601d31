"""The live document ``job-ranks-<job>``: each rank as last seen, and the job's running tally.

The running job replaces it about once a second; ``trainguard status`` reads it. Fields
(``version`` 1): ``job``; ``generation``; ``faults`` (detected so far); ``restarts_left``;
``persisted_step`` and ``persisted_at`` (the newest checkpoint on disk, or null); ``ranks``: one
object per rank with ``rank``, ``pid`` (null: no process now), ``device``, ``step``,
``steps_per_second``, ``heartbeat_at``, ``snapshot_step``, ``snapshot_at``. Times are ISO-8601
UTC strings or null; the document's own ``updated`` says when it was written.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainguard import clock as clocks
from trainguard.agent import step_statistics
from trainguard.job import events

__all__ = ["VERSION", "JobTally", "LiveDocument", "RankStatus", "document_name"]

VERSION = 1


def document_name(job: str) -> str:
    return f"job-ranks-{job}"


class JobTally:
    """What the events said so far (a recorder listener); owned by the launcher."""

    def __init__(self, *, max_restarts: int, clock: clocks.Clock) -> None:
        self._clock = clock
        self.generation = -1
        self.faults = 0
        self.restarts_left = max_restarts
        self.persisted_step: int | None = None
        self.persisted_wall: float | None = None  # epoch seconds

    def event(self, event: events.Event) -> None:
        match event:
            case events.GenerationStarted(generation=generation):
                self.generation = generation
            case events.FaultDetected():
                self.faults += 1
            case events.DecisionMade(restarts_left=left):
                self.restarts_left = left
            case events.CheckpointPersisted(step=step):
                self.persisted_step, self.persisted_wall = step, self._clock.wall()


@dataclasses.dataclass(frozen=True)
class RankStatus:
    rank: int
    pid: int | None
    device: int
    step: int | None
    steps_per_second: float | None
    heartbeat_at: str | None
    snapshot_step: int | None
    snapshot_at: str | None


@dataclasses.dataclass(frozen=True)
class LiveDocument:
    job: str
    generation: int
    faults: int
    restarts_left: int
    persisted_step: int | None
    persisted_at: str | None
    ranks: tuple[RankStatus, ...]
    version: int = VERSION

    @classmethod
    def of(cls, *, job: str, tally: JobTally,
           activity: list[step_statistics.RankActivity], clock: clocks.Clock) -> LiveDocument:
        now, wall = clock.monotonic(), clock.wall()

        def iso(monotonic: float | None) -> str | None:
            return None if monotonic is None else clocks.iso_utc(wall - (now - monotonic))

        return cls(
            job=job, generation=tally.generation, faults=tally.faults,
            restarts_left=tally.restarts_left, persisted_step=tally.persisted_step,
            persisted_at=(None if tally.persisted_wall is None
                          else clocks.iso_utc(tally.persisted_wall)),
            ranks=tuple(RankStatus(
                rank=rank.rank, pid=rank.pid, device=rank.device, step=rank.step,
                steps_per_second=rank.steps_per_second, heartbeat_at=iso(rank.heard_at),
                snapshot_step=rank.snapshot_step, snapshot_at=iso(rank.snapshot_at))
                for rank in activity))

    def to_data(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> LiveDocument:
        """Raises: ValueError when ``data`` is not a document of this version."""
        if data.get("version") != VERSION:
            raise ValueError(f"live document version {data.get('version')!r}, expected "
                             f"{VERSION}")
        try:
            return cls(**{**data, "ranks": tuple(RankStatus(**rank) for rank in data["ranks"])})
        except (TypeError, KeyError) as error:
            raise ValueError(f"not a live document: {error}") from error
