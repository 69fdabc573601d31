"""Applies :mod:`.snapshot_interval`'s rule to the running job: measures, decides, tells, records.

Every review takes the recent step and snapshot times from the agent's statistics, the faults
and persist times from the job's events and the host's ranks per core, lets the rule choose, has
the agent tell the ranks (:meth:`NodeAgent.pace_snapshots`), and records a
``snapshot-interval`` event at start (once the first snapshot is in), at the first measured
choice, and when the interval or the recommendation changes.
"""

from __future__ import annotations

import asyncio
import os
import statistics
from collections.abc import Callable
from typing import Protocol

from trainguard import clock as clocks
from trainguard.agent import snapshot_interval, step_statistics
from trainguard.agent.settings import AgentSettings
from trainguard.job import events

__all__ = ["Paced", "SnapshotPacer"]

_RECENT_STEPS = 20
_RECENT_SNAPSHOTS = 20  # snapshot steps, each at its slowest rank
_MIN_STEPS = 5  # step intervals before the first measured choice
_MIN_SNAPSHOTS = 3


class Paced(Protocol):
    """What the pacer needs of the node agent."""

    @property
    def statistics(self) -> step_statistics.StepStatistics: ...
    @property
    def snapshot_every(self) -> int: ...
    def pace_snapshots(self, every: int) -> None: ...


class SnapshotPacer:
    def __init__(self, settings: AgentSettings, *, agent: Paced,
                 record: Callable[[events.Event], object], clock: clocks.Clock,
                 cores: int | None = None) -> None:
        """``cores``: the host's cores the ranks share (default: those this process may run on,
        which the ranks it starts inherit; counted as the session counts them for its
        read-ahead)."""
        self._settings = settings
        self._crowding = max(1.0, settings.nproc_per_node
                             / (cores or len(os.sched_getaffinity(0))))
        self._requested = settings.snapshot_interval
        self._agent = agent
        self._record = record
        self._clock = clock
        self._failures = 0
        self._persist_seconds: list[float] = []
        self._recorded: snapshot_interval.IntervalChoice | None = None
        self._started = False

    def event(self, event: events.Event) -> None:
        """Count the job's faults and persist times (subscribed to its events)."""
        if isinstance(event, events.FaultDetected):
            self._failures += 1
        elif isinstance(event, events.CheckpointPersisted):
            self._persist_seconds = [*self._persist_seconds[-9:], event.seconds]

    def start(self) -> None:
        """Record the interval the job starts with, before anything is measured."""
        every = self._agent.snapshot_every
        how = ("auto: every step until the stall is measured" if self._requested is None
               else f"--snapshot-every {self._requested}")
        steps = "every step" if every == 1 else f"every {every} steps"
        share = self._settings.snapshot_share
        self._record(events.SnapshotIntervalChosen(
            job=self._settings.run_id, interval=every, requested=self._settings.snapshot_every,
            recommended=None, stall_seconds=None, step_seconds=None,
            share=self._settings.snapshot_share, mtbf_seconds=None, mtbf_observed=False,
            optimum_steps=None, persist_optimum_seconds=None,
            reason=f"snapshot {steps} ({how}; share {share * 100:.3g}%)",
            ranks_per_core=self._crowding))

    def measured(self) -> snapshot_interval.Measured | None:
        """The recent figures; None until there are enough of them."""
        stats = self._agent.statistics
        steps = stats.step_intervals[-_RECENT_STEPS:]
        stalls = list(stats.slowest_stalls.values())[-_RECENT_SNAPSHOTS:]
        if len(steps) < _MIN_STEPS or len(stalls) < _MIN_SNAPSHOTS or stats.first_step_at is None:
            return None
        stall = statistics.median(stalls)
        mean = statistics.fmean(steps)
        # One step in `every` carries a snapshot: the mean step is the bare step plus stall/every.
        step = max(mean - stall / self._agent.snapshot_every, mean * 1e-3)
        return snapshot_interval.Measured(
            stall_seconds=stall, step_seconds=step, failures=self._failures,
            training_seconds=self._clock.monotonic() - stats.first_step_at,
            persist_seconds=(statistics.median(self._persist_seconds)
                             if self._persist_seconds else None),
            crowding=self._crowding)

    def review(self) -> snapshot_interval.IntervalChoice | None:
        """Choose, apply, and record when noteworthy; None while too little is measured."""
        measured = self.measured()
        if measured is None:
            return None
        last = self._recorded
        current = (self._agent.snapshot_every if self._requested is None
                   else last.recommended if last is not None else self._requested)
        choice = snapshot_interval.choose(
            measured, requested=self._requested, current=current,
            share=self._settings.snapshot_share,
            device_mtbf=self._settings.device_failure_interval,
            ranks=self._settings.nproc_per_node)
        self._agent.pace_snapshots(choice.interval)
        if self._news(last, choice):
            self._recorded = choice
            self._record(events.SnapshotIntervalChosen(
                job=self._settings.run_id, interval=choice.interval,
                requested=self._settings.snapshot_every, recommended=choice.recommended,
                stall_seconds=measured.stall_seconds, step_seconds=measured.step_seconds,
                share=self._settings.snapshot_share, mtbf_seconds=choice.mtbf_seconds,
                mtbf_observed=choice.mtbf_observed, optimum_steps=choice.optimum,
                persist_optimum_seconds=choice.persist_optimum_seconds, reason=choice.reason,
                ranks_per_core=measured.crowding))
        return choice

    def _news(self, last: snapshot_interval.IntervalChoice | None,
              choice: snapshot_interval.IntervalChoice) -> bool:
        """Whether ``choice`` is said: under ``auto``, each move of the interval; with a fixed N,
        the first recommendation of another one, once. The measured stall varies from review
        to review: a recommendation moving between 3 and 4 steps, or taken back and given
        again as the stall wobbles across the share, is no news."""
        if last is None:
            return True
        if self._requested is None:
            return (choice.interval, choice.recommended) != (last.interval, last.recommended)
        return last.recommended == self._requested and choice.recommended != self._requested

    def tick(self) -> None:
        """Nothing until the job's first snapshot (a script without a session takes none, and
        its events then start with the generation's); then the start, then reviews."""
        if not self._agent.statistics.snapshot_seconds:
            return
        if not self._started:
            self._started = True
            self.start()
        self.review()

    async def run(self, *, interval: float) -> None:
        """:meth:`tick` every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            self.tick()
