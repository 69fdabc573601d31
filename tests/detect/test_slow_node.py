"""Slow-node detection on one host (D11): the original's time-dimension detector on a rank's
step times, its FeatConf, and the step times read back from the profiling records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.detect.slow_node import (
    SlowNodeSettings,
    SlowNodeSettingsError,
    StepTimes,
    TimeDetector,
    Verdict,
)
from trainguard.job.profiling_switch import PRESETS
from trainguard.train import profiling

SETTINGS = SlowNodeSettings()  # the original's defaults: 20 normal steps, 3 in a row, +30%


def _rounds(detector: TimeDetector, steps: list[float], per_round: int) -> list[Verdict | None]:
    return [detector.round(steps[start:start + per_round])
            for start in range(0, len(steps), per_round)]


@given(st.floats(0.01, 10.0), st.integers(1, 8), st.lists(st.floats(0.95, 1.05), min_size=40,
                                                          max_size=120))
def test_steps_within_the_margin_are_never_slow(base: float, per_round: int,
                                                 noise: list[float]) -> None:
    verdicts = _rounds(TimeDetector(SETTINGS), [base * n for n in noise], per_round)
    assert not any(verdict is not None and verdict.slow for verdict in verdicts)


@given(st.floats(0.01, 10.0), st.floats(1.35, 5.0), st.integers(1, 5))
def test_steps_slower_by_more_than_the_share_three_times_running_are_slow(
        base: float, factor: float, per_round: int) -> None:
    detector = TimeDetector(SETTINGS)
    _rounds(detector, [base] * 30, per_round)
    verdict, = _rounds(detector, [base * factor] * 3, 3)
    assert verdict is not None
    assert verdict.slow
    assert verdict.degradation == pytest.approx(factor - 1)


def test_a_rank_that_recovers_at_its_newest_step_is_not_slow() -> None:
    detector = TimeDetector(SETTINGS)
    assert detector.round([1.0] * 22) is None, "a baseline needs 20 + 3 steps"
    assert detector.round([1.0]) == Verdict(False, 0.0)
    assert detector.round([2.0, 2.0, 2.0, 1.0]) == Verdict(False, 0.0)
    assert detector.round([2.0]) == Verdict(False, 0.0), "the two before it: not abnormal now"
    assert detector.round([2.0, 2.0]) == Verdict(True, 1.0)
    assert detector.round([]) is None, "no new step: no verdict"


def test_the_baseline_trims_the_warm_up_and_follows_normal_steps() -> None:
    detector = TimeDetector(SETTINGS)
    detector.round([9.0, 8.0, 7.0] + [1.0] * 17 + [1.0] * 3)
    assert detector.baseline == pytest.approx(1.0), "the three slowest first steps trimmed"
    detector.round([1.2] * 14)
    # 14 kept of the first 20, the 3 after them, then the 14 new ones: each a normal step.
    assert detector.baseline == pytest.approx((17 * 1.0 + 14 * 1.2) / 31)


@pytest.mark.parametrize(("fields", "said"), [
    ({"nSigma": -1}, "FeatConf nSigma must be >= 0, got -1.0"),
    ({"normalNumber": 0}, "FeatConf normalNumber must be > 0, got 0"),
    ({"nConsecAnomaliesSignifySlow": 0}, "nConsecAnomaliesSignifySlow must be >= 1"),
    ({"degradationPercentage": 0}, "degradationPercentage must be > 0"),
    ({"clusterMeanDistance": 1}, "clusterMeanDistance must be > 1"),
    ({"cardOneNode": 0}, "cardOneNode must be > 0"),
    ({"normalNumber": 2.5}, "normalNumber must be a whole number, got 2.5"),
    ({"nSigma": "3"}, "nSigma must be a number, got '3'"),
    ({"nSigmas": 3}, "unknown field 'nSigmas'"),
])
def test_a_feat_conf_that_cannot_be_used_is_refused_naming_the_field(
        fields: dict[str, object], said: str) -> None:
    with pytest.raises(SlowNodeSettingsError, match=said):
        SlowNodeSettings.from_feat_conf(fields)


def test_the_originals_feat_conf_reads_as_its_defaults(tmp_path: Path) -> None:
    path = tmp_path / "FeatConf.json"
    path.write_text(json.dumps({
        "jobName": "job", "jobNamespace": "default", "normalNumber": 20, "nSigma": 3,
        "degradationPercentage": 0.3, "nConsecAnomaliesSignifySlow": 3,
        "nSecondsDoOneDetection": 30, "clusterMeanDistance": 1.3, "cardOneNode": 16,
        "slowNode": 1}))
    assert SlowNodeSettings.load(path) == SETTINGS
    path.write_text("[1]")
    with pytest.raises(SlowNodeSettingsError, match=r"FeatConf\.json: a FeatConf JSON object"):
        SlowNodeSettings.load(path)


def test_step_times_are_read_from_the_step_marks_as_the_files_grow(tmp_path: Path) -> None:
    clock = iter(range(1_000_000_000, 10**12, 250_000_000))
    recorder = profiling.ProfilingRecorder(tmp_path, task="t", rank=0, switch=PRESETS["light"],
                                           clock_ns=lambda: next(clock))
    times = StepTimes(tmp_path / "t" / "0")
    assert times.new() == []
    step = recorder.start("step 7")
    with recorder.mark("forward"):
        pass
    recorder.flush()
    assert times.new() == [], "a step whose end is not written yet"
    recorder.end(step)
    with recorder.mark("step 8"):
        pass
    recorder.flush()
    # A tick each: step 7's start, forward's two, the file's name, then step 7's end.
    assert times.new() == [(7, 1.0), (8, 0.25)]
    assert times.new() == []
