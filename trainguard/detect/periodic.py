"""The loop of a polling detector: one step every period, the step's own time included."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NoReturn

from trainguard.clock import Clock

__all__ = ["every"]


async def every(period: float, step: Callable[[], Awaitable[object]], *, clock: Clock
                ) -> NoReturn:
    """Await ``step`` every ``period`` seconds until cancelled; a step longer than the period
    is followed by the next at once."""
    while True:
        started = clock.monotonic()
        await step()
        await asyncio.sleep(max(0.0, period - (clock.monotonic() - started)))
