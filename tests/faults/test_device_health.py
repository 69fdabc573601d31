"""Device fault codes and their levels (the original's faultCode.json)."""

from __future__ import annotations

import pytest

from trainguard.faults import device_codes, process
from trainguard.faults.device_codes import Level


def test_the_memory_error_restarts_business_and_allows_in_place() -> None:
    assert device_codes.level_of("80E01801") is Level.RESTART_BUSINESS
    assert device_codes.allows_in_place("80E01801") is True
    assert "80E01801" in device_codes.RETRYABLE_CODES


def test_a_separated_device_does_not_allow_in_place() -> None:
    assert device_codes.level_of("80E3A201") is Level.SEPARATE_NPU
    assert device_codes.allows_in_place("80E3A201") is False


@pytest.mark.parametrize("code", ["00000000", "NOT-A-CODE", "", "80E3A20"])
def test_an_unknown_code_counts_as_separate_npu(code: str) -> None:
    assert device_codes.level_of(code) is Level.SEPARATE_NPU
    assert device_codes.allows_in_place(code) is False


@pytest.mark.parametrize(("code", "level"), [
    ("80e01801", Level.RESTART_BUSINESS),
    ("80e3a201", Level.SEPARATE_NPU),
    ("8c1f860b", Level.NOT_HANDLE_FAULT),
    ("80c98008", Level.RESTART_REQUEST),
])
def test_lower_case_codes_are_looked_up(code: str, level: Level) -> None:
    assert device_codes.level_of(code) is level
    assert device_codes.level_of(code.upper()) is level


def test_lower_case_codes_allow_in_place_as_upper_case_ones() -> None:
    assert device_codes.allows_in_place("80e01801") is True
    assert device_codes.allows_in_place("80e3a201") is False


def test_a_code_in_two_lists_gets_the_more_serious_level() -> None:
    # A2301001 is listed under RestartBusiness and SeparateNPU.
    assert device_codes.level_of("A2301001") is Level.SEPARATE_NPU
    assert device_codes.allows_in_place("A2301001") is False


@pytest.mark.parametrize(("code", "level", "in_place"), [
    ("80C98008", Level.RESTART_REQUEST, True),
    ("81A3880C", Level.SUB_HEALTH_FAULT, True),
    ("80E21007", Level.NOT_HANDLE_FAULT, True),
    ("8C03A000", Level.RESTART_NPU, False),
    ("8C0E4E00", Level.FREE_RESTART_NPU, False),
    ("8118043C", Level.PRE_SEPARATE_NPU, False),
])
def test_each_level_and_whether_it_allows_in_place(code: str, level: Level,
                                                   in_place: bool) -> None:
    assert device_codes.level_of(code) is level
    assert device_codes.allows_in_place(code) is in_place


def test_the_retryable_codes() -> None:
    assert sorted(device_codes.RETRYABLE_CODES) == ["80E01801", "8C1F860B"]
    for code in device_codes.RETRYABLE_CODES:
        assert device_codes.allows_in_place(code) is True
        assert device_codes.allows_in_place(code.lower()) is True


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
