"""Finding a run directory for the commands that read or steer a job."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["resolve"]


def resolve(run_dir: Path | None, run_root: Path, *, marker: str) -> Path:
    """``run_dir`` if given, else the newest run under ``run_root`` that has ``marker``.

    Raises:
        click.UsageError: nothing found; the message says where it looked.
    """
    if run_dir is not None:
        if not (run_dir / marker).exists():
            raise click.UsageError(f"{run_dir} has no {marker}: not a (running) trainguard run")
        return run_dir
    candidates = sorted((path for path in run_root.glob(f"*/{marker}")),
                        key=lambda path: path.stat().st_mtime, reverse=True)
    if not candidates:
        raise click.UsageError(f"no run with {marker} under {run_root}; pass --run-dir")
    return candidates[0].parent
