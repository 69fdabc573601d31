"""The UCE companion filter and retry hiding, with the original's windows (NOTES §4.6)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.controller.fault_centre.companion_filter import Verdict, companion_verdict
from trainguard.controller.fault_centre.retry_hiding import RecoveryReport, retry_hidden


@pytest.mark.parametrize(("fault", "uces", "now", "verdict"), [
    (100.0, [98.0], 101.0, Verdict.DROP),  # UCE 2 s before
    (100.0, [105.0], 106.0, Verdict.DROP),  # UCE exactly 5 s after
    (100.0, [94.9], 101.0, Verdict.HOLD),  # UCE too early, 5 s not over yet
    (100.0, [], 105.0, Verdict.HOLD),  # exactly 5 s: still undecided
    (100.0, [], 105.1, Verdict.PASS),
    (100.0, [90.0, 200.0], 120.0, Verdict.PASS),
])
def test_companion_verdict(fault: float, uces: list[float], now: float,
                           verdict: Verdict) -> None:
    assert companion_verdict(fault, uces, now) is verdict


@settings(max_examples=50)
@given(st.floats(0, 1e6), st.floats(-20, 20), st.floats(0, 100))
def test_a_uce_within_5_s_always_drops(fault: float, offset: float, later: float) -> None:
    verdict = companion_verdict(fault, [fault + offset], fault + later)
    assert (verdict is Verdict.DROP) == (abs(offset) <= 5.0)
    if abs(offset) > 5.0:
        assert verdict is (Verdict.HOLD if later <= 5.0 else Verdict.PASS)


@pytest.mark.parametrize(("now", "report", "hidden"), [
    (110.0, None, True),  # JobReportRecoverTimeout: 10 s
    (110.5, None, False),
    (125.0, RecoveryReport(108.0), True),  # recovering, within 30 s of its report
    (138.0, RecoveryReport(108.0), True),
    (138.5, RecoveryReport(108.0), False),  # no completion within JobReportCompleteTimeout
    (500.0, RecoveryReport(108.0, 130.0), True),  # completed in time: the retry cleared it
    (500.0, RecoveryReport(108.0, 139.0), False),  # completed too late
    (500.0, RecoveryReport(111.0, 112.0), False),  # reported after the first 10 s
    (500.0, RecoveryReport(50.0, 60.0), False),  # an earlier fault's report
])
def test_retry_hidden(now: float, report: RecoveryReport | None, hidden: bool) -> None:
    assert retry_hidden(100.0, now, report) is hidden


@settings(max_examples=50)
@given(st.floats(0, 1e6), st.floats(0, 10), st.floats(0, 30), st.floats(30.01, 1e4))
def test_a_retry_completed_in_time_stays_hidden(fault: float, recover: float,
                                                complete: float, later: float) -> None:
    report = RecoveryReport(fault + recover, fault + recover + complete)
    assert retry_hidden(fault, fault + recover + later, report)
    assert not retry_hidden(fault, fault + recover + later, RecoveryReport(fault + recover))
