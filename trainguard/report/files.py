"""Writing a run's report to disk: ``report.md`` and the ``timeline.png`` it shows."""

from __future__ import annotations

from pathlib import Path

from trainguard.report import api, markdown, plot

__all__ = ["PAGE", "TIMELINE", "write"]

PAGE = "report.md"
TIMELINE = "timeline.png"


def write(report: api.RunReport, directory: Path) -> tuple[Path, Path]:
    """Write the page and its timeline into ``directory``; returns their paths.

    Raises:
        api.ReportError: matplotlib is missing or ``directory`` cannot be written.
    """
    page, timeline = directory / PAGE, directory / TIMELINE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        plot.draw(report, timeline)
        page.write_text(markdown.render(report, timeline=TIMELINE))
    except OSError as error:
        raise api.ReportError(f"cannot write the report into {directory}: {error}") from error
    return page, timeline
