"""Copy a state tree into a snapshot slot, and read one back (layout: ipc.snapshot_layout).

The state tree is pickled with every tensor replaced by a persistent id, so pickling costs
microseconds whatever the model size; the tensors' bytes are then copied straight into the
memory-mapped slot, which is the stall training pays: ``Tensor.copy_`` for CPU tensors, an
asynchronous device-to-host copy on a side stream for CUDA tensors (:mod:`.device_copy`), and
the snapshot is committed only once every copy is done. A restore puts each tensor back on the
device it was saved from.

Why one module past 500 lines: it is the snapshot format's writer and its reader, which change
together (a table field laid out in ``_lay_out`` is read back in ``decode`` and
``copy_tensors``; the sequence lock ``MappedSlot`` takes is the one ``_header`` checks). What
changes for other reasons already lives apart: the byte layout and its codec
(:mod:`trainguard.ipc.snapshot_layout`), device copies (:mod:`.device_copy`), which tensors a
rank writes (:mod:`.replica_shares`), and where slots come from (:mod:`.agent_memory`).
"""

from __future__ import annotations

import collections
import dataclasses
import io
import mmap
import os
import pickle
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import torch

from trainguard.ipc import snapshot_layout
from trainguard.train import device_copy

__all__ = [
    "Absent",
    "HolderRule",
    "Layouts",
    "MappedSlot",
    "Prepared",
    "SnapshotError",
    "copy_tensors",
    "decode",
    "flatten",
    "on_host",
    "prepare",
    "read_snapshot",
    "relaid",
    "snapshot_bytes",
]


class SnapshotError(RuntimeError):
    """A state that cannot be snapshotted, or a snapshot that cannot be read."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


_PLAIN = frozenset({str, int, float, bool, type(None), bytes, dict, list, tuple,
                    collections.OrderedDict})
"""Types a tree holds most of, never tensors."""


class _TensorPickler(pickle.Pickler):
    """Pickles a tree with each tensor replaced by its number in :attr:`tensors`; one class
    for every call, since a class made per call costs more than pickling a small tree."""

    def __init__(self, buffer: io.BytesIO, sources: list[int] | None) -> None:
        super().__init__(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors: list[torch.Tensor] = []
        self.index: dict[int, int] = {}
        self.sources = sources

    def persistent_id(self, obj: Any) -> int | None:
        # Called for every object of the tree, keys and numbers included: the plain types
        # are turned away first, at the cost of one set lookup.
        kind = type(obj)
        if kind in _PLAIN or (kind is not torch.Tensor and not isinstance(obj, torch.Tensor)):
            return None
        key = id(obj)
        number = self.index.get(key)
        if number is not None:
            return number
        if obj.layout is not torch.strided or obj.is_quantized:
            raise SnapshotError(f"cannot snapshot a {obj.layout} tensor; convert it to dense")
        number = self.index[key] = len(self.tensors)
        self.tensors.append(obj.detach() if obj.requires_grad else obj)
        if self.sources is not None:
            self.sources.append(key)
        return number


def flatten(tree: Any, *, sources: list[int] | None = None) -> tuple[bytes, list[torch.Tensor]]:
    """Pickle ``tree`` with tensors taken out; returns (pickle, tensors by persistent id).
    ``sources``, when given, receives the ``id()`` of each tensor of the tree, in that order."""
    buffer = io.BytesIO()
    pickler = _TensorPickler(buffer, sources)
    pickler.dump(tree)
    return buffer.getvalue(), pickler.tensors


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A state tree laid out for a slot: what to write where, and the bytes needed."""

    skeleton: bytes
    tensors: list[torch.Tensor]
    entries: list[snapshot_layout.TensorEntry]
    table: bytes
    payload_offset: int
    payload_len: int

    @property
    def table_offset(self) -> int:
        return snapshot_layout.HEADER_SIZE

    @property
    def skeleton_offset(self) -> int:
        return self.table_offset + len(self.table)

    @property
    def nbytes(self) -> int:
        return self.payload_offset + self.payload_len


