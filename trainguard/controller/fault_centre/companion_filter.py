"""Codes that come with a memory error are not faults of their own (NOTES §4.6).

An uncorrectable memory error (UCE, ``80E01801``) makes the chip's vector and cube cores
report ``80C98009`` and ``80CB8009`` as well. The original's fault centre drops such a
companion when a UCE of the same device lies within 5 s of it, before or after; until 5 s have
passed since the companion it cannot know, so it holds the companion back (shows it to no
job), and after that a companion without a UCE near it is a fault like any other.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = ["COMPANION_CODES", "COMPANION_WINDOW", "UCE_CODE", "Verdict", "companion_verdict"]

UCE_CODE = 0x80E01801
COMPANION_CODES = frozenset({0x80C98009, 0x80CB8009})
COMPANION_WINDOW = 5.0
"""Seconds between a UCE and its companion, either way (the original's
DiagnosisAccompanyTimeout)."""


class Verdict(enum.Enum):
    PASS = "pass"  # a fault of its own: jobs see it
    HOLD = "hold"  # undecided yet: hidden for now
    DROP = "drop"  # a UCE's companion: never shown


def companion_verdict(fault_time: float, uce_times: Iterable[float], now: float) -> Verdict:
    """What becomes of a companion code raised at ``fault_time`` on a device whose UCEs were
    raised at ``uce_times``, judged at ``now`` (all seconds)."""
    if any(abs(uce - fault_time) <= COMPANION_WINDOW for uce in uce_times):
        return Verdict.DROP
    if fault_time >= now - COMPANION_WINDOW:
        return Verdict.HOLD
    return Verdict.PASS
