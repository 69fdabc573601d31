"""Shared-memory slots for snapshots, owned by the agent so they outlive any worker.

Each local rank has two slots (double buffering): a worker writes its next snapshot into the slot
that does not hold its newest committed one, so a crash during the copy leaves the previous
snapshot intact. A slot is an anonymous memory file (``memfd``) held open by the agent; workers and
the persister open it through ``/proc/<agent pid>/fd/<fd>``. It has no name in ``/dev/shm``, so
nothing leaks when the agent dies: the kernel frees the memory with the last descriptor.
Memory is reserved with ``posix_fallocate`` up front: a tmpfs page that cannot be backed would
otherwise kill the writing worker with SIGBUS in the middle of a copy.
"""

from __future__ import annotations

import dataclasses
import errno
import mmap
import os
from collections.abc import Callable
from pathlib import Path

import psutil

from trainguard import owner_only
from trainguard.ipc import snapshot_layout

__all__ = [
    "SLOTS_PER_RANK",
    "SlotState",
    "SnapshotMemoryError",
    "SnapshotSlots",
    "available_memory",
]

SLOTS_PER_RANK = 2
_HEADROOM = 1.10  # room for a state that grows a little (optimizer state appears after step 1)
_CGROUP = Path("/sys/fs/cgroup")


class SnapshotMemoryError(RuntimeError):
    """Not enough memory for a snapshot slot; the message gives the sizes."""


def available_memory() -> int:
    """Bytes that can still be reserved: the host's available memory within the cgroup limit."""
    available = psutil.virtual_memory().available
    try:
        limit = (_CGROUP / "memory.max").read_text().strip()
        if limit != "max":
            used = int((_CGROUP / "memory.current").read_text())
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available


def _gigabytes(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


@dataclasses.dataclass(frozen=True)
class SlotState:
    rank: int
    slot: int
    header: snapshot_layout.SnapshotHeader


@dataclasses.dataclass
class _Slot:
    descriptor: int
    capacity: int


class SnapshotSlots:
    def __init__(self, *, available: Callable[[], int] = available_memory,
                 reserve_fraction: float = 0.9) -> None:
        self._available = available
        self._reserve_fraction = reserve_fraction
        self._slots: dict[tuple[int, int], _Slot] = {}

    def path(self, rank: int, slot: int) -> str:
        """Where other processes open the slot; empty when it has no memory yet."""
        held = self._slots.get((rank, slot))
        return f"/proc/{os.getpid()}/fd/{held.descriptor}" if held else ""

    @property
    def total_bytes(self) -> int:
        return sum(held.capacity for held in self._slots.values())

    def grant(self, rank: int, slot: int, nbytes: int) -> tuple[str, int]:
        """A slot of at least ``nbytes`` for ``rank``; returns (path, capacity).

        Raises:
            SnapshotMemoryError: the memory cannot be reserved (sizes in the message).
            ValueError: ``slot`` is not 0 or 1.
        """
        if slot not in range(SLOTS_PER_RANK):
            raise ValueError(f"slot must be 0 or 1, got {slot}")
        held = self._slots.get((rank, slot))
        if held is not None and held.capacity >= nbytes:
            return self.path(rank, slot), held.capacity
        capacity = mmap.PAGESIZE * -(-int(nbytes * _HEADROOM) // mmap.PAGESIZE)
        # The old slot is released only once the new one is reserved: both exist for a moment.
        free = int(self._available() * self._reserve_fraction)
        if capacity > free:
            raise SnapshotMemoryError(
                f"rank {rank} needs {_gigabytes(capacity)} of shared memory for a snapshot slot "
                f"(two per rank), but only {_gigabytes(free)} can be reserved on this host; "
                "free memory, checkpoint a smaller state, or run fewer ranks per host")
        descriptor = os.memfd_create(f"trainguard-rank{rank}-slot{slot}", os.MFD_CLOEXEC)
        try:
            os.fchmod(descriptor, owner_only.FILE_MODE)  # a memfd is born 0777
            os.posix_fallocate(descriptor, 0, capacity)
        except OSError as error:
            os.close(descriptor)
            if error.errno in (errno.ENOSPC, errno.ENOMEM):
                raise SnapshotMemoryError(
                    f"rank {rank}: reserving {_gigabytes(capacity)} of shared memory failed: "
                    f"{error.strerror}") from error
            raise
        if held is not None:
            os.close(held.descriptor)
        self._slots[(rank, slot)] = _Slot(descriptor, capacity)
        return self.path(rank, slot), capacity

    def header(self, rank: int, slot: int) -> snapshot_layout.SnapshotHeader | None:
        held = self._slots.get((rank, slot))
        if held is None:
            return None
        data = os.pread(held.descriptor, snapshot_layout.HEADER_SIZE, 0)
        try:
            return snapshot_layout.SnapshotHeader.unpack(data, size=held.capacity)
        except snapshot_layout.LayoutError:
            return None

    def writing(self, rank: int) -> bool:
        """Whether a snapshot is being written into one of the rank's slots (its sequence lock
        is odd); a slot whose writer died mid-copy stays so."""
        for slot in range(SLOTS_PER_RANK):
            held = self._slots.get((rank, slot))
            if held is not None and snapshot_layout.read_seq(
                    os.pread(held.descriptor, snapshot_layout.HEADER_SIZE, 0)) % 2:
                return True
        return False

    def committed(self, rank: int) -> list[SlotState]:
        """The rank's complete snapshots, newest step first; of two of the same step, the one
        committed last first (a snapshot completed with a lost rank's share holds more)."""
        found = []
        for slot in range(SLOTS_PER_RANK):
            header = self.header(rank, slot)
            if header is not None and header.committed:
                found.append(SlotState(rank, slot, header))
        return sorted(found, key=lambda state: (-state.header.step,
                                                -state.header.created_unix_ns))

    def verify(self, state: SlotState) -> str | None:
        """None when the slot still holds an intact copy of ``state``, else what is wrong."""
        held = self._slots[(state.rank, state.slot)]
        memory = mmap.mmap(held.descriptor, held.capacity, prot=mmap.PROT_READ)
        try:
            if snapshot_layout.read_seq(memory) != state.header.seq:
                return "overwritten since it was listed"
            if not state.header.has_checksum:
                return None  # committed moments before the fault, not hashed yet: seq vouches
            actual = snapshot_layout.compute_checksum(memory, state.header)
            if actual != state.header.checksum:
                return (f"checksum {actual:016x} does not match the recorded "
                        f"{state.header.checksum:016x}")
            return None
        finally:
            memory.close()

    def holders(self, state: SlotState) -> set[int]:
        """The ranks whose snapshots hold the tensors this one leaves to them (shares)."""
        held = self._slots[(state.rank, state.slot)]
        table = os.pread(held.descriptor, state.header.table_len, state.header.table_offset)
        try:
            return {entry.holder for entry in snapshot_layout.decode_table(table)
                    if entry.holder is not None}
        except snapshot_layout.LayoutError:
            return set()  # overwritten since it was listed: verify() rejects it

    def invalidate(self, rank: int, slot: int) -> None:
        """Make a slot hold nothing (a snapshot from a timeline that was rolled back)."""
        held = self._slots.get((rank, slot))
        if held is not None:
            os.pwrite(held.descriptor, bytes(snapshot_layout.HEADER_SIZE), 0)

    def ranks(self) -> set[int]:
        return {rank for rank, _ in self._slots}

    def close(self) -> None:
        for held in self._slots.values():
            os.close(held.descriptor)
        self._slots.clear()
