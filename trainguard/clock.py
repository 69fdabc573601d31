"""Time as a collaborator, so rules about deadlines are tested without waiting."""

from __future__ import annotations

import datetime
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "iso_utc"]


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps; deadlines use only this."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch, for timestamps shown to people and written to documents."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


def iso_utc(epoch_seconds: float) -> str:
    """``2026-11-30T07:02:50.123Z``: the timestamp format of documents and events."""
    moment = datetime.datetime.fromtimestamp(epoch_seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
