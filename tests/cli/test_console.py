"""What `trainguard run` prints: strategies as what they do, device health in plain words, and a
summary that says what it cannot know."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from rich.console import Console

from trainguard.cli import console
from trainguard.controller import job_controller, policy
from trainguard.faults import levels, process
from trainguard.job import events
from trainguard.launcher import RunReport

JOB = "job"


def _printed(*recorded: events.Event, devices: bool = True) -> str:
    out = io.StringIO()
    observer = console.ConsoleObserver(Console(file=out, width=300), devices=devices)
    for event in recorded:
        observer.event(event)
    return out.getvalue()


@pytest.mark.parametrize(("strategy", "shown"), [
    ("exit", "restart job (exit)"),
    ("retry", "retry step"),
    ("recover-in-place", "restart failed ranks (recover-in-place)"),
    ("recover", "move to spare (recover)"),
    ("dump", "dump"),
])
def test_a_decision_prints_what_the_strategy_does(strategy: str, shown: str) -> None:
    decision = events.DecisionMade(job=JOB, generation=0, strategy=strategy, reason="why",
                                   restarts_left=2)

    assert f"decision: {shown} (why; 2 restarts left)" in _printed(decision)
    assert decision.to_data()["strategy"] == strategy  # the record keeps the original's name


def test_a_failed_recovery_prints_what_was_tried() -> None:
    failed = events.RecoveryFailed(job=JOB, generation=1, fault_rank=0,
                                   strategy="recover-in-place", reason="deadline", seconds=30.0)

    assert "restart failed ranks (recover-in-place) failed after 30.00 s: deadline" in (
        _printed(failed))


@pytest.mark.parametrize(("level", "words"), [
    (levels.Level.NORMAL_NPU, "healthy"),
    (levels.Level.RESTART_REQUEST, "needs restart"),
    (levels.Level.RESTART_BUSINESS, "needs restart"),
    (levels.Level.RESTART_NPU, "needs reset"),
    (levels.Level.FREE_RESTART_NPU, "needs reset"),
    (levels.Level.PRE_SEPARATE_NPU, "isolated"),
    (levels.Level.SEPARATE_NPU, "isolated"),
    (levels.Level.MANUALLY_SEPARATE_NPU, "isolated"),
])
def test_device_health_in_plain_words_next_to_the_level(level: levels.Level,
                                                        words: str) -> None:
    graded = events.DeviceFaultGraded(
        job=JOB, generation=0, rank=1, device="device-1", code="80E3A201", level=str(level),
        reset_policy=str(levels.reset_policy(level)), fault_type="", upgrade_reasons=[])

    assert f"device-1: 80E3A201 -> {words} ({level}, policy " in _printed(graded)


def _level_changed() -> events.DeviceLevelChanged:
    return events.DeviceLevelChanged(job=JOB, device="device-1", before="RestartBusiness",
                                     level="NormalNPU", reset_policy="empty", added=[],
                                     removed=[])


def test_device_level_changes_are_printed_where_there_are_devices() -> None:
    assert ("device-1: needs restart (RestartBusiness) -> healthy (NormalNPU, policy empty)"
            in _printed(_level_changed(), devices=True))


def test_device_level_changes_are_not_printed_without_devices() -> None:
    assert _printed(_level_changed(), devices=False) == ""


def _report(strategy: policy.Strategy, *, recovery: events.RecoveryCompleted | None,
            training_seconds: float | None, resume_step: int) -> RunReport:
    fault = process.ProcessFault(rank=1, pid=11, kind=process.ProcessFaultKind.EXITED,
                                 detected_at=5.0, returncode=1)
    record = job_controller.FaultRecord(fault=fault, generation=0,
                                        decision=policy.Decision(strategy, "because"),
                                        recovery=recovery)
    result = job_controller.JobResult(
        outcome=events.JobOutcome.SUCCEEDED, reason="every rank finished", exit_code=0,
        faults=(record,), generations=2, restarts_used=1, wall_seconds=9.0,
        resume_step=resume_step)
    return RunReport(result=result, run_dir=Path("runs/x"), store_path=Path("runs/x/state.db"),
                     checkpoint_dir=Path("runs/x/checkpoints"), step_seconds=None,
                     snapshot_seconds=None, training_seconds=training_seconds)


def _summary(report: RunReport) -> str:
    out = io.StringIO()
    console.render_summary(report, Console(file=out, width=200))
    return out.getvalue()


def test_a_script_without_a_session_is_said_restarted_and_its_steps_not_reported() -> None:
    text = _summary(_report(policy.Strategy.EXIT, recovery=None, training_seconds=None,
                            resume_step=0))

    assert "restart job " in text
    assert "restart job: exit in the original" in text
    assert "restarted" in text
    assert " no " not in text
    assert "not reported (the script does not use trainguard.train)" in text


def test_a_session_script_reports_its_recovery_and_steps() -> None:
    recovery = events.RecoveryCompleted(
        job=JOB, generation=1, fault_rank=1, strategy="recover-in-place", detect_seconds=0.1,
        recover_seconds=1.5, steps_lost=2, restore_source="memory", restore_step=40)
    text = _summary(_report(policy.Strategy.RECOVER_IN_PLACE, recovery=recovery,
                            training_seconds=8.0, resume_step=50))

    assert "restart failed ranks " in text
    assert "restart failed ranks: recover-in-place in the original" in text
    assert "1.50 s" in text
    assert "not reported" not in text
    assert "steps completed" in text
    assert " 50 " in text


def test_a_failed_job_without_a_session_did_not_restart() -> None:
    text = _summary(_report(policy.Strategy.FAIL, recovery=None, training_seconds=None,
                            resume_step=0))

    assert "restarted" not in text
    assert " no " in text


def test_the_summary_fits_80_columns() -> None:
    recovery = events.RecoveryCompleted(
        job=JOB, generation=1, fault_rank=1, strategy="recover-in-place", detect_seconds=0.01,
        recover_seconds=0.16, steps_lost=0, restore_source="memory and peers", restore_step=5)
    out = io.StringIO()
    console.render_summary(_report(policy.Strategy.RECOVER_IN_PLACE, recovery=recovery,
                                   training_seconds=8.0, resume_step=12),
                           Console(file=out, width=80))
    assert "…" not in out.getvalue()
    assert "restart failed ranks" in out.getvalue()


def test_a_reason_quoting_an_error_with_brackets_is_printed_as_it_is() -> None:
    report = _report(policy.Strategy.FAIL, recovery=None, training_seconds=None, resume_step=0)
    reason = "rank 3 raised RuntimeError: Gloo failed with [/gloo/tcp/pair.cc:152] timed out"
    failed = dataclasses.replace(report.result, outcome=events.JobOutcome.FAILED, reason=reason)

    text = _summary(dataclasses.replace(report, result=failed))

    assert "[/gloo/tcp/pair.cc:152]" in text
