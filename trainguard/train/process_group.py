"""What the session does with torch.distributed: drop a left generation's process group, and
move a rank's state between replicas (R6).

No rank waits for its generation's rendezvous store: the agent hosts it before any worker of
the generation starts or is told to rejoin (:mod:`.rendezvous_host`), so ``init_process_group``
connects at once and never meets its connect backoff."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from trainguard.ipc import messages, snapshot_layout
from trainguard.train import snapshot

__all__ = ["ExchangeError", "drop", "exchange_state"]


class ExchangeError(RuntimeError):
    """The state cannot come over the network this way; the message says what to change."""


def drop() -> list[object]:
    """Unregister every process group; returns them, to be abandoned (see communicator)."""
    if not (dist.is_available() and dist.is_initialized()):
        return []
    groups: list[object] = list(distributed_c10d._world.pg_map)
    dist.destroy_process_group()
    return groups


def exchange_state(plan: messages.RestorePlan
                   ) -> tuple[snapshot_layout.SnapshotHeader, Any] | None:
    """This rank's snapshot (header, tree) when it goes over the network: sent to the ranks
    ``plan`` names, or received from the rank's peer, over the generation's process group;
    None when neither.

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
    return snapshot.decode(payload.numpy().data, name=name)
