"""Device fault codes, their levels, and how a process fault's device level decides handling."""

from __future__ import annotations

import dataclasses

import pytest

from trainguard.faults import process
from trainguard.faults.device import device_health, fault_codes
from trainguard.faults.levels import Level


def _level(code: str) -> Level:
    return fault_codes.default_table().level_of(fault_codes.code_key(code))


def test_the_memory_error_restarts_business_allows_in_place_and_is_retried() -> None:
    assert _level("80E01801") is Level.RESTART_BUSINESS
    assert device_health.allows_in_place(_level("80E01801")) is True
    assert fault_codes.code_key("80E01801") in device_health.RETRY_CODES


def test_a_separated_device_does_not_allow_in_place() -> None:
    assert _level("80E3A201") is Level.SEPARATE_NPU
    assert device_health.allows_in_place(_level("80E3A201")) is False


@pytest.mark.parametrize("code", ["00000000", "NOT-A-CODE", "80E3A20"])
def test_an_unknown_code_of_unknown_severity_counts_as_separate_npu(code: str) -> None:
    assert _level(code) is Level.SEPARATE_NPU


@pytest.mark.parametrize(("code", "level"), [
    ("80e01801", Level.RESTART_BUSINESS),
    ("80e3a201", Level.SEPARATE_NPU),
    ("8c1f860b", Level.NOT_HANDLE_FAULT),
    ("80c98008", Level.RESTART_REQUEST),
    ("xid-79", Level.SEPARATE_NPU),
])
def test_lower_case_codes_are_looked_up(code: str, level: Level) -> None:
    assert _level(code) is level
    assert _level(code.upper()) is level


def test_a_code_in_two_lists_gets_the_more_serious_level() -> None:
    # A2301001 is listed under RestartBusiness and SeparateNPU.
    assert _level("A2301001") is Level.SEPARATE_NPU


@pytest.mark.parametrize(("code", "level", "in_place"), [
    ("80C98008", Level.RESTART_REQUEST, True),
    ("81A3880C", Level.SUB_HEALTH_FAULT, True),
    ("80E21007", Level.NOT_HANDLE_FAULT, True),
    ("8C03A000", Level.RESTART_NPU, False),
    ("8C0E4E00", Level.FREE_RESTART_NPU, False),
    ("8118043C", Level.PRE_SEPARATE_NPU, False),
    ("81078603", Level.NOT_HANDLE_FAULT, True),  # a network code, judged apart
])
def test_each_level_and_whether_it_allows_in_place(code: str, level: Level,
                                                   in_place: bool) -> None:
    assert _level(code) is level
    assert device_health.allows_in_place(level) is in_place


def test_the_retry_codes() -> None:
    assert sorted(device_health.RETRY_CODES) == [0x80E01801, 0x8C1F860B]


# --- how a process fault's code decides retry and in-place --------------------------------------


def _fault(*, kind: process.ProcessFaultKind = process.ProcessFaultKind.RAISED,
           code: str = "", detail: str = "") -> process.ProcessFault:
    return process.ProcessFault(rank=2, pid=77, kind=kind, detected_at=1.0, code=code,
                                alive=True, detail=detail)


@pytest.mark.parametrize(("kind", "code", "retryable", "in_place"), [
    (process.ProcessFaultKind.RAISED, "", False, True),
    (process.ProcessFaultKind.RAISED, "80E01801", True, True),
    (process.ProcessFaultKind.RAISED, "80e01801", True, True),
    (process.ProcessFaultKind.RAISED, "8C1F860B", True, True),
    (process.ProcessFaultKind.RAISED, "80C98008", False, True),
    (process.ProcessFaultKind.RAISED, "80E3A201", False, False),
    (process.ProcessFaultKind.RAISED, "A2301001", False, False),
    (process.ProcessFaultKind.RAISED, "00000000", False, False),
    (process.ProcessFaultKind.RAISED, "XID-79", False, False),
    (process.ProcessFaultKind.COMMUNICATION, "", True, True),
    (process.ProcessFaultKind.COMMUNICATION, "80E3A201", True, False),
    (process.ProcessFaultKind.EXITED, "", False, True),
    (process.ProcessFaultKind.HUNG, "", False, True),
])
def test_process_fault_retryable_and_in_place(kind: process.ProcessFaultKind, code: str,
                                              retryable: bool, in_place: bool) -> None:
    fault = _fault(kind=kind, code=code)

    assert fault.retryable is retryable
    assert fault.in_place is in_place


def test_process_fault_defaults_have_no_code_and_no_process() -> None:
    fault = process.ProcessFault(rank=0, pid=1, kind=process.ProcessFaultKind.EXITED,
                                 detected_at=0.0, returncode=1)

    assert (fault.code, fault.alive) == ("", False)


def test_a_communication_fault_describes_the_lost_collective() -> None:
    assert _fault(kind=process.ProcessFaultKind.COMMUNICATION).describe() == (
        "rank 2 (pid 77) lost its collective")
    assert _fault(kind=process.ProcessFaultKind.COMMUNICATION,
                  detail="allreduce timed out").describe() == (
        "rank 2 (pid 77) lost its collective (allreduce timed out)")


def test_an_escalated_device_level_overrides_the_codes_level() -> None:
    fault = dataclasses.replace(_fault(code="80E01801"), level=Level.MANUALLY_SEPARATE_NPU)

    assert (fault.retryable, fault.in_place) == (False, False)
    assert _fault(code="80E01801").device_level is Level.RESTART_BUSINESS
