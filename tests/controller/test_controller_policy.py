"""The recovery decision: a pure function of what the controller saw."""

from __future__ import annotations

import dataclasses
import math
import re
import signal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.controller import policy
from trainguard.faults import process

SETTINGS = policy.RecoverySettings(max_restarts=3, crash_loop_window=10.0,
                                   crash_loop_settle=3.0, snapshot_grace=2.0)


def _fault(rank: int = 0, *, kind: process.ProcessFaultKind = process.ProcessFaultKind.EXITED,
           returncode: int | None = 1, detected_at: float = 2.0,
           last_step: int | None = None) -> process.ProcessFault:
    return process.ProcessFault(rank=rank, pid=1000 + rank, kind=kind, detected_at=detected_at,
                                returncode=returncode, last_step=last_step)


def _context(fault: process.ProcessFault | None = None, *, age: float = 2.0,
             progressed: bool = False, world_size: int = 4, failed_ranks: int = 4,
             restarts_left: int = 3) -> policy.FaultContext:
    fault = fault or _fault()
    failed = [fault] + [_fault(rank) for rank in range(1, failed_ranks)]
    return policy.FaultContext(fault=fault, age=age, progressed=progressed,
                               world_size=world_size, failed=failed[:failed_ranks],
                               restarts_left=restarts_left)


# --- settings -----------------------------------------------------------------------------------


def test_default_settings() -> None:
    settings = policy.RecoverySettings()

    assert (settings.max_restarts, settings.crash_loop_window, settings.crash_loop_settle,
            settings.snapshot_grace) == (0, 10.0, 3.0, 2.0)


@pytest.mark.parametrize(("changes", "text"), [
    ({"max_restarts": -1}, "max-restarts must be >= 0, got -1"),
    ({"fault_retry_times": -1}, "fault-retry-times must be >= 0, got -1"),
    ({"crash_loop_window": -0.5}, "crash-loop-window must be >= 0 seconds, got -0.5"),
    ({"crash_loop_settle": -1.0}, "crash-loop-settle must be >= 0 seconds, got -1.0"),
    ({"snapshot_grace": -2.0}, "snapshot-grace must be >= 0 seconds, got -2.0"),
])
def test_settings_validation_names_flag_value_and_rule(changes: dict[str, float],
                                                        text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(text)) as caught:
        policy.RecoverySettings(**changes)  # type: ignore[arg-type]

    assert str(caught.value) == text


@pytest.mark.parametrize("name", ["crash_loop_window", "crash_loop_settle", "snapshot_grace"])
def test_settings_reject_nan_durations(name: str) -> None:
    # NaN is not >= 0; accepted, a NaN window silently disables crash-loop detection
    # (age <= nan is always False) and a NaN grace reaches asyncio timeouts.
    flag = name.replace("_", "-")

    with pytest.raises(ValueError, match=re.escape(f"{flag} must be >= 0 seconds, got nan")):
        policy.RecoverySettings(**{name: math.nan})  # type: ignore[arg-type]


def test_settings_accept_zero() -> None:
    settings = policy.RecoverySettings(max_restarts=0, crash_loop_window=0.0,
                                       crash_loop_settle=0.0, snapshot_grace=0.0)

    assert settings.max_restarts == 0


# --- decide -------------------------------------------------------------------------------------


def test_restart_while_the_budget_lasts() -> None:
    decision = policy.decide(SETTINGS, _context(progressed=True, restarts_left=1))

    assert decision.strategy is policy.Strategy.EXIT
    assert decision.reason.startswith("exited process: restart every process (not retry step")


def test_budget_exhausted_fails_naming_max_restarts_and_the_fault() -> None:
    fault = _fault(2, kind=process.ProcessFaultKind.SIGNALED, returncode=-signal.SIGSEGV,
                   last_step=17)

    decision = policy.decide(SETTINGS, _context(fault, progressed=True, restarts_left=0))

    assert decision.strategy is policy.Strategy.FAIL
    assert decision.reason == (
        "retry budget exhausted (max-restarts 3); "
        "last fault: rank 2 (pid 1002) failed with SIGSEGV at step 17")


