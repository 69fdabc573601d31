"""The report as a Markdown page, with the timeline beside it as an image."""

from __future__ import annotations

import statistics

from trainguard.report import api

__all__ = ["render"]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _figures(report: api.RunReport) -> list[tuple[str, str]]:
    rates = [rate.steps_per_second for rate in report.rates]
    return [
        ("outcome", f"{report.outcome}: {report.reason}" if report.outcome
         else "not finished (or its process was killed)"),
        ("started", report.started),
        ("wall time", _seconds(report.wall_seconds)),
        ("steps completed", "-" if report.steps_completed is None
         else str(report.steps_completed)),
        ("faults", str(len(report.faults))),
        ("recovered", str(sum(fault.recovered is not None for fault in report.faults))),
        ("steps lost", str(report.steps_lost)),
        ("step time (median, rank 0)", _seconds(report.step_seconds)),
        ("steps per second (median of the samples)",
         f"{statistics.median(rates):.2f}" if rates else "-"),
        ("training time", _seconds(report.training_seconds)),
        ("goodput", "-" if report.goodput is None else f"{report.goodput:.1%}"),
    ]


def render(report: api.RunReport, *, timeline: str | None) -> str:
    """The page; ``timeline``: the image's path relative to the page, None for none."""
    lines = [f"# trainguard report: {report.job}", "",
             "| figure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in _figures(report)]
    lines += ["", "Goodput: the share of the training time that produced the final state "
              "(steps completed x median step time / training time).", ""]
    if timeline is not None:
        lines += [f"![timeline: steps per second, faults, detection and recovery]({timeline})",
                  ""]
    lines += ["## Faults", ""]
    if not report.faults:
        return "\n".join([*lines, "None.", ""])
    lines += ["Times are seconds since the first generation started. Detected and recovered: "
              "seconds from the fault; recovered means every rank stepping again.", "",
              "| # | at | rank | fault | step | strategy | detected | recovered | steps lost "
              "| restored from |", "|---|---|---|---|---|---|---|---|---|---|"]
    for number, fault in enumerate(report.faults, 1):
        lines.append(
            f"| {number} | {fault.occurred:.1f} s | {fault.rank} | {fault.kind} | "
            f"{'-' if fault.step is None else fault.step} | {fault.strategy} | "
            f"{_seconds(fault.detect_seconds)} | "
            f"{_seconds(fault.recover_seconds) if fault.recovered is not None else 'no'} | "
            f"{'-' if fault.steps_lost is None else fault.steps_lost} | "
            f"{fault.restored_from or '-'} |")
    return "\n".join([*lines, ""])
