"""A clock the tests move by hand, shared by the device detector's tests."""

from __future__ import annotations

import pytest


class FakeClock:
    """Monotonic and wall seconds that move only when a test says; wall = monotonic + epoch."""

    EPOCH = 1_744_000_000.0

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.EPOCH + self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