def test_budget_exhausted_with_no_restarts_configured() -> None:
    settings = policy.RecoverySettings(max_restarts=0)

    decision = policy.decide(settings, _context(age=60.0, restarts_left=0))

    assert decision.strategy is policy.Strategy.FAIL
    assert "max-restarts 0" in decision.reason


@pytest.mark.parametrize(("changes", "fails"), [
    ({}, True),
    ({"code": "80E01801"}, False),  # a device fault: handled, whatever the retries left
    ({"kind": process.ProcessFaultKind.HOST_LOST}, False),
])
def test_unconditional_retries_spent_fail_only_a_fault_with_no_hardware_cause(
        changes: dict[str, Any], fails: bool) -> None:
    fault = dataclasses.replace(_fault(last_step=9), **changes)
    context = dataclasses.replace(_context(fault, progressed=True), retries_left=0)

    decision = policy.decide(policy.RecoverySettings(max_restarts=3, fault_retry_times=2),
                             context)

    assert (decision.strategy is policy.Strategy.FAIL) is fails
    if fails:
        assert decision.reason.startswith(
            "unconditional retry budget exhausted (fault-retry-times 2: failures with no "
            "hardware cause); last fault: rank 0")


def test_crash_loop_fails_even_with_restarts_left() -> None:
    decision = policy.decide(SETTINGS, _context(age=1.5, restarts_left=3))

    assert decision == policy.Decision(policy.Strategy.FAIL, (
        "crash loop: all 4 ranks failed within 1.5 s of the start, before completing a step; "
        "not retried"))


def test_crash_loop_at_exactly_the_window() -> None:
    decision = policy.decide(SETTINGS, _context(age=10.0))

    assert decision.strategy is policy.Strategy.FAIL
    assert decision.reason.startswith("crash loop")


def test_crash_loop_is_reported_before_the_budget() -> None:
    decision = policy.decide(SETTINGS, _context(age=1.0, restarts_left=0))

    assert decision.reason.startswith("crash loop: all 4 ranks")


@pytest.mark.parametrize(("context", "why"), [
    (_context(age=10.01), "older than the window"),
    (_context(progressed=True), "a step completed"),
    (_context(_fault(kind=process.ProcessFaultKind.HUNG, returncode=None)), "hung"),
    (_context(_fault(kind=process.ProcessFaultKind.SIGNALED, returncode=-signal.SIGKILL)),
     "SIGKILL"),
    (_context(failed_ranks=3), "not every rank failed"),
])
def test_not_a_crash_loop(context: policy.FaultContext, why: str) -> None:
    decision = policy.decide(SETTINGS, context)

    assert decision.strategy is policy.Strategy.EXIT, why
    assert "crash loop" not in decision.reason


def test_hung_fault_restart_reason_names_the_kind() -> None:
    fault = _fault(kind=process.ProcessFaultKind.HUNG, returncode=None)

    assert policy.decide(SETTINGS, _context(fault)).reason == (
        "hung process: restart every process (not retry step, restart failed ranks, move to "
        "spare: the script does not use session.run; not dump: a failed rank has no healthy "
        "data-parallel replica)")


def test_not_a_crash_loop_still_spends_the_budget() -> None:
    fault = _fault(kind=process.ProcessFaultKind.SIGNALED, returncode=-9)

    decision = policy.decide(SETTINGS, _context(fault, restarts_left=0))

    assert decision.strategy is policy.Strategy.FAIL
    assert decision.reason.startswith("retry budget exhausted (max-restarts 3)")


@pytest.mark.parametrize(("context", "expected"), [
    (_context(age=0.0), True),
    (_context(age=10.0), True),
    (_context(age=10.5), False),
    (_context(progressed=True), False),
    (_context(_fault(kind=process.ProcessFaultKind.HUNG, returncode=None)), False),
    (_context(_fault(kind=process.ProcessFaultKind.SIGNALED, returncode=-9)), False),
    (_context(_fault(kind=process.ProcessFaultKind.SIGNALED, returncode=-15)), True),
    (_context(_fault(kind=process.ProcessFaultKind.RAISED, returncode=None)), True),
    # Worth waiting for the others even when only one rank failed so far.
    (_context(failed_ranks=1), True),
])
def test_may_be_crash_loop(context: policy.FaultContext, expected: bool) -> None:
    assert policy.may_be_crash_loop(SETTINGS, context) is expected


