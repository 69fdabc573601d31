"""What a detector shows in ``trainguard status``: whether its last attempt worked, and why not.

A detector whose backend fails (no NVML library, no ``ipmitool``, no permission for ICMP) keeps
running: it retries on its next period and records the failure here, so that the agent goes on
with its other detectors and the operator sees which one is blind (issue 13, "Bad input").
"""

from __future__ import annotations

import dataclasses

from trainguard.clock import Clock

__all__ = ["DetectorStatus", "StatusRecorder"]


@dataclasses.dataclass(frozen=True)
class DetectorStatus:
    detector: str  # "network", "switch", "node", "storage"
    mode: str  # how it watches, in words, e.g. "polls /sys/class/net every 0.2 s"
    working: bool  # the last attempt worked (True before the first one)
    last_error: str | None  # the last failure's message; None once an attempt worked
    retries: int  # attempts that failed since the last one that worked
    last_success: float | None  # wall seconds of the last attempt that worked


class StatusRecorder:
    """The mutable side of :class:`DetectorStatus`, owned by one detector."""

    def __init__(self, detector: str, *, mode: str, clock: Clock) -> None:
        self._clock = clock
        self._status = DetectorStatus(detector, mode, True, None, 0, None)

    @property
    def status(self) -> DetectorStatus:
        return self._status

    def succeeded(self) -> None:
        self._status = dataclasses.replace(self._status, working=True, last_error=None,
                                           retries=0, last_success=self._clock.wall())

    def failed(self, error: str) -> None:
        """An attempt failed with ``error`` (a message naming what is missing or wrong)."""
        self._status = dataclasses.replace(self._status, working=False, last_error=error,
                                           retries=self._status.retries + 1)

    def set_mode(self, mode: str) -> None:
        self._status = dataclasses.replace(self._status, mode=mode)
