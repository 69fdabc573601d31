"""Slow-node detection on one host (SPEC D11): whether a rank's steps have become slower than
its own baseline, from the step marks of lightweight profiling (:mod:`trainguard.train.profiling`).

The rules are the original's time-dimension detector and its node-level "degradation
perception" (NOTES §5.3, §5.4 step 2), configured as the original's ``FeatConf`` of a
``ras-feature-slownode-<job>`` document:

- baseline: once ``normalNumber + nConsecAnomaliesSignifySlow`` steps are seen, the mean and
  population standard deviation of the first ``normalNumber``, sorted and trimmed by
  ``nConsec`` at each end (3 when ``normalNumber < 4 * nConsec``);
- each round (every ``nSecondsDoOneDetection``), the steps new since the last (padded with the
  newest seen ones to ``nConsec``) are scanned: a step longer than the baseline mean times
  ``1 + degradationPercentage`` is abnormal; any other new step updates the baseline
  (n·mean + x over n + 1, the original's variance rule);
- slow: at least ``nConsec`` abnormal steps, the last ``nConsec`` of them consecutive and
  ending at the newest step; its degradation is their mean over the baseline's, less 1.

Where the original's code departs from its own intent, the intent is followed: the baseline's
steps are not fed to the baseline a second time, and the padding steps are taken oldest first.
The node's verdict is slow when any of its ranks is, at the largest degradation. The space
detector, the communication-domain and host rules (§5.4 step 3 on), and the cluster level are
not built: they need the original's device-side and communication records. ``nSigma``
(unused by the original too, as ``degradationPercentage`` must be above 0),
``clusterMeanDistance`` and ``cardOneNode`` (theirs) are read and checked, not used.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from trainguard.job import profiling_records

__all__ = ["SlowNodeSettings", "SlowNodeSettingsError", "StepTimes", "TimeDetector",
           "Verdict"]


class SlowNodeSettingsError(ValueError):
    """A FeatConf that cannot be used; the message names the field."""


@dataclasses.dataclass(frozen=True)
class SlowNodeSettings:
    normal_number: int = 20
    n_sigma: float = 3.0
    degradation_percentage: float = 0.3
    n_consec: int = 3
    seconds_per_detection: float = 30.0
    cluster_mean_distance: float = 1.3
    card_one_node: int = 16
    slow_node: bool = True

    NAMES: ClassVar[dict[str, str]] = {
        "normalNumber": "normal_number", "nSigma": "n_sigma",
        "degradationPercentage": "degradation_percentage",
        "nConsecAnomaliesSignifySlow": "n_consec",
        "nSecondsDoOneDetection": "seconds_per_detection",
        "clusterMeanDistance": "cluster_mean_distance", "cardOneNode": "card_one_node",
        "slowNode": "slow_node"}
    """The original's FeatConf fields, each to ours (``jobName``, ``jobNamespace`` name the
    job, which is this run's here)."""

    def __post_init__(self) -> None:
        rules = [("nSigma", self.n_sigma >= 0, ">= 0"),
                 ("normalNumber", self.normal_number > 0, "> 0"),
                 ("nConsecAnomaliesSignifySlow", self.n_consec >= 1, ">= 1"),
                 ("nSecondsDoOneDetection", self.seconds_per_detection >= 0, ">= 0"),
                 ("degradationPercentage", self.degradation_percentage > 0, "> 0"),
                 ("clusterMeanDistance", self.cluster_mean_distance > 1, "> 1"),
                 ("cardOneNode", self.card_one_node > 0, "> 0")]
        for name, holds, rule in rules:
            if not holds:
                value = getattr(self, self.NAMES[name])
                raise SlowNodeSettingsError(f"FeatConf {name} must be {rule}, got {value}")

    @classmethod
    def from_feat_conf(cls, fields: Mapping[str, Any]) -> SlowNodeSettings:
        """The original's FeatConf (a field left out: its default).

        Raises:
            SlowNodeSettingsError: an unknown field, a value of the wrong type, or one out of
                range (named).
        """
        values: dict[str, Any] = {}
        for name, value in fields.items():
            if name in ("jobName", "jobNamespace"):
                continue
            if name not in cls.NAMES:
                raise SlowNodeSettingsError(f"FeatConf has an unknown field {name!r}; known: "
                                            f"{', '.join(cls.NAMES)}")
            field = cls.NAMES[name]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise SlowNodeSettingsError(f"FeatConf {name} must be a number, got {value!r}")
            if field in ("normal_number", "n_consec", "card_one_node") and value != int(value):
                raise SlowNodeSettingsError(f"FeatConf {name} must be a whole number, got "
                                            f"{value}")
            values[field] = (bool(value) if field == "slow_node" else
                             int(value) if field in ("normal_number", "n_consec",
                                                     "card_one_node") else float(value))
        return cls(**values)

    @classmethod
    def load(cls, path: Path) -> SlowNodeSettings:
        """Raises: SlowNodeSettingsError naming the file and what is wrong."""
        try:
            fields = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise SlowNodeSettingsError(f"{path}: {error}") from error
        if not isinstance(fields, dict):
            raise SlowNodeSettingsError(f"{path}: a FeatConf JSON object is expected")
        try:
            return cls.from_feat_conf(fields)
        except SlowNodeSettingsError as error:
            raise SlowNodeSettingsError(f"{path}: {error}") from None


