"""``trainguard run``: torchrun's command line, plus trainguard's own options in their own section.

Parse, build settings, call :func:`trainguard.launcher.run`, map the result to an exit code.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from trainguard import launcher
from trainguard.agent import checkpoint_memory, node_agent, worker_output, workers
from trainguard.cli import console as console_output
from trainguard.cli import settings_flags, torchrun_flags
from trainguard.controller import policy
from trainguard.detect import heartbeat
from trainguard.ipc import messages

__all__ = ["DEFAULT_RUN_ROOT", "build_settings", "command"]

logger = logging.getLogger(__name__)

DEFAULT_RUN_ROOT = Path("trainguard-runs")

GROUPS = (
    settings_flags.SettingsGroup("heartbeat", heartbeat.HeartbeatSettings, prefix="heartbeat-"),
    settings_flags.SettingsGroup("checkpoint", checkpoint_memory.CheckpointSettings),
    settings_flags.SettingsGroup("recovery", policy.RecoverySettings,
                                 exclude=frozenset({"max_restarts"})),
    settings_flags.SettingsGroup("run", launcher.RunSettings, exclude=frozenset(
        {"agent", "heartbeat", "checkpoint", "recovery", "signals"})),
    settings_flags.SettingsGroup("agent", node_agent.AgentSettings, exclude=frozenset(
        {"nproc_per_node", "program", "run_id", "run_dir", "role", "master_addr",
         "master_port", "max_restarts", "monitor_interval", "shutdown_timeout", "output",
         "fault_plan"})),
)

_OWN_OPTIONS = (
    click.Option(["--run-root", "own__run_root"], type=click.Path(path_type=Path),
                 default=DEFAULT_RUN_ROOT, show_default=True, envvar="TRAINGUARD_RUN_ROOT",
                 show_envvar=True,
                 help="Directory that holds one run directory per job (state store, logs, "
                      "checkpoints)."),
    click.Option(["--inject", "own__inject"], default="", envvar="TRAINGUARD_INJECT",
                 show_envvar=True,
                 help="Faults to inject, for demonstrations and tests: KIND:RANK:STEP[,...], "
                      "KIND one of crash, hang, exception (e.g. crash:1:60,hang:2:150)."),
)


class RunCommand(click.Command):
    """Shows torchrun's options and trainguard's own in separate sections."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"torchrun options": [],
                                                      "trainguard options": []}
        for param in self.get_params(ctx):
            if isinstance(param, click.Argument):
                continue
            record = param.get_help_record(ctx)
            if record is None:
                continue
            own = param.name is not None and "__" in param.name
            sections["trainguard options" if own else "torchrun options"].append(record)
        for title, rows in sections.items():
            with formatter.section(title):
                formatter.write_dl(rows)


def _torchrun_options() -> list[click.Option]:
    options = []
    for flag in torchrun_flags.FLAGS:
        help_text = flag.help + (f" [no effect: {flag.ignored}]" if flag.ignored else "")
        if flag.type is None:
            options.append(click.Option([*flag.names, flag.dest], is_flag=True,
                                        envvar=flag.env, help=help_text))
        else:
            default = ",".join(flag.default) if isinstance(flag.default, list) else flag.default
            options.append(click.Option(
                [*flag.names, flag.dest], type=flag.type, default=default, envvar=flag.env,
                show_default=default not in (None, ""), help=help_text))
    return options


def _nproc(value: str) -> int:
    if value.isdigit() and int(value) > 0:
        return int(value)
    if value in ("gpu", "auto"):
        gpus = _gpu_count()
        if gpus:
            return gpus
        if value == "gpu":
            raise click.UsageError("--nproc-per-node gpu: no NVIDIA GPU found on this host")
    if value in ("cpu", "auto"):
        return os.cpu_count() or 1
    raise click.UsageError(
        f"--nproc-per-node: {value!r} is not a positive number, 'cpu', 'gpu' or 'auto'")


def _gpu_count() -> int:
    try:
        import pynvml  # noqa: PLC0415 - the NVML client only where GPUs are asked about

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0


def _fault_plan(text: str) -> tuple[node_agent.PlannedFault, ...]:
    plan = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            kind, rank, step = part.split(":")
            plan.append(node_agent.PlannedFault(messages.InjectionKind(kind), int(rank), int(step)))
        except ValueError:
            raise click.UsageError(
                f"--inject: {part!r} is not KIND:RANK:STEP with KIND one of crash, hang, "
                "exception") from None
    return tuple(plan)


