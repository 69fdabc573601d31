"""The cluster's manual-separation policy (NOTES §2.1, §4.6)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.controller.fault_centre.manual_separation import (
    SOFTWARE_FAULT_WINDOW,
    ManualSeparation,
    SeparationChange,
)
from trainguard.controller.fault_centre.separation_policy import SeparationPolicy
from trainguard.faults.levels import Level

HOUR = 3600.0
DEVICE = "n1/device-0"


def test_policy_defaults_and_ranges() -> None:
    policy = SeparationPolicy()
    assert (policy.enabled, policy.fault_window_hours, policy.fault_threshold,
            policy.fault_free_hours) == (True, 24, 3, 48)
    assert SeparationPolicy(fault_free_hours=-1).fault_free is None
    with pytest.raises(ValueError, match=r"fault_threshold: 51 is out of range \(a whole "
                                         r"number of 1\.\.50\)"):
        SeparationPolicy(fault_threshold=51)


@settings(max_examples=50)
@given(st.integers(-5, 800), st.integers(-5, 60), st.integers(-5, 300))
def test_policy_file_values_out_of_range_take_their_default(window: int, threshold: int,
                                                            free: int) -> None:
    document = {"enabled": True, "separate": {"fault_window_hours": window,
                                              "fault_threshold": threshold},
                "release": {"fault_free_hours": free}}
    policy, problems = SeparationPolicy.from_document(document)
    valid = {"fault_window_hours": 1 <= window <= 720, "fault_threshold": 1 <= threshold <= 50,
             "fault_free_hours": 1 <= free <= 240 or free == -1}
    assert policy.fault_window_hours == (window if valid["fault_window_hours"] else 24)
    assert policy.fault_threshold == (threshold if valid["fault_threshold"] else 3)
    assert policy.fault_free_hours == (free if valid["fault_free_hours"] else 48)
    assert {p.field for p in problems} == {name for name, ok in valid.items() if not ok}


def hit(manual: ManualSeparation, time: float, *, device: str = DEVICE, code: str = "80E18005",
        level: Level = Level.SEPARATE_NPU, job: str | None = None) -> list[SeparationChange]:
    return manual.observe(device=device, code=code, level=level, time=time, job=job)


def test_the_threshold_within_the_window_separates() -> None:
    manual = ManualSeparation()
    assert hit(manual, 0.0) == []
    assert hit(manual, HOUR) == []
    (change,) = hit(manual, 2 * HOUR)
    assert (change.device, change.separated, change.time) == (DEVICE, True, 2 * HOUR)
    assert manual.separated == {DEVICE}
    assert manual.reason(DEVICE) == ("80E18005",)


def test_faults_outside_the_window_do_not_add_up() -> None:
    manual = ManualSeparation()
    for time in (0.0, 13 * HOUR, 25 * HOUR, 38 * HOUR):
        assert hit(manual, time) == []
    assert manual.separated == frozenset()


@pytest.mark.parametrize("level", [Level.NOT_HANDLE_FAULT, Level.SUB_HEALTH_FAULT])
def test_faults_that_need_nothing_do_not_count(level: Level) -> None:
    manual = ManualSeparation(SeparationPolicy(fault_threshold=1))
    assert hit(manual, 0.0, level=level) == []


def test_each_code_counts_apart() -> None:
    manual = ManualSeparation(SeparationPolicy(fault_threshold=2))
    assert hit(manual, 0.0, code="A") == []
    assert hit(manual, 1.0, code="B") == []
    assert len(hit(manual, 2.0, code="A")) == 1


def test_a_disabled_policy_separates_nothing() -> None:
    manual = ManualSeparation(SeparationPolicy(enabled=False, fault_threshold=1))
    assert hit(manual, 0.0) == []
    assert manual.advance(HOUR) == []


def test_one_code_on_two_devices_of_a_job_is_a_software_fault() -> None:
    manual = ManualSeparation(SeparationPolicy(fault_threshold=1))
    hit(manual, 0.0, job="j")
    hit(manual, 10.0, device="n2/device-0", job="j")
    assert manual.advance(SOFTWARE_FAULT_WINDOW - 1) == []
    assert manual.advance(100.0) == []
    assert manual.separated == frozenset()


def test_a_job_fault_counts_after_30_s_with_its_repeats() -> None:
    manual = ManualSeparation(SeparationPolicy(fault_threshold=2))
    hit(manual, 0.0, job="j")
    hit(manual, 5.0, job="j")
    hit(manual, 6.0, device="n2/device-0", code="OTHER", job="j")
    assert manual.advance(29.0) == []
    (change,) = manual.advance(30.0)
    assert change.device == DEVICE
    assert manual.separated == {DEVICE}


def test_released_after_the_fault_free_hours() -> None:
    manual = ManualSeparation(SeparationPolicy(fault_threshold=1, fault_free_hours=2))
    hit(manual, 0.0)
    hit(manual, HOUR, code="OTHER")  # a later fault on it: the time starts again
    assert manual.advance(2.5 * HOUR) == []
    (change,) = manual.advance(3 * HOUR)
    assert (change.separated, change.reason) == (False, "no fault for 2 h")


def test_never_released_by_time_with_minus_one() -> None:
    manual = ManualSeparation(SeparationPolicy(fault_threshold=1, fault_free_hours=-1))
    hit(manual, 0.0)
    assert manual.advance(10_000 * HOUR) == []
    assert manual.separated == {DEVICE}


def test_operator_separate_and_release() -> None:
    manual = ManualSeparation(SeparationPolicy(fault_free_hours=1))
    (change,) = manual.separate(DEVICE, 5.0)
    assert (change.separated, change.reason) == (True, "separated by an operator")
    assert manual.advance(100 * HOUR) == []  # only an operator releases it
    (change,) = manual.release(DEVICE, 6.0)
    assert change.separated is False
    assert manual.separated == frozenset()
    assert manual.release(DEVICE, 7.0) == []


def test_release_starts_the_count_over() -> None:
    manual = ManualSeparation()
    hit(manual, 0.0)
    hit(manual, 1.0)
    manual.release(DEVICE, 2.0)
    assert hit(manual, 3.0) == []


def test_export_and_restore_keep_counts_pending_and_separations() -> None:
    manual = ManualSeparation(SeparationPolicy(fault_threshold=2))
    hit(manual, 0.0)
    hit(manual, 1.0, device="n2/device-1", job="j")
    manual.separate("n3/device-2", 2.0)
    data = json.loads(json.dumps(manual.export()))
    again = ManualSeparation(SeparationPolicy(fault_threshold=2))
    again.restore(data)
    assert again.export() == manual.export()
    assert len(hit(again, 3.0)) == 1  # the count before the restart counts


def test_restore_names_the_bad_field() -> None:
    manual = ManualSeparation()
    with pytest.raises(ValueError, match=r"manual separation: field 'counts' is missing"):
        manual.restore({"separated": {}, "pending": {}})
