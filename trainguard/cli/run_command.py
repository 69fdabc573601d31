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
import difflib
import logging
import os
import signal
import socket
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console

from trainguard import launcher, names
from trainguard.agent import (
    checkpoint_memory,
    fault_injection,
    host_detectors,
    joining,
    node_agent,
    worker_output,
    workers,
)
from trainguard.cli import config_file, controller_access, settings_flags, torchrun_flags
from trainguard.cli import console as console_output
from trainguard.controller import policy
from trainguard.detect import heartbeat
from trainguard.ipc import messages
from trainguard.job import replicas
from trainguard.proto import grpc_security

__all__ = ["DEFAULT_RUN_ROOT", "UsageError", "build_settings", "config_keys", "effective",
           "known_environment", "load_config", "main", "parser"]

logger = logging.getLogger(__name__)

DEFAULT_RUN_ROOT = Path("trainguard-runs")

GROUPS = (
    settings_flags.SettingsGroup("heartbeat", heartbeat.HeartbeatSettings, prefix="heartbeat-"),
    settings_flags.SettingsGroup("checkpoint", checkpoint_memory.CheckpointSettings),
    settings_flags.SettingsGroup("recovery", policy.RecoverySettings,
                                 exclude=frozenset({"max_restarts"})),
    settings_flags.SettingsGroup("run", launcher.RunSettings, exclude=frozenset(
        {"agent", "heartbeat", "checkpoint", "recovery", "signals", "cluster", "detectors",
         "node_name"})),
    settings_flags.SettingsGroup("detectors", host_detectors.DetectorSettings),
    settings_flags.SettingsGroup("agent", node_agent.AgentSettings, exclude=frozenset(
        {"nproc_per_node", "program", "run_id", "run_dir", "role", "master_addr",
         "master_port", "max_restarts", "monitor_interval", "shutdown_timeout", "output",
         "fault_plan", "node_rank", "nnodes"})),
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


class _Parser(argparse.ArgumentParser):
    """argparse, with the closest known flag suggested for an unknown one."""

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            flags = sorted(self._option_string_actions)
            for argument in message.removeprefix(prefix).split():
                close = difflib.get_close_matches(argument.split("=")[0], flags, n=1)
                if argument.startswith("-") and close:
                    message += f" (did you mean {close[0]}?)"
                    break
        super().error(message)


def parser() -> argparse.ArgumentParser:
    result = _Parser(
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
                                  type=flag.type, metavar=flag.metavar,
                                  help=f"{text} [default: {default}]")
    ours = result.add_argument_group("trainguard options")
    for group in GROUPS:
        group.add_arguments(ours)
    ours.add_argument("--config", dest="own__config", type=Path, metavar="FILE",
                      help="A TOML file with any of these options, keys named as the flags "
                           "without dashes (heartbeat-floor = \"2s\"); the environment and "
                           "flags override it. See `trainguard config show`. [env "
                           "TRAINGUARD_CONFIG]")
    ours.add_argument("--run-root", dest="own__run_root", metavar="DIR",
                      help="Directory with one run directory per job: state store, logs, "
                           f"checkpoints. [default: {DEFAULT_RUN_ROOT}; env TRAINGUARD_RUN_ROOT]")
    ours.add_argument("--inject", dest="own__inject", metavar="KIND:RANK:STEP,...",
                      action="append",
                      help="Faults to inject, for demonstrations and tests: KIND:RANK:STEP[,...] "
                           f"with KIND one of {_KINDS}; repeatable. [env TRAINGUARD_INJECT]")
    ours.add_argument("--node-name", dest="own__node_name", metavar="NAME",
                      default=os.environ.get("TRAINGUARD_NODE_NAME"),
                      help="This host's name: to the controller (--nnodes > 1), in its "
                           "documents (mindx-dl-deviceinfo-NAME, ...), and the nodeName public "
                           "faults name it by: a DNS-1123 subdomain. "
                           "[default: the host name, lower-cased; env TRAINGUARD_NODE_NAME]")
    controller_access.add_client_arguments(result)
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
        if gpus is None and value == "gpu":
            raise UsageError(f"--nproc-per-node gpu: {_NO_NVML}")
        if gpus is None:
            logger.warning("--nproc-per-node auto: %s; one worker per CPU instead", _NO_NVML)
        if value == "gpu":
            raise UsageError("--nproc-per-node gpu: no NVIDIA GPU found on this host")
    if value in ("cpu", "auto"):
        return os.cpu_count() or 1
    raise UsageError(
        f"--nproc-per-node: {value!r} is not a positive number, 'cpu', 'gpu' or 'auto'")


_NO_NVML = ("counting GPUs needs NVIDIA's NVML client, which is not installed: "
            "pip install 'trainguard[nvidia]'")


def _gpu_count() -> int | None:
    """The GPUs NVML sees; None when its Python client (the ``nvidia`` extra) is missing."""
    try:
        import pynvml  # noqa: PLC0415 - the NVML client only where GPUs are asked about
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library, no GPU: all mean zero GPUs
        return 0


def _has_devices() -> bool:
    """NVIDIA GPUs (through NVML) or Ascend NPUs (their device files) on this host."""
    return (_gpu_count() or 0) > 0 or any(Path("/dev").glob("davinci[0-9]*"))


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
    if Path(script).is_dir():
        raise UsageError(f"training script {script!r} is a directory; name a file, or use -m "
                         "for a package with a __main__ module")
    if not Path(script).is_file():
        raise UsageError(f"training script {script!r} does not exist")
    return workers.ProgramSpec("path", str(Path(script).resolve()), args)


_ACROSS_NODES = frozenset({"rdzv_backend", "rdzv_endpoint", "rdzv_conf", "local_addr"})
"""torchrun's flags that mean something once a job spans nodes."""


def _warn_ignored(arguments: argparse.Namespace, *, across_nodes: bool) -> None:
    for flag in torchrun_flags.FLAGS:
        if across_nodes and flag.dest in _ACROSS_NODES:
            continue
        value = getattr(arguments, flag.dest)
        default = ",".join(flag.default) if isinstance(flag.default, list) else flag.default
        if flag.ignored and value not in (default, None, False, ""):
            logger.warning("%s has no effect: %s", flag.names[0], flag.ignored)


def _run_id(value: str) -> str:
    """The job's id, which names its run directory, so it must stay one plain name."""
    if value and value != "none":
        try:
            return names.job_id(value, what="--rdzv-id/--run-id")
        except names.InvalidNameError as error:
            raise UsageError(str(error)) from error
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


def _directory(flag: str, path: Path) -> None:
    """A directory trainguard will create or use: refused when a file stands in its way."""
    for ancestor in (path, *path.parents):
        if ancestor.exists():
            if not ancestor.is_dir():
                what = "is a file" if ancestor == path else f"is inside {str(ancestor)!r}, a file"
                raise UsageError(f"{flag} {str(path)!r} {what}; name a directory")
            return


_OWN = {"run-root": "TRAINGUARD_RUN_ROOT", "inject": "TRAINGUARD_INJECT"}
"""trainguard's own options outside the settings groups: file key -> environment variable."""
_ELSEWHERE = frozenset({"TRAINGUARD_CONFIG", "TRAINGUARD_LOG_LEVEL", "TRAINGUARD_LOG_FORMAT"})
"""Variables of other options: --config itself, and the ``trainguard`` command's own."""


def config_keys() -> set[str]:
    """Every key a configuration file may hold."""
    return {key for group in GROUPS for key in group.file_keys()} | set(_OWN)


def known_environment() -> set[str]:
    """Every ``TRAINGUARD_*`` variable an option reads."""
    return ({variable for group in GROUPS for variable in group.environment()}
            | set(_OWN.values()) | _ELSEWHERE | controller_access.ENVIRONMENT
            | {"TRAINGUARD_NODE_NAME"})


def load_config(path: Path | str | None, environ: Mapping[str, str]) -> dict[str, Any]:
    """The configuration file's values (``--config``, else ``TRAINGUARD_CONFIG``), once the
    environment has been checked for misspelled variables.

    Raises:
        UsageError: the file or a variable cannot be used; the message names it.
    """
    try:
        config_file.check_environment(environ, known=known_environment())
        path = path or environ.get("TRAINGUARD_CONFIG")
        return config_file.load(Path(path), known=config_keys()) if path else {}
    except config_file.ConfigFileError as error:
        raise UsageError(str(error)) from error


def _own(key: str, flag: Any, *, file: Mapping[str, Any], environ: Mapping[str, str]
         ) -> tuple[str | None, settings_flags.Source]:
    """An option of our own outside the settings groups, with the same precedence."""
    if flag is not None:
        return flag, settings_flags.Source.FLAG
    if _OWN[key] in environ:
        return environ[_OWN[key]], settings_flags.Source.ENV
    if key in file:
        return settings_flags.file_text(file[key]), settings_flags.Source.FILE
    return None, settings_flags.Source.DEFAULT


def effective(*, file: Mapping[str, Any], environ: Mapping[str, str],
              file_name: str = "config") -> list[tuple[str, Any, settings_flags.Source]]:
    """Every configurable option (its file key), its value and where the value came from, for
    ``trainguard config show``: no flags, so defaults, the file and the environment.

    Raises:
        UsageError: a value is malformed; the message names the key or variable.
    """
    rows: list[tuple[str, Any, settings_flags.Source]] = []
    try:
        for group in GROUPS:
            resolved = group.resolve({}, environ=environ, file=file, file_name=file_name)
            rows += [(group.key_of(name), value, source)
                     for name, (value, source) in resolved.items()]
    except settings_flags.SettingsError as error:
        raise UsageError(str(error)) from error
    root, source = _own("run-root", None, file=file, environ=environ)
    rows.append(("run-root", root or str(DEFAULT_RUN_ROOT), source))
    rows.append(("inject", *_own("inject", None, file=file, environ=environ)))
    return rows


def build_settings(arguments: argparse.Namespace, *,
                   environ: Mapping[str, str] = os.environ) -> launcher.RunSettings:
    """Settings for one run from parsed arguments, the configuration file and the environment.

    Raises:
        UsageError: naming the flag, the file's key or the variable.
    """
    cluster = _cluster(arguments)
    _warn_ignored(arguments, across_nodes=cluster is not None)
    file = load_config(arguments.own__config, environ)
    file_name = str(arguments.own__config or environ.get("TRAINGUARD_CONFIG", "config"))
    nproc = _nproc(arguments.nproc_per_node)
    run_id = _run_id(arguments.rdzv_id)
    root, _ = _own("run-root", arguments.own__run_root, file=file, environ=environ)
    run_root = Path(root) if root is not None else DEFAULT_RUN_ROOT
    _directory("--run-root", run_root)
    run_dir = run_root / run_id
    if arguments.log_dir:
        _directory("--log-dir", Path(arguments.log_dir))
    inject = _own("inject", ",".join(arguments.own__inject) if arguments.own__inject else None,
                  file=file, environ=environ)[0]
    values = vars(arguments)
    groups = {group.key: group for group in GROUPS}
    # torchrun's --shutdown-timeout has no default of its own; the settings' applies.
    shutdown: dict[str, Any] = ({} if arguments.shutdown_timeout is None
                                else {"shutdown_timeout": float(arguments.shutdown_timeout)})
    sources: dict[str, Any] = {"environ": environ, "file": file, "file_name": file_name}
    try:
        agent = groups["agent"].build(
            values, **sources, nproc_per_node=nproc, program=_program(arguments),
            run_id=run_id, run_dir=run_dir, role=arguments.role,
            master_addr=arguments.master_addr, master_port=arguments.master_port,
            max_restarts=arguments.max_restarts, monitor_interval=arguments.monitor_interval,
            nnodes=cluster.nnodes if cluster is not None else 1,
            **shutdown, output=_output(arguments, run_dir), fault_plan=_fault_plan(inject or ""))
        settings: launcher.RunSettings = groups["run"].build(
            values, **sources, agent=agent,
            heartbeat=groups["heartbeat"].build(values, **sources),
            checkpoint=groups["checkpoint"].build(values, **sources),
            detectors=groups["detectors"].build(values, **sources),
            recovery=_recovery(groups["recovery"], values, agent, arguments.max_restarts,
                               sources=sources),
            signals=_signals(arguments.signals_to_handle), cluster=cluster,
            node_name=arguments.own__node_name if cluster is None else None)
    except settings_flags.SettingsError as error:
        raise UsageError(str(error)) from error
    if settings.checkpoint.checkpoint_dir is not None:
        _directory("--checkpoint-dir", settings.checkpoint.checkpoint_dir)
    if settings.fault_config_dir is not None and not settings.fault_config_dir.is_dir():
        raise UsageError(f"--fault-config-dir {str(settings.fault_config_dir)!r} is not a "
                         "directory")
    return settings


def _nnodes(value: str) -> tuple[int, int]:
    """torchrun's ``N`` or ``MIN:MAX`` (hosts past MIN are spares)."""
    low, _, high = value.partition(":")
    try:
        nodes = int(low)
        most = int(high) if high else nodes
    except ValueError:
        raise UsageError(f"--nnodes {value!r}: a number of nodes, or MIN:MAX") from None
    if nodes < 1 or most < nodes:
        raise UsageError(f"--nnodes {value!r}: needs 1 <= MIN <= MAX")
    return nodes, most


def _cluster(arguments: argparse.Namespace) -> joining.ClusterSettings | None:
    """A job across nodes from torchrun's multi-node flags; None for one node.

    Raises:
        UsageError: naming the flag.
    """
    nnodes, most = _nnodes(arguments.nnodes)
    if most == 1:
        if arguments.node_rank != 0:
            raise UsageError("--node-rank: only node 0 exists in a single-node job")
        return None
    if arguments.standalone:
        raise UsageError(f"--standalone is a single-node job; --nnodes is {arguments.nnodes}")
    if not arguments.rdzv_endpoint:
        raise UsageError(f"--nnodes {arguments.nnodes}: a job across nodes needs --rdzv-endpoint "
                         "HOST:PORT, the address of `trainguard controller --listen`")
    if arguments.rdzv_id in ("", "none"):
        raise UsageError(f"--nnodes {arguments.nnodes}: every node of the job must give the same "
                         "--rdzv-id")
    conf = dict(item.partition("=")[::2] for item in arguments.rdzv_conf.split(",") if item)
    try:
        timeout = float(conf.pop("join_timeout", 600))
        controller_wait = float(conf.pop("controller_wait", 60))
        # As torchrun: the static backend takes --node-rank, the others assign one.
        node_rank = arguments.node_rank if arguments.rdzv_backend == "static" else None
        security = controller_access.client_from_arguments(arguments)
        given = arguments.own__node_name
        node_name = names.node_name(given or socket.gethostname().lower(), what="--node-name"
                                    if given else "this host's name (give --node-name)")
        cluster = joining.ClusterSettings(
            endpoint=arguments.rdzv_endpoint, nnodes=nnodes, max_nodes=most, node_rank=node_rank,
            local_addr=arguments.local_addr, join_timeout=timeout,
            controller_wait=controller_wait, node_name=node_name, security=security)
    except (names.InvalidNameError, grpc_security.AccessError) as error:
        raise UsageError(str(error)) from error
    except ValueError as error:
        raise UsageError(f"--rdzv-endpoint/--rdzv-conf/--node-rank: {error}") from error
    for key in conf:
        logger.warning("--rdzv-conf %s has no effect: trainguard's controller is the "
                       "rendezvous", key)
    return cluster


def _recovery(group: settings_flags.SettingsGroup, values: dict[str, Any],
              agent: node_agent.AgentSettings, max_restarts: int, *, sources: dict[str, Any]
              ) -> policy.RecoverySettings:
    """The recovery settings, their strategies fitted to the job: defaults that cannot work
    here are dropped; a list the user gave (flag, variable or file) that cannot work is
    refused."""
    recovery: policy.RecoverySettings = group.build(values, **sources, max_restarts=max_restarts)
    _, source = group.resolve(values, **sources)["recover_strategy"]
    layout = replicas.ReplicaLayout(agent.nproc_per_node, agent.dp_size or agent.nproc_per_node)
    try:
        strategies = policy.fit_to_job(recovery.recover_strategy, layout=layout,
                                       spares=agent.spare_devices,
                                       explicit=source is not settings_flags.Source.DEFAULT)
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
    observer = console_output.ConsoleObserver(devices=_has_devices())
    try:
        report = asyncio.run(launcher.run(settings, observer=observer))
    except launcher.LaunchError as error:
        observer.console.print(f"trainguard: {error}", style="bold red", markup=False,
                               soft_wrap=True)
        return 1
    console_output.render_summary(report, Console(stderr=True))
    return report.exit_code
