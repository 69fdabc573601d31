"""``trainguard run``: torchrun's command line, plus trainguard's own options in their own section.

Parsed with argparse, as torchrun parses it, so spellings, defaults, ``PET_*`` fallbacks and the
pass-through of the script's own arguments behave the same. Parse, build settings, call
:func:`trainguard.launcher.run`, map the result to an exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import logging
import os
import signal
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from trainguard import launcher
from trainguard.agent import (
    checkpoint_memory,
    fault_injection,
    node_agent,
    worker_output,
    workers,
)
from trainguard.cli import console as console_output
from trainguard.cli import settings_flags, torchrun_flags
from trainguard.controller import policy
from trainguard.detect import heartbeat
from trainguard.faults import replicas
from trainguard.ipc import messages

__all__ = ["DEFAULT_RUN_ROOT", "UsageError", "build_settings", "main", "parser"]

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


_KINDS = ", ".join(kind.value for kind in messages.InjectionKind)


class UsageError(ValueError):
    """A command line that cannot run; the message names the flag."""


def _env_default(flag: torchrun_flags.TorchrunFlag) -> Any:
    """torchrun's fallback: ``PET_<FLAG>`` replaces the default."""
    if flag.env not in os.environ:
        return flag.default
    value = os.environ[flag.env]
    if flag.type is None:
        return value.strip().lower() in ("1", "true", "yes", "on")
    return value


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="trainguard run", allow_abbrev=False,
        description="Run a distributed PyTorch job like torchrun, with fault detection and "
                    "recovery: a failed or hung worker is seen at once and the job restarts "
                    "from the newest snapshot in memory.")
    torchrun = result.add_argument_group("torchrun options")
    for flag in torchrun_flags.FLAGS:
        text = flag.help + (f" [no effect: {flag.ignored}]" if flag.ignored else "")
        if flag.type is None:
            torchrun.add_argument(*flag.names, dest=flag.dest, action="store_true",
                                  default=_env_default(flag), help=text)
        else:
            default = _env_default(flag)
            if isinstance(default, list):
                default = ",".join(default)
            torchrun.add_argument(*flag.names, dest=flag.dest, default=default,
                                  type=flag.type, help=f"{text} [default: {default}]")
    ours = result.add_argument_group("trainguard options")
    for group in GROUPS:
        group.add_arguments(ours)
    ours.add_argument("--run-root", dest="own__run_root", type=Path, metavar="DIR",
                      default=Path(os.environ.get("TRAINGUARD_RUN_ROOT", DEFAULT_RUN_ROOT)),
                      help="Directory with one run directory per job: state store, logs, "
                           f"checkpoints. [default: {DEFAULT_RUN_ROOT}; env TRAINGUARD_RUN_ROOT]")
    ours.add_argument("--inject", dest="own__inject", metavar="KIND:RANK:STEP,...",
                      action="append",
                      help="Faults to inject, for demonstrations and tests: KIND:RANK:STEP[,...] "
                           f"with KIND one of {_KINDS}; repeatable. [env TRAINGUARD_INJECT]")
    result.add_argument("training_script", help="The script (or module, or program) to run.")
    result.add_argument("training_script_args", nargs=argparse.REMAINDER,
                        help="Arguments for the script.")
    return result


def _nproc(value: str) -> int:
    if value.isdigit() and int(value) > 0:
        return int(value)
    if value in ("gpu", "auto"):
        gpus = _gpu_count()
        if gpus:
            return gpus
        if value == "gpu":
            raise UsageError("--nproc-per-node gpu: no NVIDIA GPU found on this host")
    if value in ("cpu", "auto"):
        return os.cpu_count() or 1
    raise UsageError(
        f"--nproc-per-node: {value!r} is not a positive number, 'cpu', 'gpu' or 'auto'")


def _gpu_count() -> int:
    try:
        import pynvml  # noqa: PLC0415 - the NVML client only where GPUs are asked about

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library, no GPU: all mean zero GPUs
        return 0


def _fault_plan(text: str) -> tuple[fault_injection.PlannedFault, ...]:
    plan = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            kind, rank, step = part.split(":")
            plan.append(fault_injection.PlannedFault(
                messages.InjectionKind(kind), int(rank), int(step)))
        except ValueError:
            raise UsageError(
                f"--inject: {part!r} is not KIND:RANK:STEP with KIND one of {_KINDS}"
            ) from None
    return tuple(plan)


def _signals(text: str) -> tuple[signal.Signals, ...]:
    found = []
    for name in filter(None, (n.strip() for n in text.split(","))):
        try:
            found.append(signal.Signals[name])
        except KeyError:
            raise UsageError(f"--signals-to-handle: unknown signal {name!r}") from None
    return tuple(found)