def _signals(text: str) -> tuple[signal.Signals, ...]:
    found = []
    for name in filter(None, (n.strip() for n in text.split(","))):
        try:
            found.append(signal.Signals[name])
        except KeyError:
            raise click.UsageError(f"--signals-to-handle: unknown signal {name!r}") from None
    return tuple(found)


def _program(params: dict[str, Any], script: str, args: tuple[str, ...]) -> workers.ProgramSpec:
    if params["module"] and params["no_python"]:
        raise click.UsageError("--module and --no-python cannot be used together")
    if params["module"]:
        return workers.ProgramSpec("module", script, args)
    if params["no_python"]:
        return workers.ProgramSpec("exec", script, args)
    if not Path(script).is_file():
        raise click.UsageError(f"training script {script!r} does not exist")
    return workers.ProgramSpec("path", str(Path(script).resolve()), args)


def _warn_ignored(params: dict[str, Any]) -> None:
    for flag in torchrun_flags.FLAGS:
        value = params[flag.dest]
        default = ",".join(flag.default) if isinstance(flag.default, list) else flag.default
        if flag.ignored and value not in (default, None, False, ""):
            logger.warning("%s has no effect: %s", flag.names[0], flag.ignored)


def _run_id(value: str) -> str:
    if value and value != "none":
        return value
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{uuid.uuid4().hex[:6]}"


def build_settings(params: dict[str, Any], script: str, args: tuple[str, ...]
                   ) -> launcher.RunSettings:
    """Settings for one run from parsed flags. Raises: click.UsageError naming the flag."""
    if params["nnodes"] not in ("1", "1:1"):
        raise click.UsageError(f"--nnodes {params['nnodes']}: only single-node jobs are "
                               "supported for now (use 1)")
    if params["node_rank"] != 0:
        raise click.UsageError("--node-rank: only node 0 exists in a single-node job")
    _warn_ignored(params)
    nproc = _nproc(params["nproc_per_node"])
    run_id = _run_id(params["rdzv_id"])
    run_dir = params["own__run_root"] / run_id
    try:
        redirects = worker_output.parse_std(params["redirects"], flag="--redirects")
        tee = worker_output.parse_std(params["tee"], flag="--tee")
        ranks_filter = frozenset(int(r) for r in params["local_ranks_filter"].split(",") if r)
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    output = worker_output.OutputSettings(
        redirects=redirects, tee=tee,
        log_dir=Path(params["log_dir"]) if params["log_dir"] else run_dir / "logs",
        local_ranks_filter=ranks_filter or None,
        line_prefix_template=os.environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"))
    groups = {group.key: group for group in GROUPS}
    try:
        agent = groups["agent"].build(
            params, nproc_per_node=nproc, program=_program(params, script, args),
            run_id=run_id, run_dir=run_dir, role=params["role"],
            master_addr=params["master_addr"], master_port=params["master_port"],
            max_restarts=params["max_restarts"], monitor_interval=params["monitor_interval"],
            shutdown_timeout=float(params["shutdown_timeout"] or 30),
            output=output, fault_plan=_fault_plan(params["own__inject"]))
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    return groups["run"].build(  # type: ignore[no-any-return]
        params, agent=agent, heartbeat=groups["heartbeat"].build(params),
        checkpoint=groups["checkpoint"].build(params),
        recovery=groups["recovery"].build(params, max_restarts=params["max_restarts"]),
        signals=_signals(params["signals_to_handle"]))


def _main(training_script: str, training_script_args: tuple[str, ...], **params: Any) -> None:
    settings = build_settings(params, training_script, training_script_args)
    observer = console_output.ConsoleObserver()
    try:
        report = asyncio.run(launcher.run(settings, observer=observer))
    except launcher.LaunchError as error:
        raise click.ClickException(str(error)) from error
    console_output.render_summary(report, Console(stderr=True))
    raise SystemExit(report.result.exit_code)


def command() -> click.Command:
    params: list[click.Parameter] = [
        *_torchrun_options(),
        *[option for group in GROUPS for option in group.options()],
        *_OWN_OPTIONS,
        click.Argument(["training_script"]),
        click.Argument(["training_script_args"], nargs=-1, type=click.UNPROCESSED),
    ]
    return RunCommand(
        "run", params=params, callback=_main,
        help="Run a distributed PyTorch job like torchrun, with fault detection and recovery.\n\n"
             "trainguard run [OPTIONS] TRAINING_SCRIPT [SCRIPT ARGS]...",
        context_settings={"allow_interspersed_args": False,
                          "help_option_names": ["-h", "--help"]},
        short_help="Run a training job with fault detection and recovery.")