def test_zero_window_means_no_crash_loop_after_the_start() -> None:
    settings = policy.RecoverySettings(max_restarts=1, crash_loop_window=0.0)

    assert not policy.may_be_crash_loop(settings, _context(age=0.001))
    assert policy.decide(settings, _context(age=0.001)).strategy is policy.Strategy.EXIT


# --- properties ---------------------------------------------------------------------------------

fault_kinds = st.sampled_from(process.ProcessFaultKind)
returncodes = st.none() | st.integers(min_value=-64, max_value=255)
ages = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@st.composite
def contexts(draw: st.DrawFn, *, progressed: bool | None,
             restarts_left: st.SearchStrategy[int]) -> policy.FaultContext:
    world_size = draw(st.integers(min_value=1, max_value=64))
    fault = _fault(draw(st.integers(0, world_size - 1)), kind=draw(fault_kinds),
                   returncode=draw(returncodes))
    failed = [fault] + [_fault(rank) for rank in range(draw(st.integers(0, world_size)))]
    return policy.FaultContext(
        fault=fault, age=draw(ages),
        progressed=draw(st.booleans()) if progressed is None else progressed,
        world_size=world_size, failed=failed, restarts_left=draw(restarts_left))


@st.composite
def recovery_settings(draw: st.DrawFn) -> policy.RecoverySettings:
    return policy.RecoverySettings(
        max_restarts=draw(st.integers(0, 100)),
        crash_loop_window=draw(st.floats(min_value=0.0, max_value=1e6)),
        crash_loop_settle=draw(st.floats(min_value=0.0, max_value=100.0)),
        snapshot_grace=draw(st.floats(min_value=0.0, max_value=100.0)))


@given(settings=recovery_settings(),
       context=contexts(progressed=True, restarts_left=st.integers(1, 1000)))
def test_progress_with_budget_left_always_restarts(settings: policy.RecoverySettings,
                                                   context: policy.FaultContext) -> None:
    decision = policy.decide(settings, context)

    assert decision.strategy is policy.Strategy.EXIT
    assert decision.reason.startswith(f"{context.fault.kind} process: restart every process (")
    assert "the script does not use session.run" in decision.reason


@given(settings=recovery_settings(),
       context=contexts(progressed=True, restarts_left=st.integers(1, 1000)),
       retries_left=st.none() | st.integers(-5, 5), code=st.sampled_from(["", "80E01801"]))
def test_unconditional_retries_bound_only_failures_with_no_hardware_cause(
        settings: policy.RecoverySettings, context: policy.FaultContext,
        retries_left: int | None, code: str) -> None:
    fault = dataclasses.replace(context.fault, code=code)
    context = dataclasses.replace(context, fault=fault, retries_left=retries_left)

    decision = policy.decide(settings, context)

    spent = retries_left is not None and retries_left <= 0 and not fault.hardware_cause
    assert (decision.strategy is policy.Strategy.FAIL) is spent
    assert decision.reason.startswith("unconditional retry budget exhausted") is spent


@given(settings=recovery_settings(),
       context=contexts(progressed=None, restarts_left=st.integers(-1000, 0)))
def test_no_budget_left_always_fails(settings: policy.RecoverySettings,
                                     context: policy.FaultContext) -> None:
    decision = policy.decide(settings, context)

    assert decision.strategy is policy.Strategy.FAIL
    assert decision.reason.startswith(("crash loop", "retry budget exhausted"))


@pytest.mark.parametrize(("text", "expected"), [
    ("retry-step,restart-failed-ranks", ("retry", "recover-in-place", "exit")),
    ("move-to-spare,dump", ("recover", "dump", "exit")),
    ("restart-job", ("exit",)),
    ("retry,recover-in-place,recover,dump,exit", ("retry", "recover-in-place", "recover",
                                                  "dump", "exit")),
])
def test_recover_strategy_takes_the_new_words_and_the_original_names(
        text: str, expected: tuple[str, ...]) -> None:
    assert policy.parse_strategies(text) == tuple(policy.Strategy(name) for name in expected)


def test_a_plain_script_is_told_why_no_process_survives() -> None:
    decision = policy.decide(SETTINGS, _context(progressed=True, restarts_left=1))

    assert ("not retry step, restart failed ranks, move to spare: the script does not use "
            "session.run") in decision.reason
