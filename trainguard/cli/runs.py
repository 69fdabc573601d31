"""Finding a run directory for the commands that read or steer a job.

A run is *running* while its ``agent.json`` names a live process: the file is removed at the
end, but a ``trainguard run`` that was killed leaves it behind.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import psutil
import typer

from trainguard.agent import node_agent
from trainguard.cli import run_command
from trainguard.launcher import STORE_NAME

__all__ = ["RunChoice", "RunDir", "RunRoot", "choose", "is_running", "resolve"]

RunDir = Annotated[Path | None, typer.Option(help="The run directory (default: the newest "
                                             "running run under --run-root, else the newest).")]
RunRoot = Annotated[Path, typer.Option(envvar="TRAINGUARD_RUN_ROOT",
                                       help="Where run directories are.")]


@dataclasses.dataclass(frozen=True)
class RunChoice:
    directory: Path
    running: bool
    why: str  # how it was chosen, said to the user

    def describe(self) -> str:
        state = "running" if self.running else "not running"
        return f"run {self.directory.name} ({state}, {self.why}): {self.directory}"


def is_running(directory: Path) -> bool:
    """The run's ``trainguard run`` process is alive (an unreadable agent file counts)."""
    agent_file = directory / node_agent.AGENT_FILE
    try:
        pid = json.loads(agent_file.read_text())["pid"]
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError):
        return agent_file.exists()
    return isinstance(pid, int) and psutil.pid_exists(pid)


def choose(run_dir: Path | None, run_root: Path = run_command.DEFAULT_RUN_ROOT) -> RunChoice:
    """``run_dir`` if given, else the newest running run under ``run_root``, else its newest.

    Raises:
        typer.BadParameter: no run there; the message says where it looked.
    """
    if run_dir is not None:
        return RunChoice(resolve(run_dir, run_root, marker=STORE_NAME), is_running(run_dir),
                         "given with --run-dir")
    candidates = _newest_first(run_root, STORE_NAME)
    if not candidates:
        raise typer.BadParameter(f"no run with {STORE_NAME} under {run_root}; pass --run-dir",
                                 param_hint="--run-dir")
    running = [directory for directory in candidates if is_running(directory)]
    if running:
        return RunChoice(running[0], True, f"the newest running run under {run_root}")
    return RunChoice(candidates[0], False, f"the newest run under {run_root}; none is running")


def resolve(run_dir: Path | None, run_root: Path, *, marker: str) -> Path:
    """``run_dir`` if given, else the newest run under ``run_root`` that has ``marker``.

    Raises:
        typer.BadParameter: nothing found (for --run-dir); the message says where it looked.
    """
    if run_dir is not None:
        if not (run_dir / marker).exists():
            raise typer.BadParameter(f"{run_dir} has no {marker}: not a (running) trainguard run",
                                     param_hint="--run-dir")
        return run_dir
    candidates = _newest_first(run_root, marker)
    if not candidates:
        raise typer.BadParameter(f"no run with {marker} under {run_root}; pass --run-dir",
                                 param_hint="--run-dir")
    return candidates[0]


def _newest_first(run_root: Path, marker: str) -> list[Path]:
    """Run directories holding ``marker``, the most recently changed marker first."""
    return [path.parent for path in sorted(run_root.glob(f"*/{marker}"),
                                           key=lambda path: path.stat().st_mtime, reverse=True)]
