"""Files and directories only the job's user (and root) may open.

A run directory holds the job's checkpoints, its state store and the agent's address; another
user on the host must not read them. Modes are given when a file is created, never fixed
afterwards, so there is no moment at which another user can open it: directories 0700, files
0600 (a umask can only take bits away). A file or directory that already exists keeps its mode.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DIRECTORY_MODE", "FILE_MODE", "create", "make_dir"]

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


def make_dir(path: Path) -> None:
    """Create ``path`` and each missing parent owner-only; an existing one is left as it is.

    Raises:
        OSError: a component cannot be created (a file stands there, no permission, ...).
    """
    missing = []
    while not path.exists():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIRECTORY_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue  # made meanwhile by another process: theirs to decide


def create(path: Path, flags: int = os.O_WRONLY | os.O_TRUNC) -> int:
    """Open ``path`` for writing, created owner-only if it does not exist; returns the descriptor.

    Raises:
        OSError: it cannot be opened.
    """
    return os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