@dataclasses.dataclass(frozen=True)
class Verdict:
    slow: bool
    degradation: float  # mean of the last nConsec abnormal steps over the baseline, less 1


class TimeDetector:
    """One series (a rank's step times): :meth:`round` is one detection."""

    def __init__(self, settings: SlowNodeSettings) -> None:
        self._settings = settings
        self._pending: list[float] = []  # before the baseline: every valid step
        self._recent: list[float] = []  # the newest nConsec steps scanned
        self._mean = self._std = 0.0
        self._count = 0

    @property
    def baseline(self) -> float | None:
        return self._mean if self._count else None

    def round(self, steps: Sequence[float]) -> Verdict | None:
        """A detection over ``steps``, the step times new since the last round, oldest first;
        None: no new step, or too few yet for a baseline."""
        valid = [value for value in steps if value > 0 and math.isfinite(value)]
        settings = self._settings
        if not self._count:
            self._pending.extend(valid)
            if len(self._pending) < settings.normal_number + settings.n_consec:
                return None
            self._set_baseline(self._pending[:settings.normal_number])
            window, history = self._pending, settings.normal_number
            self._pending = []
        else:
            if not valid:
                return None
            padding = max(settings.n_consec - len(valid), 0)
            window = self._recent[len(self._recent) - padding:] + valid if padding else valid
            history = len(window) - len(valid)
        abnormal = []
        for index, value in enumerate(window):
            if value > self._mean * (1 + settings.degradation_percentage):
                abnormal.append(index)
            elif index >= history:
                self._update(value)
        self._recent = (self._recent + window[history:])[-settings.n_consec:]
        last = abnormal[-settings.n_consec:]
        slow = (len(abnormal) >= settings.n_consec and last[-1] == len(window) - 1
                and last[-1] - last[0] == settings.n_consec - 1)
        if not slow:
            return Verdict(False, 0.0)
        level = statistics.fmean(window[index] for index in last) / self._mean - 1
        return Verdict(True, level if math.isfinite(level) else 0.0)

    def _set_baseline(self, values: Sequence[float]) -> None:
        consec = self._settings.n_consec
        trim = consec if len(values) >= 4 * consec else 3
        ordered = sorted(values)
        kept = ordered[trim:len(ordered) - trim] or ordered
        self._mean = statistics.fmean(kept)
        self._std = statistics.pstdev(kept)
        self._count = len(kept)

    def _update(self, value: float) -> None:
        """The original's rule (its variance takes the new mean, not Welford's product)."""
        n = self._count
        mean = (n * self._mean + value) / (n + 1)
        self._std = math.sqrt((n * self._std ** 2 + (value - mean) ** 2) / (n + 1))
        self._mean = mean
        self._count = n + 1


class StepTimes:
    """A rank's step times, read from its profiling files as they grow: each ``step N``
    mark's end less its start, in seconds."""

    def __init__(self, rank_dir: Path) -> None:
        self._dir = rank_dir
        self._read: dict[Path, int] = {}  # file -> bytes read (whole lines)
        self._open: dict[int, tuple[int, int]] = {}  # mark id -> (step, start ns)

    def new(self) -> list[tuple[int, float]]:
        """The steps whose marks ended since the last call, by step."""
        found = []
        for path in profiling_records.files(self._dir):
            for line in self._lines(path):
                mark = profiling_records.parse(line)
                if mark is not None:
                    found.extend(self._take(mark))
        return sorted(found)

    def _lines(self, path: Path) -> list[bytes]:
        start = self._read.get(path, 0)
        try:
            with path.open("rb") as records:
                records.seek(start)
                data = records.read()
        except OSError:
            return []
        whole = data[:data.rfind(b"\n") + 1]
        self._read[path] = start + len(whole)
        return whole.splitlines()

    def _take(self, mark: profiling_records.Mark) -> list[tuple[int, float]]:
        if mark.flag == profiling_records.START:
            step = profiling_records.step_of(mark.name)
            if step is not None:
                self._open[mark.id] = (step, mark.timestamp)
            return []
        begun = self._open.pop(mark.id, None) if mark.flag == profiling_records.END else None
        return [] if begun is None else [(begun[0], (mark.timestamp - begun[1]) / 1e9)]
