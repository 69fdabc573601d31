"""Copying a snapshot's device tensors into host memory: asynchronous, committed only when done.

CUDA tensors are copied on a side stream per device, which first waits for the work already
queued on the device's current stream (so it copies the values the step produced), with
``non_blocking=True``; an event recorded after the copies is waited on before the caller
commits the snapshot. CPU tensors are copied at once; other devices synchronously.

The destination is the snapshot slot itself, registered with CUDA (``cudaHostRegister``, so its
pages are page-locked and the DMA engine writes straight into them) rather than pinned staging
buffers copied into the slot afterwards. Why this is sound, and better:

* one copy at the link's bandwidth, instead of a device-to-host copy plus a host memcpy of the
  whole state (single-threaded, slower than the link) and staging memory of the state's size;
* the slot is reserved once and reused (double buffering), so it is registered once, like
  buffers allocated once; a slot that is regrown is a new mapping, registered anew. The
  registration is dropped before the mapping is unmapped (a registered range that is unmapped
  leaves the driver holding the pages);
* the slot is a ``MAP_SHARED | MAP_POPULATE`` mapping of a tmpfs file: its pages are resident,
  and pinning them does not change what the agent reads;
* a worker killed mid-copy takes its CUDA context with it; the slot's sequence number stays odd,
  and the other slot still holds the previous step, as for a CPU copy;
* where registration is refused (a sandboxed driver, a memory-lock limit), the same copies still
  run, into pageable memory, which CUDA stages through its own pinned buffers and performs
  synchronously: correct and slower. That is logged once per slot.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import torch

__all__ = ["CudaCopies", "DeviceCopies", "HostRegistration", "PendingCopy", "copy_to_host"]

logger = logging.getLogger(__name__)

_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable: page-locked for every device's context


class PendingCopy(Protocol):
    def wait(self) -> None:
        """Return once every byte of the copy is in host memory.

        Raises:
            RuntimeError: the device reported an error for the copy.
        """


class DeviceCopies(Protocol):
    def start(self, device: torch.device,
              pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> PendingCopy:
        """Begin copying each (host target, device source) pair; returns what to wait on."""


class _Recorded:
    """Copies that end with an event: waited on from the host (``Event.wait`` would only make
    a stream wait, and the snapshot would be committed before its bytes are in)."""

    def __init__(self, done: torch.cuda.Event) -> None:
        self._done = done

    def wait(self) -> None:
        self._done.synchronize()


class CudaCopies:
    """One side stream per CUDA device, created on first use and reused."""

    def __init__(self) -> None:
        self._streams: dict[torch.device, torch.cuda.Stream] = {}

    def start(self, device: torch.device,
              pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> PendingCopy:
        side = self._streams.get(device)
        if side is None:
            side = self._streams[device] = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for target, source in pairs:
                target.copy_(source, non_blocking=True)
            done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            done.record(side)
        return _Recorded(done)


def copy_to_host(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], *,
                 engines: dict[str, DeviceCopies]) -> None:
    """Copy each (host target, source) pair; returns once every byte is in host memory.

    Sources on a device type that ``engines`` names go through that engine (all devices are
    started before any is waited on, so several devices copy at once); the rest are copied
    synchronously with ``copy_``.
    """
    grouped: dict[torch.device, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    targets, sources = [], []
    # is_cpu first, unless CPU tensors have an engine: it costs a fifth of building the
    # tensor's device, per tensor and copy.
    any_cpu = "cpu" in engines
    for target, source in pairs:
        if (any_cpu or not source.is_cpu) and source.device.type in engines:
            grouped.setdefault(source.device, []).append((target, source))
        else:
            targets.append(target)
            sources.append(source)
    if targets:  # one call for all: a copy_ per tensor costs more than a small tensor's bytes
        torch._foreach_copy_(targets, sources)
    pending = [engines[device.type].start(device, group) for device, group in grouped.items()]
    for copy in pending:
        copy.wait()


def _drain_last_error() -> None:
    """Take a refused registration's error off the CUDA runtime.

    The runtime keeps the error of a failed call as its "last error" until
    ``cudaGetLastError`` reads it; torch's binding of ``cudaHostRegister`` does not read it,
    and torch checks ``cudaGetLastError`` after each kernel launch, so the next kernel of
    training would fail with this error. The binding has no ``cudaGetLastError``: one trivial
    kernel launched here reads (and so clears) it, raising once, which is dropped. Only a
    sticky error (a broken context) survives this, and it would fail the next kernel anyway.
    """
    with contextlib.suppress(RuntimeError):
        torch.ones(1, device="cuda").add_(1)


class HostRegistration:
    """A host buffer's pages registered with CUDA for as long as this holds them."""

    def __init__(self, buffer: torch.Tensor, *, name: str,
                 runtime: Callable[[], object] = torch.cuda.cudart) -> None:
        """Nothing is registered until :meth:`ensure`.

        Args:
            buffer: contiguous host memory (a slot's mapping as a uint8 tensor).
            name: what the buffer is, in the log line when registration is refused.
            runtime: the CUDA runtime module (``torch.cuda.cudart``), for tests.
        """
        self._buffer = buffer
        self._name = name
        self._runtime = runtime
        self._registered = False
        self._refused = False

    @property
    def registered(self) -> bool:
        return self._registered

    def ensure(self) -> bool:
        """Register the buffer unless done (or refused) before; returns whether it is."""
        if self._registered or self._refused:
            return self._registered
        runtime = self._runtime()
        code = runtime.cudaHostRegister(  # type: ignore[attr-defined]
            self._buffer.data_ptr(), self._buffer.numel() * self._buffer.element_size(),
            _REGISTER_PORTABLE)
        if int(code) != 0:
            self._refused = True
            _drain_last_error()
            logger.warning("cudaHostRegister of %s refused (%s): snapshots of CUDA tensors "
                           "into it are synchronous copies through pageable memory",
                           self._name, runtime.cudaGetErrorString(code))  # type: ignore[attr-defined]
            return False
        self._registered = True
        return True

    def release(self) -> None:
        """Unregister (before the buffer's memory goes away); safe to call twice."""
        if not self._registered:
            return
        self._registered = False
        for index in range(torch.cuda.device_count()):  # no copy may still write into them
            torch.cuda.synchronize(index)
        self._runtime().cudaHostUnregister(self._buffer.data_ptr())  # type: ignore[attr-defined]
