"""Decisions that span ranks, taken by the controller from what the agents report.

With several hosts no agent sees every rank, so nothing here looks at more than what the ranks'
reports say (their :class:`~trainguard.controller.api.WorkerView`). So far: the step at which
every rank stops for a graceful stop, and the snapshot every healthy rank is given time to
hold after a fault.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["newest_snapshot", "stop_step"]


def stop_step(begun_steps: Iterable[int | None]) -> int | None:
    """The step every rank finishes before a graceful stop, from the step each rank began last:
    one past the furthest rank's (None when no rank has begun one).

    Data-parallel ranks step in lockstep (each step's collective), so when the order arrives no
    rank can be beyond the step after the furthest one seen: every rank can still reach this
    step, and none has passed it, so every rank saves the same step.
    """
    begun = [step for step in begun_steps if step is not None]
    return max(begun) + 1 if begun else None


def newest_snapshot(snapshot_steps: Iterable[int | None]) -> int | None:
    """The step the healthy ranks are given time to hold after a fault, from each rank's newest
    snapshot in memory: the newest any rank holds (None: no rank holds one).

    The failed rank may have committed its snapshot of a step its peers were still copying;
    without theirs, that step is incomplete and a restart redoes it.
    """
    return max((step for step in snapshot_steps if step is not None), default=None)
