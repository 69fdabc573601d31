"""What the session does with torch.distributed: wait for a generation's store, drop a left
generation's process group, and move a rank's state between replicas (R6)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from trainguard.ipc import messages, snapshot_layout
from trainguard.train import snapshot

__all__ = ["ExchangeError", "await_store", "drop", "exchange_state"]


class ExchangeError(RuntimeError):
    """The state cannot come over the network this way; the message says what to change."""


def await_store(aborting: threading.Event, *, timeout: float = 60.0) -> None:
    """Until the generation's rendezvous store accepts connections (the agent hosts it:
    :mod:`.rendezvous_host`), ``aborting`` is set, or ``timeout`` seconds.

    A rank that reaches ``init_process_group`` before the store exists retries with a backoff
    that grows to about a second; polling here first lets it connect at once.
    """
    address = (os.environ.get("MASTER_ADDR", "127.0.0.1"),
               int(os.environ.get("MASTER_PORT", "0")))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not aborting.is_set():
        with contextlib.suppress(OSError), socket.create_connection(address, timeout=1.0):
            return
        time.sleep(0.005)


def drop() -> list[object]:
    """Unregister every process group; returns them, to be abandoned (see communicator)."""
    if not (dist.is_available() and dist.is_initialized()):
        return []
    groups: list[object] = list(distributed_c10d._world.pg_map)
    dist.destroy_process_group()
    return groups


def exchange_state(plan: messages.RestorePlan, *, absent: list[snapshot.Absent] | None = None
                   ) -> tuple[snapshot_layout.SnapshotHeader, Any] | None:
    """This rank's snapshot (header, tree) when it goes over the network: sent to the ranks
    ``plan`` names, or received from the rank's peer, over the generation's process group;
    None when neither. ``absent``: see :func:`snapshot.decode`.

    Raises:
        ExchangeError: the process group does not exist yet.
        snapshot.SnapshotError: what was sent or read is not a complete snapshot.
    """
    if plan.source is not messages.RestoreSource.PEER and not plan.send_to:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        raise ExchangeError("the state comes from a data-parallel peer this time, which needs "
                            "the process group: call restore() after init_process_group()")
    if plan.source is messages.RestoreSource.PEER and plan.peer is not None:
        size = torch.zeros(1, dtype=torch.int64)
        dist.recv(size, src=plan.peer)
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
        dist.recv(payload, src=plan.peer)
        name = f"rank {plan.peer}'s snapshot"
    else:
        payload = snapshot.snapshot_bytes(plan.path)  # read once, for every receiver
        for rank in plan.send_to:
            dist.send(torch.tensor([payload.numel()], dtype=torch.int64), dst=rank)
            dist.send(payload, dst=rank)
        name = plan.path
    # Copied out: the restored state (an optimizer's, say) may keep the tensors it is given.
    return snapshot.decode(payload.numpy().data, name=name, absent=absent)
