"""Tie a helper process's life to its parent's, so no helper outlives the agent that owns it,
and none dies before it from a signal meant for the whole job.

Standard library only: the standby and persister processes import it before anything else.
"""

from __future__ import annotations

import ctypes
import os
import signal

__all__ = ["STOP_SIGNALS", "die_with_parent", "leave_stop_signals_to_parent"]

_PR_SET_PDEATHSIG = 1

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
"""What asks a job to stop (torchrun's --signals-to-handle): ``timeout``, a shell and a
terminal send them to the whole process group, systemd to the whole control group."""


def die_with_parent(expected_parent: int) -> None:
    """Ask the kernel for SIGKILL when the parent thread ends; exit now if it already has."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != expected_parent:
        os._exit(1)


def leave_stop_signals_to_parent() -> None:
    """Ignore the stop signals: the agent answers them with a graceful stop, which needs this
    helper (the persister writes the dying checkpoint, the standby's children are the
    workers); the helper ends when the agent does."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
