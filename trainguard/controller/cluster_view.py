"""Decisions that span ranks, taken by the controller from what the agents report.

With several hosts no agent sees every rank, so nothing here looks at more than what the ranks'
reports say (their :class:`~trainguard.controller.api.WorkerView`). So far: the step at which
every rank stops for a graceful stop.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["stop_step"]


def stop_step(begun_steps: Iterable[int | None]) -> int | None:
    """The step every rank finishes before a graceful stop, from the step each rank began last:
    one past the furthest rank's (None when no rank has begun one).

    Data-parallel ranks step in lockstep (each step's collective), so when the order arrives no
    rank can be beyond the step after the furthest one seen: every rank can still reach this
    step, and none has passed it, so every rank saves the same step.
    """
    begun = [step for step in begun_steps if step is not None]
    return max(begun) + 1 if begun else None