def _program(arguments: argparse.Namespace) -> workers.ProgramSpec:
    script, args = arguments.training_script, tuple(arguments.training_script_args)
    if arguments.module and arguments.no_python:
        raise UsageError("--module and --no-python cannot be used together")
    if arguments.module:
        return workers.ProgramSpec("module", script, args)
    if arguments.no_python:
        return workers.ProgramSpec("exec", script, args)
    if not Path(script).is_file():
        raise UsageError(f"training script {script!r} does not exist")
    return workers.ProgramSpec("path", str(Path(script).resolve()), args)


def _warn_ignored(arguments: argparse.Namespace) -> None:
    for flag in torchrun_flags.FLAGS:
        value = getattr(arguments, flag.dest)
        default = ",".join(flag.default) if isinstance(flag.default, list) else flag.default
        if flag.ignored and value not in (default, None, False, ""):
            logger.warning("%s has no effect: %s", flag.names[0], flag.ignored)


def _run_id(value: str) -> str:
    if value and value != "none":
        return value
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{uuid.uuid4().hex[:6]}"


def _output(arguments: argparse.Namespace, run_dir: Path) -> worker_output.OutputSettings:
    try:
        redirects = worker_output.parse_std(arguments.redirects, flag="--redirects")
        tee = worker_output.parse_std(arguments.tee, flag="--tee")
        ranks = frozenset(int(rank) for rank in arguments.local_ranks_filter.split(",") if rank)
    except ValueError as error:
        raise UsageError(str(error)) from error
    return worker_output.OutputSettings(
        redirects=redirects, tee=tee,
        log_dir=Path(arguments.log_dir) if arguments.log_dir else run_dir / "logs",
        local_ranks_filter=ranks or None,
        line_prefix_template=os.environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"))


def build_settings(arguments: argparse.Namespace) -> launcher.RunSettings:
    """Settings for one run from parsed arguments. Raises: UsageError naming the flag."""
    if arguments.nnodes not in ("1", "1:1"):
        raise UsageError(f"--nnodes {arguments.nnodes}: only single-node jobs are supported "
                         "for now (use 1)")
    if arguments.node_rank != 0:
        raise UsageError("--node-rank: only node 0 exists in a single-node job")
    _warn_ignored(arguments)
    nproc = _nproc(arguments.nproc_per_node)
    run_id = _run_id(arguments.rdzv_id)
    run_dir = arguments.own__run_root / run_id
    values = vars(arguments)
    groups = {group.key: group for group in GROUPS}
    try:
        agent = groups["agent"].build(
            values, nproc_per_node=nproc, program=_program(arguments), run_id=run_id,
            run_dir=run_dir, role=arguments.role, master_addr=arguments.master_addr,
            master_port=arguments.master_port, max_restarts=arguments.max_restarts,
            monitor_interval=arguments.monitor_interval,
            shutdown_timeout=float(arguments.shutdown_timeout or 30),
            output=_output(arguments, run_dir), fault_plan=_fault_plan(
                ",".join(arguments.own__inject or [os.environ.get("TRAINGUARD_INJECT", "")])))
        settings: launcher.RunSettings = groups["run"].build(
            values, agent=agent, heartbeat=groups["heartbeat"].build(values),
            checkpoint=groups["checkpoint"].build(values),
            recovery=_recovery(groups["recovery"], values, agent, arguments.max_restarts),
            signals=_signals(arguments.signals_to_handle))
    except settings_flags.SettingsError as error:
        raise UsageError(str(error)) from error
    return settings


def _recovery(group: settings_flags.SettingsGroup, values: dict[str, Any],
              agent: node_agent.AgentSettings, max_restarts: int) -> policy.RecoverySettings:
    """The recovery settings, their strategies fitted to the job: defaults that cannot work
    here are dropped; a list the user gave that cannot work is refused."""
    recovery: policy.RecoverySettings = group.build(values, max_restarts=max_restarts)
    explicit = (values.get(f"{group.key}__recover_strategy") is not None
                or group.envvar("recover_strategy") in os.environ)
    layout = replicas.ReplicaLayout(agent.nproc_per_node, agent.dp_size or agent.nproc_per_node)
    try:
        strategies = policy.fit_to_job(recovery.recover_strategy, layout=layout,
                                       spares=agent.spare_devices, explicit=explicit)
    except ValueError as error:
        raise settings_flags.SettingsError(str(error)) from error
    return dataclasses.replace(recovery, recover_strategy=strategies)


def main(argv: Sequence[str]) -> int:
    """Run the job; returns the exit code (usage errors exit 2, as argparse does)."""
    command_line = parser()
    arguments = command_line.parse_args(list(argv))
    try:
        settings = build_settings(arguments)
    except UsageError as error:
        command_line.error(str(error))
    observer = console_output.ConsoleObserver()
    try:
        report = asyncio.run(launcher.run(settings, observer=observer))
    except launcher.LaunchError as error:
        observer.console.print(f"trainguard: {error}", style="bold red", markup=False,
                               soft_wrap=True)
        return 1
    console_output.render_summary(report, Console(stderr=True))
    return report.exit_code
