"""Whether a process has handled a signal sent to it, read from ``/proc`` (Linux).

The agent asks a worker that does not leave its generation for its threads' stacks
(:data:`trainguard.ipc.messages.STACKS_SIGNAL`) and then ends it. Python's faulthandler writes
the stacks in a C signal handler, within milliseconds of delivery even while every thread is
held in a collective; a fixed wait for them would put its whole length on the recovery's path.
A signal is handled once it is pending nowhere in the process and no thread is inside its
handler: the kernel blocks a signal in the thread that runs its handler until the handler
returns (faulthandler registers without ``SA_NODEFER``). Threads that blocked it already
before it was sent are left out, since they would never unblock it for the handler's sake.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Collection, Mapping
from pathlib import Path

__all__ = ["blocking_threads", "handled", "signal_and_wait", "wait_handled"]

POLL_SECONDS = 0.01
"""How often ``/proc`` is read while waiting."""


_MASKS = ("SigPnd", "ShdPnd", "SigBlk")
"""The masks read: pending for the thread, pending for the process, blocked by the thread."""


def _masks(status: str) -> dict[str, int]:
    """The :data:`_MASKS` of a ``/proc/.../status`` text."""
    masks = {}
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name in _MASKS:
            masks[name] = int(value.strip(), 16)
    return masks


def _threads(pid: int) -> dict[int, dict[str, int]] | None:
    """Each thread's masks; None when the process is gone (or ``/proc`` cannot say)."""
    threads = {}
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread ended
                threads[int(task.name)] = _masks((task / "status").read_text())
    except OSError:
        return None
    return threads or None


def blocking_threads(pid: int, signum: int) -> frozenset[int] | None:
    """The threads of ``pid`` that block ``signum`` now; None when ``/proc`` cannot say."""
    threads = _threads(pid)
    if threads is None:
        return None
    bit = 1 << (signum - 1)
    return frozenset(tid for tid, masks in threads.items() if masks.get("SigBlk", 0) & bit)


def handled(pid: int, signum: int, *, blocked_before: frozenset[int]) -> bool:
    """Whether ``signum``, sent to ``pid`` after ``blocked_before`` was read, is pending
    nowhere and no other thread blocks it (one would be running its handler); a process that
    is gone has nothing left to handle."""
    threads = _threads(pid)
    if threads is None:
        return True
    bit = 1 << (signum - 1)
    return not any(
        masks.get("ShdPnd", 0) & bit or masks.get("SigPnd", 0) & bit
        or (tid not in blocked_before and masks.get("SigBlk", 0) & bit)
        for tid, masks in threads.items())


async def wait_handled(sent: Mapping[int, frozenset[int]], signum: int, *,
                       timeout: float) -> bool:
    """Until every process of ``sent`` (pid -> :func:`blocking_threads` read before the
    signal went) has handled ``signum``, seen on two reads in a row (a signal just taken
    from the queue may not be blocked yet for its handler), or ``timeout`` seconds; whether
    they all did."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen_before = False
    while True:
        seen = all(handled(pid, signum, blocked_before=before) for pid, before in sent.items())
        if seen and seen_before:
            return True
        seen_before = seen
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(min(POLL_SECONDS, max(0.0, deadline - loop.time())))


async def signal_and_wait(pids: Collection[int], signum: int, *, timeout: float) -> bool:
    """Send ``signum`` to each of ``pids`` and wait until each has handled it
    (:func:`wait_handled`), or ``timeout`` seconds, the whole of them where ``/proc`` cannot
    show a process's handling; whether every one was seen to. A process already gone, or not
    this user's to signal, is left out."""
    sent: dict[int, frozenset[int]] = {}
    unseen = False
    for pid in pids:
        before = blocking_threads(pid, signum)
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            continue
        if before is None:
            unseen = True
        else:
            sent[pid] = before
    if unseen:
        await asyncio.sleep(timeout)
        return False
    return not sent or await wait_handled(sent, signum, timeout=timeout)
