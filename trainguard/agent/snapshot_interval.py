"""How many steps between snapshots (R4): every step while that is cheap, else what pays.

A snapshot blocks training for its stall ``S``; a fault loses the steps since the last snapshot,
on average half an interval. With a snapshot every ``t`` seconds and a mean time between
failures ``M``, the share of time lost is about ``S/t + t/(2M)``, least at
``t = sqrt(2 * S * M)`` (Young 1974; Daly 2006 to first order): the *optimum*, in steps of
``T`` seconds (the step without its snapshot). The *budget* is the fewest steps between
snapshots whose stall stays within the stated share of the step: ``ceil(S / (share * T))``.
Where a host's ranks outnumber its cores, ``S`` counts that many times over (ranks per core):
the ranks snapshot at the same moment, so each one's snapshot also takes cores the others would
step on (4 ranks on 2 cores: a snapshot stalling 0.6 ms a rank cost the 12.5 ms step 1.45 ms,
benchmarks/snapshot_overhead.py).

``auto`` takes the smaller of the two, at least 1: every step while the stall is within the
share (zero completed steps lost to a fault); past it, the shortest interval within the share,
unless faults come so often that the optimum is shorter still (more snapshots then save more
rework than they cost); it moves only past a hysteresis band. ``M`` is the job's own, its
training time over its faults, once it has had one; before, the prior per device divided by
the ranks. A fixed interval is kept, and what ``auto`` would choose is given beside it as a
recommendation.

The persisted checkpoint is the tier for faults that take the memory with them (a host lost):
its optimum is the same rule over the persist time, in seconds, shown as a recommendation for
``--persist-interval``. Everything here is pure: measurements in, a choice out.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["AUTO", "IntervalChoice", "Measured", "choose", "parse_every"]

AUTO = "auto"

_HYSTERESIS = 1.25
"""The interval (or recommendation) moves only when the best one, before rounding to steps, is
more than this factor away from it, so that a noisy measurement does not flip it from one
review to the next: a stall may exceed the share by up to 25% before the interval grows."""


def parse_every(text: str) -> int | None:
    """``auto`` -> None; else the positive number of steps.

    Raises:
        ValueError: naming ``snapshot-every`` and the value.
    """
    if text.strip().lower() == AUTO:
        return None
    try:
        every = int(text)
    except ValueError:
        every = 0
    if every < 1:
        raise ValueError(f"snapshot-every must be 'auto' or a number of steps >= 1, got {text!r}")
    return every


@dataclasses.dataclass(frozen=True)
class Measured:
    """What the job has shown so far."""

    stall_seconds: float
    """Median seconds training is blocked per snapshot, at the slowest rank (the others wait
    for it at their next collective)."""
    step_seconds: float
    """Seconds of a step, its snapshot left out."""
    failures: int
    """Faults the job has had."""
    training_seconds: float
    """Seconds since the first step (the time the failures happened in)."""
    persist_seconds: float | None = None
    """Median seconds to write a checkpoint to disk; None before the first."""
    crowding: float = 1.0
    """Ranks per core on the host, at least 1: what a stall costs the step, per second of it."""

    @property
    def cost_seconds(self) -> float:
        """What one snapshot costs the step: its stall, counted ``crowding`` times."""
        return self.stall_seconds * self.crowding


@dataclasses.dataclass(frozen=True)
class IntervalChoice:
    interval: int
    """Steps between snapshots from now on."""
    recommended: int
    """What ``auto`` chooses from ``current``: ``interval`` itself under ``auto``."""
    best: int
    """The smaller of budget and optimum; ``recommended`` unless that is within the
    hysteresis band of ``current``."""
    budget: int
    """The fewest steps between snapshots whose stall stays within the share."""
    optimum: int
    """The Young/Daly optimum, in steps."""
    mtbf_seconds: float
    """The job's mean time between failures the optimum assumed."""
    mtbf_observed: bool
    """Whether that is the job's own (else the prior)."""
    persist_optimum_seconds: float | None
    """The Young/Daly optimum for the persisted checkpoint, seconds; None before a persist."""
    reason: str
    """The choice and why, in one line for people."""


