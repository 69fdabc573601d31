"""A host's slow-node detection (D11): every ``nSecondsDoOneDetection``, each of its ranks'
new step times (from their profiling step marks) go through the original's time-dimension
detector (:mod:`trainguard.detect.slow_node`); the host is slow while any rank is, and a
``slow-node-detected`` event says which ranks and by how much, a ``slow-node-recovered``
event when none is any more."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from pathlib import Path

from trainguard.detect import slow_node
from trainguard.job import events

__all__ = ["SHORTEST_PERIOD", "SlowNodeWatch", "asked"]

SHORTEST_PERIOD = 0.5
"""Seconds between detections at least (the original's 0 would spin)."""


def asked(path: Path | None) -> slow_node.SlowNodeSettings | None:
    """The detection a ``--slow-node`` FeatConf file asks for; None: none (no file, or
    ``"slowNode": 0``).

    Raises:
        slow_node.SlowNodeSettingsError: the file cannot be used (named, with the field).
    """
    if path is None:
        return None
    found = slow_node.SlowNodeSettings.load(path)
    return found if found.slow_node else None


class SlowNodeWatch:
    def __init__(self, settings: slow_node.SlowNodeSettings, *, ranks: Collection[int],
                 records: Path, node: str, job: str,
                 record: Callable[[events.Event], object]) -> None:
        """``records``: the task's folder of profiling records (a folder per rank)."""
        self.settings = settings
        self._series = {rank: (slow_node.StepTimes(records / str(rank)),
                               slow_node.TimeDetector(settings)) for rank in sorted(ranks)}
        self._node = node
        self._job = job
        self._record = record
        self._levels: dict[int, float] = {}  # the slow ranks, each by how much

    def detect(self) -> None:
        """One detection round over every rank's new steps; a rank without any keeps its
        last verdict."""
        levels = dict(self._levels)
        for rank, (times, detector) in self._series.items():
            verdict = detector.round([seconds for _, seconds in times.new()])
            if verdict is None:
                continue
            if verdict.slow and verdict.degradation > 0:
                levels[rank] = verdict.degradation
            else:
                levels.pop(rank, None)
        if levels.keys() == self._levels.keys():
            self._levels = levels
            return
        self._levels = levels
        if levels:
            worst = max(levels.values())
            self._record(events.SlowNodeDetected(
                job=self._job, node=self._node, ranks=sorted(levels),
                degradation=worst, degradation_level=f"{worst * 100:.2f}%"))
        else:
            self._record(events.SlowNodeRecovered(job=self._job, node=self._node))

    async def run(self) -> None:
        """Detect every period, until cancelled."""
        period = max(self.settings.seconds_per_detection, SHORTEST_PERIOD)
        while True:
            await asyncio.sleep(period)
            self.detect()
