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
    """Skip unless root; under CI a missing root is a failure, not a skip (as a missing etcd
    is: tests/conftest.py)."""
    if os.geteuid() != 0:
        need(False, f"{why} needs root")


def need(present: bool, what: str) -> None:
    """Skip, saying ``what`` is missing, when it is not ``present``; under CI, where every
    test must run (it runs as root on a full machine), fail instead."""
    if present:
        return
    if os.environ.get("CI"):
        pytest.fail(f"in CI: {what}")
    pytest.skip(what)
