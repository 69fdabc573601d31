"""What the network, switch, node and storage detector tests share: a clock they move, and the
rule for tests that need root (skipped without it, failed in CI, where they must run)."""

from __future__ import annotations

import os

import pytest


class FakeClock:
    """Both clocks move together, by :meth:`advance` only."""

    def __init__(self) -> None:
        self.now = 100.0
        self.wall_now = 1_800_000_000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall_now += seconds


def need_root(why: str) -> None:
    """Skip unless root; under CI=true a missing root is a failure, not a skip."""
    if os.geteuid() == 0:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"not root in CI: {why} needs root")
    pytest.skip(f"not root: {why} needs root")
