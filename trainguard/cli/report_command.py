"""``trainguard report``: a run's report to keep, as Markdown with a PNG timeline, or JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from trainguard import testing
from trainguard.cli import runs
from trainguard.cli.run_command import DEFAULT_RUN_ROOT
from trainguard.launcher import STORE_NAME
from trainguard.report import api, files, timeline
from trainguard.store import api as store_api

__all__ = ["report", "write_report"]


def _run_directory(run: str | None, run_root: Path) -> Path:
    if run is None:
        return runs.resolve(None, run_root, marker=STORE_NAME)
    for directory in (Path(run), run_root / run):
        if (directory / STORE_NAME).is_file():
            return directory
    raise typer.BadParameter(f"{run!r} is neither a run directory nor a run id under "
                             f"{run_root} (no {STORE_NAME} in either)", param_hint="RUN")


def _build(run_dir: Path) -> api.RunReport:
    """Raises: api.ReportError for a store that cannot be read or holds no events."""
    try:
        return timeline.build(testing.recorded_events(run_dir))
    except store_api.StoreError as error:
        raise api.ReportError(str(error)) from error


def write_report(run_dir: Path, output: Path | None = None) -> tuple[Path, Path]:
    """Write the report of the run in ``run_dir`` into ``output`` (default: ``run_dir``);
    returns the page's and the timeline's paths.

    Raises:
        api.ReportError: the events cannot be read, or the files cannot be written.
    """
    return files.write(_build(run_dir), output or run_dir)


def report(
    run: Annotated[str | None, typer.Argument(
        help="A run directory or run id (default: the newest run under --run-root).")] = None,
    run_root: Annotated[Path, typer.Option(envvar="TRAINGUARD_RUN_ROOT",
                                           help="Where run directories are.")
                        ] = DEFAULT_RUN_ROOT,
    output: Annotated[Path | None, typer.Option(
        help="Where to write report.md and timeline.png (default: the run directory).")
    ] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the report's figures as JSON instead of writing files.")
    ] = False,
) -> None:
    """Write a run's report: faults, detection and recovery, steps lost, goodput, timeline."""
    run_dir = _run_directory(run, run_root)
    try:
        if as_json:
            typer.echo(json.dumps(_build(run_dir).to_data(), indent=1))
            return
        page, picture = write_report(run_dir, output)
    except api.ReportError as error:
        typer.echo(f"trainguard report: {run_dir}: {error}", err=True)
        raise typer.Exit(1) from error
    typer.echo(f"report:   {page}")
    typer.echo(f"timeline: {picture}")
