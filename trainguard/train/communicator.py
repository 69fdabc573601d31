"""Cutting a generation's communicator, so that no rank waits on it.

torch 2.13's gloo has no working abort: ``ProcessGroupGloo.abort()`` leaves its connections
open, so peers blocked in a collective with this rank stay blocked until the process-group
timeout (30 minutes by default). And destroying a gloo group, or the DDP reducer that holds it,
can deadlock: the destructor joins gloo's worker thread while holding the GIL, and that thread
may need the GIL to free a finished work item. So a generation is left in two moves:

* its connected TCP sockets are shut down (``shutdown(2)`` on a duplicate descriptor): every
  pending and later collective on them fails at once, here and at every peer, which then cuts
  its own;
* the process group and whatever holds it are kept alive, never destroyed (a few megabytes per
  left generation: the gradient buckets of a DDP model), and the next generation opens a new one.

The sockets are those connected since the generation began; listening sockets are left alone
(gloo's listener thread aborts the process if its socket is shut down under it). A connection
the training function opens to anything else (a metrics client) would be cut too: open those
before :meth:`Session.run`.
"""

from __future__ import annotations

import contextlib
import os
import socket

import psutil

__all__ = ["Communicator"]


def _connected() -> set[tuple[int, int]]:
    """(descriptor, inode) of this process's connected TCP sockets."""
    found = set()
    for connection in psutil.Process().net_connections(kind="tcp"):
        if connection.fd < 0 or not connection.raddr:
            continue
        with contextlib.suppress(OSError):
            found.add((connection.fd, os.fstat(connection.fd).st_ino))
    return found


class Communicator:
    """The sockets of one generation: those connected after it began."""

    def __init__(self) -> None:
        self._before = _connected()

    def cut(self) -> int:
        """Shut every socket of the generation down; returns how many. Safe from any thread."""
        count = 0
        for descriptor, _inode in _connected() - self._before:
            with contextlib.suppress(OSError):
                duplicate = socket.socket(fileno=os.dup(descriptor))
                try:
                    duplicate.shutdown(socket.SHUT_RDWR)
                    count += 1
                finally:
                    duplicate.close()
        return count
