"""Objects between ranks over torch.distributed (their pickles in uint8 tensors), with each
collective's work held here until the next one, so that this process frees it, not gloo.

Why held: gloo's worker thread drops its reference to a work after waking the caller. When that
reference is the last, the work's tensors are freed on the worker thread, which must take the
interpreter lock to free their Python objects. If the main thread has meanwhile begun the
interpreter's shutdown, taking the lock ends the worker thread, and the process aborts with
"terminate called without an active exception" (gloo's ``runLoop`` in ``~AsyncGatherWork``).
A rank whose last checkpoint's gather came just before its exit did so in about 1 run of 6 under
plain torchrun on 2 loaded cores, when the script kept its DDP model, and so the process group,
alive past ``destroy_process_group()``. Held here, a work is freed on the thread that calls the
next collective, or by the interpreter's own shutdown: on the main thread, which has the lock.

The tensors are on the CPU, or on this rank's GPU when the job's group carries only CUDA
tensors (``init_process_group("nccl")``), as torch's own object collectives do.
"""

from __future__ import annotations

import pickle
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = ["carries_cpu_tensors", "device", "from_rank0", "grouped", "hold", "to_rank0"]

T = TypeVar("T")

_held: list[Any] = []  # the last collective's works (which hold their tensors)


def grouped() -> bool:
    """Whether there is a process group to talk through."""
    return dist.is_available() and dist.is_initialized()


def carries_cpu_tensors() -> bool:
    """Whether the job's default group has a backend for CPU tensors."""
    return any(device.startswith("cpu:")
               for device in dist.get_backend_config().split(","))


def device() -> torch.device:
    """Where tensors for the job's default group go: the CPU when it carries them, else this
    rank's current GPU."""
    if carries_cpu_tensors():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def hold(*works: Any) -> None:
    """Wait for ``works`` (``async_op=True`` results) and keep them until the next call."""
    for work in works:
        work.wait()
    _held[:] = works


def from_rank0(value: T) -> T:
    """Rank 0's ``value``, on every rank."""
    if not grouped():
        return value
    rank, where = dist.get_rank(), device()
    payload = _encoded(value, where) if rank == 0 else torch.empty(0, dtype=torch.uint8)
    size = torch.tensor([payload.numel()], dtype=torch.int64, device=where)
    sent = dist.broadcast(size, src=0, async_op=True)
    sent.wait()
    if rank != 0:
        payload = torch.empty(int(size.item()), dtype=torch.uint8, device=where)
    hold(sent, dist.broadcast(payload, src=0, async_op=True))
    if rank == 0:
        return value
    result: T = pickle.loads(payload.cpu().numpy().tobytes())
    return result


def to_rank0(value: T) -> list[T] | None:
    """Every rank's ``value``, by rank, on rank 0 (None elsewhere), once every rank sent it."""
    if not grouped():
        return [value]
    world, rank, where = dist.get_world_size(), dist.get_rank(), device()
    payload = _encoded(value, where)
    sizes = [torch.zeros(1, dtype=torch.int64, device=where) for _ in range(world)]
    counted = dist.all_gather(
        sizes, torch.tensor([payload.numel()], dtype=torch.int64, device=where), async_op=True)
    counted.wait()
    lengths = [int(size.item()) for size in sizes]
    padded = torch.zeros(max(lengths), dtype=torch.uint8, device=where)
    padded[: payload.numel()] = payload
    gathered = ([torch.empty(max(lengths), dtype=torch.uint8, device=where)
                 for _ in range(world)] if rank == 0 else None)
    hold(counted, dist.gather(padded, gathered, dst=0, async_op=True))
    if gathered is None:
        return None
    return [pickle.loads(part[:length].cpu().numpy().tobytes())
            for part, length in zip(gathered, lengths, strict=True)]


def _encoded(value: Any, where: torch.device) -> torch.Tensor:
    return torch.frombuffer(bytearray(pickle.dumps(value)), dtype=torch.uint8).to(where)