HolderRule = Callable[[Any, list[torch.Tensor], list[int]], list[int | None] | None]
"""Given a tree, its tensors in pickling order and each one's ``id()`` in the tree: the rank
whose snapshot holds each tensor instead of this one (None: this one), or None when every
tensor is here. Applied to the tensors the pickler found, so that the tree is walked once."""


def prepare(tree: Any, *, elsewhere: Mapping[int, int] | None = None) -> Prepared:
    """Lay ``tree`` out; ``elsewhere`` maps the ``id()`` of a tensor of the tree to the rank
    whose snapshot holds it instead (its share of replicated state): it gets no bytes here."""
    return Layouts().prepare(tree, holders=None if not elsewhere else (
        lambda _tree, _tensors, sources: [elsewhere.get(source) for source in sources]))


class Layouts:
    """Prepares trees, reusing the last tensor table while the tensors keep their dtypes,
    shapes, devices and holders: a training loop snapshots the same tensors every step, and
    building the table is a good part of what a small snapshot costs."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._entries: list[snapshot_layout.TensorEntry] = []
        self._table = b""
        self._payload_len = 0

    def prepare(self, tree: Any, *, holders: HolderRule | None = None) -> Prepared:
        """See :func:`prepare`; ``holders`` says which tensors other snapshots hold."""
        sources: list[int] = []
        skeleton, tensors = flatten(tree, sources=sources)
        held = (holders(tree, tensors, sources) if holders is not None else None
                ) or [None] * len(tensors)
        # A CPU tensor's device is keyed as True: building its device object costs more
        # than the rest of its key.
        key = tuple(zip([(t.dtype, t.shape, t.is_cpu or t.device) for t in tensors], held,
                        strict=True))
        if key != self._key:
            self._entries, self._payload_len = _lay_out(tensors, held)
            self._table = snapshot_layout.encode_table(self._entries)
            self._key = key
        return Prepared(skeleton, tensors, self._entries, self._table,
                        _payload_offset(self._table, skeleton), self._payload_len)


def relaid(prepared: Prepared, holders: list[int | None],
           tensors: list[torch.Tensor]) -> Prepared:
    """``prepared``'s tree laid out again with other ``holders``, each tensor's bytes to be
    copied from ``tensors`` (a tensor held elsewhere is not read)."""
    entries, payload_len = _lay_out(tensors, holders)
    table = snapshot_layout.encode_table(entries)
    return Prepared(prepared.skeleton, tensors, entries, table,
                    _payload_offset(table, prepared.skeleton), payload_len)


def _payload_offset(table: bytes, skeleton: bytes) -> int:
    """The payload starts on the page after the header, the table and the skeleton."""
    head = snapshot_layout.HEADER_SIZE + len(table) + len(skeleton)
    return -(-head // mmap.PAGESIZE) * mmap.PAGESIZE


def _lay_out(tensors: list[torch.Tensor], holders: list[int | None]
             ) -> tuple[list[snapshot_layout.TensorEntry], int]:
    """Each tensor's table entry, and the payload's length."""
    entries = []
    offset = 0
    for tensor, holder in zip(tensors, holders, strict=True):
        nbytes = tensor.numel() * tensor.element_size() if holder is None else 0
        entries.append(snapshot_layout.TensorEntry(
            _dtype_name(tensor.dtype), tuple(tensor.shape), offset, nbytes,
            device=str(tensor.device), holder=holder))
        offset = snapshot_layout.align(offset + nbytes)
    return entries, offset


class MappedSlot:
    """One shared-memory slot mapped into this process for writing."""

    def __init__(self, path: str, *, register_with_cuda: bool = False,
                 engines: dict[str, device_copy.DeviceCopies] | None = None) -> None:
        """Map the slot.

        Args:
            register_with_cuda: page-lock the mapping with CUDA the first time CUDA tensors
                are written into it, so they are copied asynchronously and straight in: for a
                slot reused snapshot after snapshot, not for a file written once.
            engines: how tensors of each device type are copied (default: CUDA's side
                streams); others are copied synchronously.
        """
        descriptor = os.open(path, os.O_RDWR)
        try:
            self.capacity = os.fstat(descriptor).st_size
            # MAP_POPULATE maps every page now, so the first copy does not pay page faults.
            self.memory = mmap.mmap(descriptor, self.capacity,
                                    flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
        finally:
            os.close(descriptor)
        self.bytes = torch.frombuffer(self.memory, dtype=torch.uint8)
        self.path = path
        self._engines: dict[str, device_copy.DeviceCopies] = (
            engines if engines is not None else {"cuda": device_copy.CudaCopies()})
        self._registration = (device_copy.HostRegistration(self.bytes, name=path)
                              if register_with_cuda else None)
        self._views: tuple[tuple[int, list[snapshot_layout.TensorEntry]],
                           list[torch.Tensor | None]] | None = None

    @property
    def page_locked(self) -> bool:
        """Whether CUDA copies land in this slot asynchronously (its pages are registered)."""
        return self._registration is not None and self._registration.registered

    def views(self, snapshot: Prepared) -> list[torch.Tensor | None]:
        """Where each tensor's bytes go in this slot (None: held elsewhere); the views of the
        last layout are kept, since each costs more than copying a small tensor."""
        key = (snapshot.payload_offset, snapshot.entries)
        if self._views is not None and self._views[0][0] == key[0] and (
                self._views[0][1] is key[1]):
            return self._views[1]
        targets: list[torch.Tensor | None] = []
        for tensor, entry in zip(snapshot.tensors, snapshot.entries, strict=True):
            start = snapshot.payload_offset + entry.offset
            targets.append(self.bytes[start : start + entry.nbytes].view(tensor.dtype).view(
                tensor.shape) if entry.nbytes else None)
        self._views = (key, targets)
        return targets

    def close(self) -> None:
        self._views = None
        if self._registration is not None:
            self._registration.release()
        del self.bytes
        self.memory.close()

    def write(self, snapshot: Prepared, *, step: int, generation: int, rank: int,
              world_size: int) -> int:
        """Copy ``snapshot`` in under the sequence lock; returns the committed seq.

        Raises:
            SnapshotError: it does not fit the slot.
        """
        return self.begin_write(snapshot, step=step, generation=generation, rank=rank,
                                world_size=world_size)()

    def begin_write(self, snapshot: Prepared, *, step: int, generation: int, rank: int,
                    world_size: int, later: Collection[int] = ()) -> Callable[[], int]:
        """Open the sequence lock and copy every tensor but those numbered in ``later``;
        returns the call that copies those and commits (its result: the committed seq). Until
        it returns, the slot holds no snapshot, and the ``later`` tensors must not change.

        Raises:
            SnapshotError: it does not fit the slot.
        """
        if snapshot.nbytes > self.capacity:
            raise SnapshotError(
                f"snapshot of {snapshot.nbytes} bytes does not fit the slot's {self.capacity}")
        previous = snapshot_layout.read_seq(self.memory)
        writing = previous + 1 if previous % 2 == 0 else previous + 2
        snapshot_layout.write_seq(self.memory, writing)
        self.memory[snapshot.table_offset : snapshot.skeleton_offset] = snapshot.table
        end = snapshot.skeleton_offset + len(snapshot.skeleton)
        self.memory[snapshot.skeleton_offset : end] = snapshot.skeleton
        now: list[tuple[torch.Tensor, torch.Tensor]] = []
        then: list[tuple[torch.Tensor, torch.Tensor]] = []
        for index, (target, tensor) in enumerate(zip(self.views(snapshot), snapshot.tensors,
                                                     strict=True)):
            if target is not None:
                (then if index in later else now).append((target, tensor))
        if self._registration is not None and any(t.is_cuda for _, t in now + then):
            self._registration.ensure()
        device_copy.copy_to_host(now, engines=self._engines)

        def finish() -> int:
            # Returns once every byte is in the slot: only then is the snapshot committed.
            device_copy.copy_to_host(then, engines=self._engines)
            header = snapshot_layout.SnapshotHeader(
                seq=writing, step=step, generation=generation, rank=rank,
                world_size=world_size, table_offset=snapshot.table_offset,
                table_len=len(snapshot.table), skeleton_offset=snapshot.skeleton_offset,
                skeleton_len=len(snapshot.skeleton), payload_offset=snapshot.payload_offset,
                payload_len=snapshot.payload_len, created_unix_ns=time.time_ns())
            packed = header.pack()
            self.memory[: len(packed)] = packed
            snapshot_layout.write_seq(self.memory, writing + 1)
            return writing + 1

        return finish


@dataclasses.dataclass(frozen=True)
class Absent:
    """A tensor of a decoded tree whose bytes are in another rank's snapshot (its share):
    ``tensor`` is allocated, uninitialised, and is to be filled from ``holder``."""

    index: int
    tensor: torch.Tensor
    holder: int


def read_snapshot(path: str, *, copy: Callable[[torch.Tensor], torch.Tensor] = torch.clone,
                  absent: list[Absent] | None = None,
                  live: Mapping[int, torch.Tensor] | None = None
                  ) -> tuple[snapshot_layout.SnapshotHeader, Any]:
    """Read a committed snapshot (memory slot or shard file) into new tensors; see
    :func:`decode` for ``absent`` and ``live``.

    Raises:
        SnapshotError: the file is not a complete snapshot.
    """
    memory = _map_private(path)
    try:
        return decode(memory, name=path, copy=copy, absent=absent, live=live)
    finally:
        memory.close()


def on_host(path: str) -> bool:
    """Whether every tensor of the committed snapshot in ``path`` was saved from host memory
    (a restore of it creates no device tensors).

    Raises:
        SnapshotError: the file is not a complete snapshot.
    """
    memory = _map_private(path)
    try:
        return all(entry.device == "cpu" for entry in _table(memory, name=path)[1])
    finally:
        memory.close()


def copy_tensors(path: str, targets: Mapping[int, torch.Tensor]) -> None:
    """Copy tensors of the committed snapshot in ``path`` into ``targets`` (index -> tensor of
    the same type and shape): the shares another rank's snapshot leaves to this one. Straight
    from the mapping into the target, one copy.

    Raises:
        SnapshotError: the file is not a complete snapshot, does not hold them, or holds one of
            another type or shape.
    """
    memory = _map_private(path)
    try:
        header, entries = _table(memory, name=path)
        raw = torch.frombuffer(memory, dtype=torch.uint8)
        try:
            for index, target in targets.items():
                entry = entries[index] if index < len(entries) else None
                if entry is None or entry.holder is not None:
                    raise SnapshotError(f"{path} does not hold tensor {index} of the state")
                dtype, shape = getattr(torch, entry.dtype), torch.Size(entry.shape)
                if dtype != target.dtype or shape != target.shape:
                    raise SnapshotError(
                        f"{path}: tensor {index} is {dtype} {tuple(shape)}, not the "
                        f"{target.dtype} {tuple(target.shape)} its replica expects")
                start = header.payload_offset + entry.offset
                target.copy_(raw[start : start + entry.nbytes].view(dtype).view(shape))
        finally:
            del raw
    finally:
        memory.close()


def snapshot_bytes(path: str) -> torch.Tensor:
    """The committed snapshot in ``path`` as one uint8 tensor (a private copy), for sending it
    to a peer.

    Raises:
        SnapshotError: the file is not a complete snapshot.
    """
    memory = _map_private(path)
    try:
        header = _header(memory, name=path)
        used = header.payload_offset + header.payload_len
        return torch.frombuffer(memory, dtype=torch.uint8, count=used).clone()
    finally:
        memory.close()


def _map_private(path: str) -> mmap.mmap:
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError as error:
        raise SnapshotError(f"cannot open snapshot {path}: {error}") from error
    try:
        size = os.fstat(descriptor).st_size
        if size < snapshot_layout.HEADER_SIZE:
            raise SnapshotError(f"{path} has {size} bytes: too short for a snapshot")
        # A private writable mapping: torch.frombuffer wants a writable buffer, and no write
        # through it can reach the file.
        return mmap.mmap(descriptor, size, flags=mmap.MAP_PRIVATE,
                         prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(descriptor)


def _table(memory: Any, *, name: str
           ) -> tuple[snapshot_layout.SnapshotHeader, list[snapshot_layout.TensorEntry]]:
    """The header and tensor table of the committed snapshot in ``memory``.

    Raises:
        SnapshotError: it is not a complete snapshot.
    """
    header = _header(memory, name=name)
    try:
        return header, snapshot_layout.decode_table(
            bytes(memory[header.table_offset : header.table_offset + header.table_len]))
    except snapshot_layout.LayoutError as error:
        raise SnapshotError(f"{name}: {error}") from error


def _header(memory: Any, *, name: str) -> snapshot_layout.SnapshotHeader:
    try:
        header = snapshot_layout.SnapshotHeader.unpack(memory, size=len(memory))
    except snapshot_layout.LayoutError as error:
        raise SnapshotError(f"{name}: {error}") from error
    if not header.committed:
        raise SnapshotError(f"{name} holds no complete snapshot (seq {header.seq})")
    return header


def decode(memory: Any, *, name: str,
           copy: Callable[[torch.Tensor], torch.Tensor] = torch.clone,
           absent: list[Absent] | None = None,
           live: Mapping[int, torch.Tensor] | None = None
           ) -> tuple[snapshot_layout.SnapshotHeader, Any]:
    """Decode a committed snapshot held in a writable buffer (a mapping, or bytes received
    from a peer); ``name`` says where it came from, in errors. Tensors that another rank's
    snapshot holds are appended to ``absent``, to be filled by the caller. ``live``: by index,
    tensors that the caller knows still hold what the snapshot saved (its own, unchanged since):
    put into the tree as they are, neither read nor filled, when their type and shape match.

    Raises:
        SnapshotError: the buffer is not a complete snapshot, or holds only a share of the
            state and ``absent`` is None.
    """
    header, entries = _table(memory, name=name)
    skeleton = bytes(
        memory[header.skeleton_offset : header.skeleton_offset + header.skeleton_len])
    raw = torch.frombuffer(memory, dtype=torch.uint8)
    tensors: list[torch.Tensor] = []
    for entry in entries:
        dtype = getattr(torch, entry.dtype)
        device = _restore_device(entry.device, name=name)
        start = header.payload_offset + entry.offset
        kept = live.get(len(tensors)) if live else None
        if (kept is not None and kept.dtype == dtype and kept.shape == torch.Size(entry.shape)
                and kept.device == device):
            tensors.append(kept)
        elif entry.holder is not None:
            if absent is None:
                raise SnapshotError(
                    f"{name} holds only a share of the replicated state (tensor "
                    f"{len(tensors)} is in rank {entry.holder}'s snapshot); load it with "
                    "the shares of its replica group")
            # Filled from its holder over the CPU transfer path.
            tensors.append(torch.empty(entry.shape, dtype=dtype))
            absent.append(Absent(len(tensors) - 1, tensors[-1], entry.holder))
        elif not entry.nbytes:
            tensors.append(torch.empty(entry.shape, dtype=dtype, device=device))
        else:
            view = raw[start : start + entry.nbytes].view(dtype).view(entry.shape)
            # A copy onto the device is already a copy out of the buffer.
            tensors.append(copy(view) if device.type == "cpu" else view.to(device))
    del raw

    class _Unpickler(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            return tensors[int(pid)]

    tree = _Unpickler(io.BytesIO(skeleton)).load()
    return header, tree


def _restore_device(saved: str, *, name: str) -> torch.device:
    """The device a tensor saved on ``saved`` goes back to: the same one (device indices are
    kept across restarts, also for a rank moved to a spare: docs/device-placement.md).

    Raises:
        SnapshotError: this process does not have that device.
    """
    device = torch.device(saved)
    if device.type == "cpu":
        return device
    module = getattr(torch, device.type, None)
    count = module.device_count() if module is not None and module.is_available() else 0
    if (device.index or 0) >= count:
        raise SnapshotError(
            f"{name} holds tensors saved on {saved}, but this process sees {count} "
            f"{device.type} device(s): restore where that device is visible, or load the "
            "shard without trainguard (docs/checkpoint-format.md), which gives CPU tensors")
    return device
