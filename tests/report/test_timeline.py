"""The report's figures from recorded events: where each fault, its detection and its recovery
fall, steps per second between progress samples, steps lost and goodput."""

from __future__ import annotations

import json

import pytest

from tests.report.recording import Recording, decision, fault, recovered, sample, started
from trainguard.job import events
from trainguard.report import api, timeline


def test_a_recovered_fault_is_placed_by_its_monotonic_times_not_by_when_it_was_stored(
) -> None:
    recording = Recording()
    recording.add(started(0), at=500.0)
    sample(recording, 0, 20, at=502.0)
    # detected at 503.0 after 0.25 s; stored 1.5 s later (snapshots completed first)
    recording.add(fault(rank=1, detected_at=503.0, detect_seconds=0.25, last_step=30),
                  at=503.0, delay=1.5)
    recording.add(decision("retry"), at=504.5)
    recording.add(decision("recover-in-place"), at=504.6)  # retry could not be carried out
    recording.add(started(1, restore_step=30), at=504.7)
    recording.add(recovered(rank=1, strategy="recover-in-place", seconds=2.0, lost=1,
                            restore_step=30), at=504.75)
    report = timeline.build(recording.stored)
    (span,) = report.faults
    assert (span.rank, span.kind, span.step) == (1, "crash", 30)
    assert span.strategy == "restart failed ranks (recover-in-place)"  # as the console says
    assert span.occurred == pytest.approx(2.75, abs=0.01)
    assert span.detected == pytest.approx(3.0, abs=0.01)
    assert span.recovered == pytest.approx(4.75, abs=0.01)
    assert span.detect_seconds == pytest.approx(0.25, abs=0.01)
    assert span.recover_seconds == pytest.approx(2.0, abs=0.01)
    assert (span.steps_lost, span.restored_from) == (1, "memory@30")
    assert report.steps_lost == 1
    assert report.started == recording.stored[0].time


def test_a_fault_never_recovered_keeps_its_last_decision_and_no_recovery() -> None:
    recording = Recording()
    recording.add(started(0), at=500.0)
    recording.add(fault(rank=2, detected_at=501.0, detect_seconds=None, last_step=5,
                        injected=None), at=501.0)
    recording.add(decision("fail"), at=501.1)
    recording.add(events.JobFinished(job="j", outcome=events.JobOutcome.FAILED,
                                     reason="no restarts left", generations=1,
                                     restarts_used=0, exit_code=1, wall_seconds=1.2),
                  at=501.2)
    report = timeline.build(recording.stored)
    (span,) = report.faults
    assert (span.kind, span.strategy, span.recovered, span.steps_lost) == ("exited", "fail",
                                                                           None, None)
    assert span.occurred == span.detected  # the time it occurred is unknown
    assert (report.outcome, report.reason, report.wall_seconds) == ("failed",
                                                                    "no restarts left", 1.2)
    assert report.steps_lost == 0


def test_steps_per_second_come_from_the_points_of_one_generation_only() -> None:
    recording = Recording()
    recording.add(started(0), at=500.0)
    sample(recording, 0, 10, at=501.0)  # 10 steps in the first second
    sample(recording, 0, 30, at=503.0)  # 20 steps in 2 s
    sample(recording, 0, 35, at=503.6)  # stored before the fault that came earlier
    # rank 1 crashed in step 34 at 503.4: 4 steps in 0.4 s since the sample before
    recording.add(fault(rank=1, detected_at=503.5, detect_seconds=0.1, last_step=34),
                  at=503.5, delay=0.5)
    recording.add(started(1, restore_step=25), at=504.0)  # back at step 25: no rate across
    sample(recording, 1, 25, at=505.0)  # restoring: no step in 1 s
    sample(recording, 1, 40, at=508.0)  # 15 steps in 3 s
    # the job's end is no point: it is stored after the workers stopped, not at the last step
    recording.add(events.RunMeasured(job="j", steps_completed=50, step_seconds=0.2,
                                     snapshot_seconds=None, training_seconds=10.0), at=510.0)
    report = timeline.build(recording.stored)
    assert [(r.start, r.end, r.generation, r.step, r.steps_per_second) for r in report.rates
            ] == [pytest.approx((0.0, 1.0, 0, 10, 10.0), abs=0.01),
                  pytest.approx((1.0, 3.0, 0, 30, 10.0), abs=0.01),
                  pytest.approx((3.0, 3.4, 0, 34, 10.0), abs=0.01),
                  pytest.approx((3.4, 3.6, 0, 35, 5.0), abs=0.01),
                  pytest.approx((4.0, 5.0, 1, 25, 0.0), abs=0.01),
                  pytest.approx((5.0, 8.0, 1, 40, 5.0), abs=0.01)]


def test_goodput_and_the_step_time_are_the_run_s_own_figures() -> None:
    recording = Recording()
    recording.add(started(0), at=500.0)
    measured = events.RunMeasured(job="j", steps_completed=100, step_seconds=0.1,
                                  snapshot_seconds=0.01, training_seconds=12.5)
    recording.add(measured, at=512.5)
    report = timeline.build(recording.stored)
    assert (report.steps_completed, report.step_seconds, report.training_seconds) == (
        100, 0.1, 12.5)
    assert report.goodput == pytest.approx(0.8) == measured.goodput


def test_a_run_that_has_not_finished_has_no_outcome_and_no_goodput() -> None:
    recording = Recording()
    recording.add(started(0), at=500.0)
    report = timeline.build(recording.stored)
    assert (report.outcome, report.goodput, report.steps_completed, report.faults,
            report.rates) == (None, None, None, (), ())


def test_the_json_holds_the_same_figures() -> None:
    recording = Recording()
    recording.add(started(0), at=500.0)
    recording.add(fault(rank=1, detected_at=501.0, detect_seconds=0.5, last_step=3), at=501.0)
    recording.add(decision("exit"), at=501.1)
    recording.add(recovered(rank=1, strategy="exit", seconds=1.5, lost=2, restore_step=1),
                  at=502.0)
    data = json.loads(json.dumps(timeline.build(recording.stored).to_data()))
    assert data["steps_lost"] == 2
    (fault_data,) = data["faults"]
    assert fault_data["strategy"] == "restart job (exit)"
    assert fault_data["detect_seconds"] == pytest.approx(0.5, abs=0.01)
    assert fault_data["recover_seconds"] == pytest.approx(1.5, abs=0.01)


def test_a_run_without_events_is_an_error() -> None:
    with pytest.raises(api.ReportError, match="recorded no events"):
        timeline.build([])
