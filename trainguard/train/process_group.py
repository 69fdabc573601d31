"""What the session does with torch.distributed: leave a generation's process groups, and move
a rank's state between replicas (R6).

No rank waits for its generation's rendezvous store: the agent hosts it before any worker of
the generation starts or is told to rejoin (:mod:`.rendezvous_host`), so ``init_process_group``
connects at once and never meets its connect backoff.

Leaving depends on the backend. NCCL communicators are aborted through torch
(``ProcessGroupNCCL.abort()``, from any thread: it is what torch's own watchdog calls; then
``_abort_process_group`` unregisters every group), which ends their kernels still waiting on a
peer. Gloo has no working abort (:mod:`.communicator` cuts its sockets instead), so a gloo-only
generation is unregistered with ``destroy_process_group``. Under :meth:`Session.run` the NCCL
watchdog is told to clean up after an error without ending the process
(``TORCH_NCCL_ASYNC_ERROR_HANDLING=2``, unless the user set it): the rank then leaves its
generation instead of dying.

A rank's state travels as one CPU byte tensor. When the job's group cannot carry CPU tensors
(``init_process_group("nccl")``), it goes over a gloo group of the sender and that receiver,
formed by those two ranks alone (``use_local_synchronization``), so no other rank takes part.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from trainguard.ipc import messages, snapshot_layout
from trainguard.train import collectives, snapshot

__all__ = ["ExchangeError", "abort_nccl", "drop", "exchange_state", "exchanges",
           "keep_process_on_nccl_errors"]

_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
_CLEAN_UP_ONLY = "2"  # abort the communicators, raise in the waiting work, keep the process


class ExchangeError(RuntimeError):
    """The state cannot come over the network this way; the message says what to change."""


def keep_process_on_nccl_errors(environ: MutableMapping[str, str] = os.environ) -> None:
    """Let an NCCL error or timeout reach the training thread instead of ending the process
    (torch's default, 3, tears the process down); read when an NCCL group is created."""
    environ.setdefault(_ERROR_HANDLING, _CLEAN_UP_ONLY)


def _nccl(group: dist.ProcessGroup) -> Any:
    """The group's NCCL backend, or None."""
    if not dist.is_nccl_available():
        return None
    try:
        backend = group._get_backend(torch.device("cuda"))
    except RuntimeError:  # no backend for CUDA tensors in this group
        return None
    return backend if isinstance(backend, dist.ProcessGroupNCCL) else None


def _groups() -> list[dist.ProcessGroup]:
    if not collectives.grouped():
        return []
    return list(distributed_c10d._world.pg_map)


def abort_nccl() -> int:
    """Abort the NCCL communicator of every registered group; returns how many. Safe from any
    thread, and more than once."""
    backends = [backend for backend in map(_nccl, _groups()) if backend is not None]
    for backend in backends:
        backend.abort()
    return len(backends)


def drop() -> list[object]:
    """Unregister every process group (aborting NCCL's); returns them, to be abandoned (see
    communicator)."""
    groups = _groups()
    if any(_nccl(group) is not None for group in groups):
        distributed_c10d._abort_process_group()
    elif groups:
        dist.destroy_process_group()
    return list(groups)


def _cpu_group(peer: int) -> dist.ProcessGroup | None:
    """The group that carries CPU tensors between this rank and ``peer``: None for the default
    group, else a gloo group of the two (both call this; no other rank needs to)."""
    if collectives.carries_cpu_tensors():
        return None
    pair = sorted((dist.get_rank(), peer))
    for existing in _groups():  # formed by an earlier exchange of this generation
        if (existing is not dist.group.WORLD and dist.get_process_group_ranks(existing) == pair
                and dist.get_backend(existing) == dist.Backend.GLOO):
            return existing
    group = dist.new_group(pair, backend="gloo", use_local_synchronization=True)
    assert isinstance(group, dist.ProcessGroup)  # this rank is a member
    return group


def exchanges(plan: messages.RestorePlan) -> bool:
    """Whether ``plan`` sends or receives a snapshot over the process group."""
    return plan.source is messages.RestoreSource.PEER or bool(plan.send_to)


def exchange_state(plan: messages.RestorePlan, *, absent: list[snapshot.Absent] | None = None
                   ) -> tuple[snapshot_layout.SnapshotHeader, Any] | None:
    """This rank's snapshot (header, tree) when it goes over the network: sent to the ranks
    ``plan`` names, or received from the rank's peer, over the generation's process group;
    None when neither. ``absent``: see :func:`snapshot.decode`.

    Raises:
        ExchangeError: the process group does not exist yet.
        snapshot.SnapshotError: what was sent or read is not a complete snapshot.
    """
    if not exchanges(plan):
        return None
    if not collectives.grouped():
        raise ExchangeError("the state comes from a data-parallel peer this time, which needs "
                            "the process group: call restore() after init_process_group()")
    if plan.source is messages.RestoreSource.PEER and plan.peer is not None:
        group = _cpu_group(plan.peer)
        size = torch.zeros(1, dtype=torch.int64)
        dist.recv(size, src=plan.peer, group=group)
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
        dist.recv(payload, src=plan.peer, group=group)
        name = f"rank {plan.peer}'s snapshot"
    else:
        payload = snapshot.snapshot_bytes(plan.path)  # read once, for every receiver
        for rank in plan.send_to:
            group = _cpu_group(rank)
            dist.send(torch.tensor([payload.numel()], dtype=torch.int64), dst=rank, group=group)
            dist.send(payload, dst=rank, group=group)
        name = plan.path
    # Copied out: the restored state (an optimizer's, say) may keep the tensors it is given.
    return snapshot.decode(payload.numpy().data, name=name, absent=absent)
