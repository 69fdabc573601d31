"""The timeline as a PNG: steps per second over time, each fault's detection and recovery shaded.

matplotlib is imported here, when a timeline is drawn (with the Agg backend: no display), so
that the rest of trainguard runs without it.
"""

from __future__ import annotations

import math
from pathlib import Path

from trainguard.report import api

__all__ = ["INSTALL_HINT", "draw"]

INSTALL_HINT = "pip install 'trainguard[report]'"

_DETECTING, _RECOVERING, _UNRECOVERED = "tab:orange", "tab:green", "tab:red"


def _title(report: api.RunReport) -> str:
    goodput = f", goodput {report.goodput:.1%}" if report.goodput is not None else ""
    return (f"trainguard run {report.job}: {report.outcome or 'not finished'}, "
            f"{len(report.faults)} faults, {report.steps_lost} steps lost{goodput}")


def draw(report: api.RunReport, path: Path) -> None:
    """Write the timeline to ``path``.

    Raises:
        api.ReportError: matplotlib is not installed (the message says how to install it).
    """
    try:
        import matplotlib  # noqa: PLC0415 - optional, and heavy: only when drawing
        matplotlib.use("Agg")
        from matplotlib import pyplot  # noqa: PLC0415
    except ImportError as error:
        raise api.ReportError(f"drawing the timeline needs matplotlib: {INSTALL_HINT}"
                              ) from error
    figure, axes = pyplot.subplots(figsize=(12, 5), layout="constrained")
    times: list[float] = []
    rates: list[float] = []
    for sample in report.rates:
        if times and sample.start != times[-1]:
            times.append(math.nan)  # a new generation: no line across the gap
            rates.append(math.nan)
        times += [sample.start, sample.end]
        rates += [sample.steps_per_second, sample.steps_per_second]
    axes.plot(times, rates, color="tab:blue", linewidth=1.5,
              label="steps per second")
    end = max([*times[-1:], *(fault.recovered or fault.detected for fault in report.faults),
               report.training_seconds or 0.0])
    # room above the line for the faults' labels
    highest = max([rate for rate in rates if not math.isnan(rate)], default=0.0) or 1.0
    top = highest * (1.6 if report.faults else 1.15)
    labelled: set[str] = set()

    def label(name: str) -> str | None:
        if name in labelled:
            return None
        labelled.add(name)
        return name

    for number, fault in enumerate(report.faults, 1):
        axes.axvline(fault.occurred, color=_UNRECOVERED, linestyle="--", linewidth=1,
                     label=label("fault"))
        axes.axvspan(fault.occurred, fault.detected, color=_DETECTING, alpha=0.45,
                     label=label("detecting (fault -> detected)"))
        if fault.recovered is not None:
            axes.axvspan(fault.detected, fault.recovered, color=_RECOVERING, alpha=0.35,
                         label=label("recovering (detected -> every rank stepping)"))
            took = f"{fault.recover_seconds:.2f} s, {fault.steps_lost} lost"
        else:
            axes.axvspan(fault.detected, end, color=_UNRECOVERED, alpha=0.12,
                         label=label("not recovered"))
            took = "not recovered"
        at = "" if fault.step is None else f", step {fault.step}"
        # every other label lower, so that the labels of faults close in time do not overlap
        axes.text(fault.occurred, top * (0.98 if number % 2 else 0.84),
                  f" {number}: {fault.kind}, rank {fault.rank}{at}\n {fault.strategy}\n {took}",
                  fontsize=8, va="top", ha="left",
                  bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    axes.set_xlim(0, max(end, 1.0) * 1.02)
    axes.set_ylim(0, top)
    axes.set_xlabel("time since the job started (s)")
    axes.set_ylabel("steps per second (steps/s)")
    axes.set_title(_title(report))
    axes.grid(alpha=0.3)
    axes.legend(loc="lower left", fontsize=8, framealpha=0.9)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
