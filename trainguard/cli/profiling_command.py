"""``trainguard profiling``: switch a running job's lightweight profiling, on its host (the
agent's control socket) or across hosts (the controller's TrainingDataTrace service)."""

from __future__ import annotations

from typing import Annotated

import typer

from trainguard.agent import control, node_agent
from trainguard.cli import controller_access, run_command, runs
from trainguard.job import profiling_switch
from trainguard.proto import grpc_channel, grpc_security, profiling_pb2

__all__ = ["profiling"]


def profiling(
    setting: Annotated[str | None, typer.Argument(metavar="SETTING", help=(
        "light: a mark around each step, forward pass, data-loader fetch and checkpoint save; "
        "heavy: also each gradient all-reduce; off: none; or the original's profilingSwitch "
        "JSON, each of CommunicationOperator, Step, SaveCheckpoint, FP, DataLoader \"on\" or "
        "\"off\" (as in the original, any mark on turns the first four's on). Left out: say "
        "what is on."))] = None,
    *,
    run_dir: runs.RunDir = None,
    run_root: runs.RunRoot = run_command.DEFAULT_RUN_ROOT,
    controller: Annotated[str | None, typer.Option(help=(
        "HOST:PORT of the trainguard controller of a job across hosts: every host of the job "
        "is switched (TrainingDataTrace.ModifyTrainingDataTraceSwitch; needs --job)."))] = None,
    job: Annotated[str | None, typer.Option(help=(
        "With --controller: the job (its --rdzv-id; the original's NAMESPACE/JOB is taken "
        "too)."))] = None,
    follow: Annotated[bool, typer.Option("--follow", help=(
        "With --controller: then print the switch each time it changes, until the job ends "
        "(TrainingDataTrace.SubscribeDataTraceSwitch)."))] = False,
    tls_ca: controller_access.ClientCa = None,
    tls_cert: controller_access.ClientCert = None,
    tls_key: controller_access.ClientKey = None,
    token_file: controller_access.TokenFile = None,
    insecure: controller_access.ClientInsecure = False,
) -> None:
    """Switch the lightweight profiling of a running job, without a restart (D10).

    Each rank appends its marks to RUN_DIR/profiling/TASK/RANK/ on its host (one JSON record a
    line, as the original's training agent writes them; docs/profiling.md). Forward passes,
    data-loader fetches and all-reduces are marked only where the script hands them to its
    session (session.profiling.watch_forward, loader, watch_communication).

    Exit code 0: done; 1: refused (no such job, a host that did not take it, credentials); 2: a
    setting that cannot be read.
    """
    try:
        switch = profiling_switch.ProfilingSwitch.parse(setting) if setting else None
    except profiling_switch.SwitchError as error:
        typer.echo(f"trainguard: {error}", err=True)
        raise typer.Exit(2) from error
    if controller is None:
        if job is not None or follow:
            raise typer.BadParameter("--job and --follow go with --controller (else: --run-dir)")
        directory = runs.resolve(run_dir, run_root, marker=node_agent.AGENT_FILE)
        try:
            typer.echo(control.switch_profiling(directory, switch.to_json() if switch else ""))
        except control.ControlError as error:
            typer.echo(f"trainguard: {error}", err=True)
            raise typer.Exit(1) from error
        return
    if job is None:
        raise typer.BadParameter("--controller needs --job, the job to switch")
    security = controller_access.client_security(
        tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token_file=token_file,
        insecure=insecure)
    answer: profiling_pb2.DataTypeRes | profiling_pb2.DataStatusRes | None = None
    if switch is not None:
        answer = controller_access.ask(grpc_channel.switch_profiling(
            controller, profiling_pb2.DataTypeReq(
                jobNsName=job, profilingSwitch=profiling_pb2.ProfilingSwitch(
                    **switch.fields())), timeout=30.0, security=security))
    elif not follow:
        answer = controller_access.ask(grpc_channel.profiling_status(
            controller, profiling_pb2.DataStatusReq(jobNsName=job), timeout=10.0,
            security=security))
    if answer is not None:
        _say(answer)
    if follow:
        controller_access.ask(_follow(controller, job, security))


def _say(answer: profiling_pb2.DataTypeRes | profiling_pb2.DataStatusRes) -> None:
    typer.echo(f"code {answer.code}: {answer.message}", err=answer.code != 200)
    if answer.code != 200:
        raise typer.Exit(1)


async def _follow(controller: str, job: str, security: grpc_security.ClientSecurity) -> None:
    """The job's switch now, then each time it changes, until the job ends."""
    async for status in grpc_channel.follow_profiling(
            controller, profiling_pb2.ProfilingClientInfo(jobId=job), security=security):
        typer.echo(f"code {status.code}: {status.message}", err=status.code != 200)
        if status.code != 200:
            raise typer.Exit(1)