def choose(measured: Measured, *, requested: int | None, current: int, share: float,
           device_mtbf: float, ranks: int) -> IntervalChoice:
    """The interval from the measurements.

    Args:
        measured: stall, step, faults; ``stall_seconds`` >= 0, ``step_seconds`` > 0.
        requested: the fixed interval asked for, None for ``auto``.
        current: under ``auto`` the interval in use, else the last recommendation; it stays
            while the continuous best is within the hysteresis factor of it.
        share: the part of a step a snapshot may take (0 < share < 1).
        device_mtbf: seconds between failures of one device, the prior.
        ranks: devices of the job (its failure rate is theirs together).
    """
    cost, step = measured.cost_seconds, measured.step_seconds
    observed = measured.failures > 0
    mtbf = (measured.training_seconds / measured.failures if observed
            else device_mtbf / max(1, ranks))
    mtbf = max(mtbf, step)  # faults cannot come faster than the steps they interrupt
    budget_steps = cost / (share * step)
    optimum_steps = math.sqrt(2.0 * cost * mtbf) / step
    budget = max(1, math.ceil(budget_steps - 1e-9))
    optimum = max(1, round(optimum_steps))
    best = min(budget, optimum)
    target = min(budget_steps, optimum_steps)
    settled = current if current / _HYSTERESIS <= target <= current * _HYSTERESIS else best
    persist = measured.persist_seconds
    persist_optimum = math.sqrt(2.0 * persist * mtbf) if persist is not None else None
    choice = IntervalChoice(interval=settled if requested is None else requested,
                            recommended=settled, best=best, budget=budget, optimum=optimum,
                            mtbf_seconds=mtbf, mtbf_observed=observed,
                            persist_optimum_seconds=persist_optimum, reason="")
    return dataclasses.replace(choice, reason=_reason(choice, measured, requested=requested,
                                                      share=share, device_mtbf=device_mtbf,
                                                      ranks=ranks))


def _steps(count: int) -> str:
    return "every step" if count == 1 else f"every {count} steps"


def _reason(choice: IntervalChoice, measured: Measured, *, requested: int | None, share: float,
            device_mtbf: float, ranks: int) -> str:
    cost, step = measured.cost_seconds, measured.step_seconds
    how = f"--snapshot-every {requested}" if requested is not None else "auto"
    counted = (f", {cost * 1000:.1f} ms with {measured.crowding:.3g} ranks to a core"
               if measured.crowding > 1 else "")
    parts = [f"snapshot {_steps(choice.interval)} ({how}): a snapshot stalls "
             f"{measured.stall_seconds * 1000:.1f} ms{counted}, {cost / step:.1%} of a "
             f"{step * 1000:.1f} ms step (share {share * 100:.3g}%)"]
    if choice.budget > 1:
        parts.append(f"{_steps(choice.budget)} keeps it within the share "
                     f"({cost / (choice.budget * step):.1%})")
    if choice.mtbf_observed:
        failures = f"{measured.failures} fault{'s' if measured.failures != 1 else ''}"
        source = f"observed: {failures} in {_duration(measured.training_seconds)}"
    else:
        source = (f"assumed, no fault yet: {_duration(device_mtbf)} per device / {ranks} "
                  f"ranks")
    parts.append(f"Young/Daly optimum {_steps(choice.optimum)} (MTBF "
                 f"{_duration(choice.mtbf_seconds)}, {source})")
    if requested is not None and choice.recommended != requested:
        parts.append(f"recommended: {_steps(choice.recommended)} (--snapshot-every "
                     f"{choice.recommended})")
    if choice.best != choice.recommended:
        parts.append(f"kept: the best, {_steps(choice.best)}, is within "
                     f"{_HYSTERESIS - 1:.0%} of it")
    if choice.persist_optimum_seconds is not None and measured.persist_seconds is not None:
        parts.append(f"a persist takes {measured.persist_seconds:.2f} s: optimum "
                     f"--persist-interval {_duration(choice.persist_optimum_seconds)}")
    lost = choice.interval - 1
    parts.append("a fault loses no completed step" if lost == 0 else
                 f"a fault loses up to {lost} completed step{'s' if lost != 1 else ''}")
    return "; ".join(parts)


def _duration(seconds: float) -> str:
    unit, size = next(((unit, size) for unit, size in (("h", 3600.0), ("m", 60.0))
                       if seconds >= size), ("s", 1.0))
    value = seconds / size
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
