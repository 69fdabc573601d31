"""Finding a run directory for the commands that read or steer a job."""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["resolve"]


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
    candidates = sorted((path for path in run_root.glob(f"*/{marker}")),
                        key=lambda path: path.stat().st_mtime, reverse=True)
    if not candidates:
        raise typer.BadParameter(f"no run with {marker} under {run_root}; pass --run-dir",
                                 param_hint="--run-dir")
    return candidates[0].parent
