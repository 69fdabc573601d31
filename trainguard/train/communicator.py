"""Cutting a generation's communicator, so that no rank waits on it.

An NCCL communicator is aborted through torch (:func:`.process_group.abort_nccl`), which ends
its kernels still waiting on a peer. torch 2.13's gloo has no working abort:
``ProcessGroupGloo.abort()`` leaves its connections open, so peers blocked in a collective with
this rank stay blocked until the process-group timeout (30 minutes by default). And destroying
a gloo group, or the DDP reducer that holds it, can deadlock: the destructor joins gloo's worker
thread while holding the GIL, and that thread may need the GIL to free a finished work item. So
a gloo generation is left in two moves:

* its connected TCP sockets are shut down (``shutdown(2)`` on a duplicate descriptor): every
  pending and later collective on them fails at once, here and at every peer, which then cuts
  its own (nearly always: DDP can stay waiting for an allreduce that neither ends nor fails,
  which the agent gives up on after the step's deadline; docs/architecture.md);
* the process group and whatever holds it are kept alive, never destroyed (a few megabytes per
  left generation: the gradient buckets of a DDP model), and the next generation opens a new one.
  Not even at exit (:func:`abandon`): the interpreter's teardown would run the same destructors,
  and a process that has finished its work would hang on its way out.

The sockets are those opened since the generation began (found in ``/proc/self/fd``, which
costs microseconds, where listing connections costs milliseconds); listening sockets are left
alone (gloo's listener thread aborts the process if its socket is shut down under it). A
connection the training function opens to anything else (a metrics client) would be cut too:
open those before :meth:`Session.run`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket

from trainguard.train import process_group

__all__ = ["Communicator", "abandon"]

_FDS = "/proc/self/fd"


def _sockets() -> dict[int, str]:
    """This process's socket descriptors, with the kernel's name of each (``socket:[inode]``)."""
    found = {}
    for name in os.listdir(_FDS):
        with contextlib.suppress(OSError):
            target = os.readlink(f"{_FDS}/{name}")
            if target.startswith("socket:"):
                found[int(name)] = target
    return found


class Communicator:
    """The sockets of one generation: those opened after it began."""

    def __init__(self) -> None:
        self._before = set(_sockets().values())

    def cut(self) -> int:
        """Abort the generation's NCCL communicators, then shut every connected TCP socket of
        the generation down (gloo's, the store's); returns how many of both. Safe from any
        thread."""
        count = process_group.abort_nccl()
        for descriptor, name in _sockets().items():
            if name in self._before:
                continue
            with contextlib.suppress(OSError):
                duplicate = socket.socket(fileno=os.dup(descriptor))
                try:
                    if (duplicate.family in (socket.AF_INET, socket.AF_INET6)
                            and duplicate.type == socket.SOCK_STREAM
                            and not duplicate.getsockopt(socket.SOL_SOCKET,
                                                         socket.SO_ACCEPTCONN)):
                        duplicate.shutdown(socket.SHUT_RDWR)
                        count += 1
                finally:
                    duplicate.close()
        return count


def abandon(*objects: object) -> None:
    """Keep ``objects`` (and all they hold) until the process is gone, past the interpreter's
    teardown: one reference is taken that nothing gives back, so no destructor of theirs ever
    runs. The operating system takes the memory back with the process."""
    for item in objects:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(item))
