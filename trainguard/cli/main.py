"""The ``trainguard`` command. Subcommands stay thin: parse, call the library, set the exit code."""

from __future__ import annotations

import inspect
from typing import Annotated

import typer

from trainguard import __version__
from trainguard.agent import control, node_agent
from trainguard.cli import (
    config_command,
    controller_command,
    demo_command,
    devices_command,
    events_command,
    faults_command,
    logs,
    profiling_command,
    report_command,
    run_command,
    runs,
    status_command,
)
from trainguard.faults.device.device_events import Assertion
from trainguard.ipc import messages

__all__ = ["app", "main"]

app = typer.Typer(help="trainguard: resumable training for distributed PyTorch jobs.",
                  no_args_is_help=True)
fault_app = typer.Typer(help="Inject faults into a running job. (To explain a fault code or "
                             "replay a device's history: trainguard faults.)",
                        no_args_is_help=True)
app.add_typer(fault_app, name="fault")
app.add_typer(faults_command.faults_app, name="faults",
              help="Fault codes and levels: explain a code, replay a timeline. (To inject a "
                   "fault into a running job: trainguard fault.)")
app.add_typer(config_command.config_app, name="config")
app.add_typer(devices_command.devices_app, name="devices")

RunDir = runs.RunDir
RunRoot = runs.RunRoot


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"trainguard {__version__}")
        raise typer.Exit()


@app.callback()
def _configure(
    log_level: Annotated[str, typer.Option(envvar="TRAINGUARD_LOG_LEVEL",
                                           help="DEBUG, INFO, WARNING or ERROR.")] = "WARNING",
    log_format: Annotated[logs.LogFormat, typer.Option(
        envvar="TRAINGUARD_LOG_FORMAT", help="text for people, json for log collectors.")
    ] = logs.LogFormat.TEXT,
    _version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print trainguard's version and exit.")] = False,
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
    what: Annotated[str, typer.Argument(metavar="KIND|CODE", help=(
        "Without --device, the kind of fault to cause in a worker: crash (SIGKILL), hang "
        "(SIGSTOP), exception (in the step), memory-error (simulated device memory error "
        "80E01801, retried in place), link-error (the rank's connections drop mid-step) or "
        "device-error (simulated device fault 80E3A201, which takes the device out of use). "
        "With --device, the fault code the simulated device reports (faultCode.json's, e.g. "
        "80E01801)."))],
    *,
    rank: Annotated[int | None, typer.Option(help="The rank to hit (without --device).")
                    ] = None,
    at_step: Annotated[int | None, typer.Option(help="At the start of this step (needs "
                                                "trainguard.train in the script).")] = None,
    device: Annotated[int | None, typer.Option(help=(
        "A simulated device of this host (--device-backend sim): it reports CODE as its "
        "driver would, through the device detector, and the job handles it by its level."))
    ] = None,
    recover: Annotated[bool, typer.Option("--recover", help=(
        "With --device: the device reports CODE gone."))] = False,
    once: Annotated[bool, typer.Option("--once", help=(
        "With --device: a one-off notice of CODE, not a lasting fault."))] = False,
    run_dir: RunDir = None,
    run_root: RunRoot = run_command.DEFAULT_RUN_ROOT,
) -> None:
    """Cause a real fault in a worker of a running job, or on one of its simulated devices."""
    directory = runs.resolve(run_dir, run_root, marker=node_agent.AGENT_FILE)
    try:
        if device is not None:
            if rank is not None or at_step is not None:
                raise typer.BadParameter("--device cannot go with --rank or --at-step")
            if recover and once:
                raise typer.BadParameter("--recover and --once exclude each other")
            assertion = (Assertion.RECOVER if recover else Assertion.ONCE if once
                         else Assertion.OCCUR)
            detail = control.inject_device_fault(directory, device=device, code=what,
                                                 assertion=assertion)
        else:
            if recover or once:
                raise typer.BadParameter("--recover and --once go with --device")
            if rank is None:
                raise typer.BadParameter("--rank is needed (or --device)")
            try:
                kind = messages.InjectionKind(what)
            except ValueError:
                raise typer.BadParameter(
                    f"{what!r} is no kind of fault: one of "
                    f"{', '.join(k.value for k in messages.InjectionKind)} (or a code, with "
                    f"--device)") from None
            detail = control.inject_fault(directory, rank=rank, kind=kind, at_step=at_step)
    except control.ControlError as error:
        typer.echo(f"trainguard: {error}", err=True)
        raise typer.Exit(1) from error
    typer.echo(detail)


@app.command(
    "run", add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(context: typer.Context) -> None:
    """Run a training job like torchrun, with fault detection and recovery (see run --help)."""
    raise typer.Exit(run_command.main(context.args))


app.command("controller")(controller_command.controller)
app.command("profiling")(profiling_command.profiling)
app.command("demo")(demo_command.demo)
app.command("events")(events_command.show_events)
app.command("status")(status_command.status)
app.command("report")(report_command.report)


def _reflow_help(commands: typer.Typer) -> None:
    """Give every command its docstring as help, each paragraph on one line. Rich keeps the
    line breaks of a docstring's paragraphs as they are (typer 0.29), so prose wrapped at the
    source's width came out ragged at the terminal's; on one line, rich wraps it."""
    for command in commands.registered_commands:
        if command.help is None and command.callback is not None:
            command.help = "\n\n".join(" ".join(paragraph.split()) for paragraph in
                                        (inspect.getdoc(command.callback) or "").split("\n\n"))
    for group in commands.registered_groups:
        if group.typer_instance is not None:
            _reflow_help(group.typer_instance)


_reflow_help(app)


def main() -> None:
    app(prog_name="trainguard")
