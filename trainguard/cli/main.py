"""The ``trainguard`` command. Subcommands stay thin: parse, call the library, set the exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from trainguard import __version__, testing
from trainguard.agent import control, node_agent
from trainguard.cli import (
    config_command,
    demo_command,
    faults_command,
    logs,
    report_command,
    run_command,
    runs,
)
from trainguard.ipc import messages
from trainguard.launcher import STORE_NAME
from trainguard.store import sqlite

__all__ = ["app", "main"]

app = typer.Typer(help="trainguard: resumable training for distributed PyTorch jobs.",
                  no_args_is_help=True, add_completion=False)
fault_app = typer.Typer(help="Inject faults into a running job.", no_args_is_help=True)
app.add_typer(fault_app, name="fault")
app.add_typer(faults_command.faults_app, name="faults")
app.add_typer(config_command.config_app, name="config")

RunDir = Annotated[Path | None, typer.Option(help="The run directory (default: the newest "
                                             "under --run-root).")]
RunRoot = Annotated[Path, typer.Option(envvar="TRAINGUARD_RUN_ROOT",
                                       help="Where run directories are.")]


@app.callback()
def _configure(
    log_level: Annotated[str, typer.Option(envvar="TRAINGUARD_LOG_LEVEL",
                                           help="DEBUG, INFO, WARNING or ERROR.")] = "WARNING",
    log_format: Annotated[logs.LogFormat, typer.Option(
        envvar="TRAINGUARD_LOG_FORMAT", help="text for people, json for log collectors.")
    ] = logs.LogFormat.TEXT,
) -> None:
    try:
        logs.configure(log_level, log_format)
    except ValueError as error:
        raise typer.BadParameter(f"--log-level: {error}") from error


@app.command()
def version() -> None:
    """Print trainguard's version."""
    typer.echo(__version__)


@fault_app.command("inject")
def inject(
    kind: Annotated[messages.InjectionKind, typer.Argument(help=(
        "crash (SIGKILL), hang (SIGSTOP), exception (in the step), memory-error (simulated "
        "device memory error 80E01801, retried in place), link-error (the rank's connections "
        "drop mid-step) or device-error (simulated device fault 80E3A201, which takes the "
        "device out of use)."))],
    rank: Annotated[int, typer.Option(help="The rank to hit.")],
    at_step: Annotated[int | None, typer.Option(help="At the start of this step (needs "
                                                "trainguard.train in the script).")] = None,
    run_dir: RunDir = None,
    run_root: RunRoot = run_command.DEFAULT_RUN_ROOT,
) -> None:
    """Cause a real fault in a worker of a running job."""
    directory = runs.resolve(run_dir, run_root, marker=node_agent.AGENT_FILE)
    try:
        detail = control.inject_fault(directory, rank=rank, kind=kind, at_step=at_step)
    except control.ControlError as error:
        typer.echo(f"trainguard: {error}", err=True)
        raise typer.Exit(1) from error
    typer.echo(detail)


@app.command("events")
def show_events(
    run_dir: RunDir = None,
    run_root: RunRoot = run_command.DEFAULT_RUN_ROOT,
    kind: Annotated[list[str] | None, typer.Option(help="Only events of this kind "
                                                   "(repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Show a run's recorded faults, decisions and recoveries."""
    directory = runs.resolve(run_dir, run_root, marker=STORE_NAME)
    recorded = testing.recorded_events(directory, *(kind or ()))
    if as_json:
        for event in recorded:
            typer.echo(json.dumps({"id": event.id, "time": event.time, "kind": event.kind,
                                   **event.data}))
        return
    table = Table(title=f"events of {directory}", title_justify="left")
    for column in ("time", "kind", "generation", "details"):
        table.add_column(column)
    for event in recorded:
        data = dict(event.data)
        data.pop("job", None)
        generation = str(data.pop("generation", ""))
        details = ", ".join(f"{key}={value}" for key, value in data.items()
                            if value not in (None, "") and key != "error_excerpt")
        table.add_row(event.time, event.kind, generation, details)
    Console().print(table)


@app.command()
def status(
    run_dir: RunDir = None,
    run_root: RunRoot = run_command.DEFAULT_RUN_ROOT,
) -> None:
    """Show a job's state: running or ended, generation, restarts used and left."""
    directory = runs.resolve(run_dir, run_root, marker=STORE_NAME)
    store = sqlite.SqliteStore.open(directory / STORE_NAME, read_only=True)
    try:
        job = directory.name
        document = store.get_document(f"job-status-{job}")
    finally:
        store.close()
    live = (directory / node_agent.AGENT_FILE).exists()
    typer.echo(f"run {job} in {directory}: {'running' if live else 'not running'}")
    if document is not None:
        for key, value in document.data.items():
            typer.echo(f"  {key}: {value}")
        typer.echo(f"  updated: {document.updated}")


@app.command(
    "run", add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(context: typer.Context) -> None:
    """Run a training job like torchrun, with fault detection and recovery (see run --help)."""
    raise typer.Exit(run_command.main(context.args))


app.command("demo")(demo_command.demo)
app.command("report")(report_command.report)


def main() -> None:
    app(prog_name="trainguard")
