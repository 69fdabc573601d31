"""Byte layout of one rank's state snapshot, in shared memory and in a persisted shard file.

A shard file on disk is a byte-for-byte copy of a committed shared-memory slot, so the persister
copies bytes and never interprets tensors. Layout (little-endian)::

    [0, 4096)            header, struct HEADER_FORMAT (fields of SnapshotHeader, in order)
    [table_offset, +len) UTF-8 JSON {"tensors": [{"dtype", "shape", "offset", "nbytes"}, ...]};
                         offset is relative to payload_offset; dtype is torch's name ("float32");
                         "device" ("cuda:0") only for a tensor that was not on the CPU;
                         an entry with "holder": r has no bytes here (nbytes 0): the tensor is
                         in rank r's snapshot of the same step, at the same index (a share of
                         state that is identical across data-parallel replicas)
    [skeleton_offset,..) a pickle of the state tree in which tensor i is pickle persistent id i
    [payload_offset, ..) tensor bytes, each tensor contiguous and 64-byte aligned

Writers follow a sequence lock: ``seq`` is odd while the slot is being written and even once the
snapshot is complete, so a reader that sees an even ``seq`` before and after reading got a
consistent snapshot, and a writer killed mid-copy leaves an odd ``seq`` behind. Every write and
read of ``seq`` (:func:`write_seq`, :func:`read_seq`), and every header read, has a memory fence
on either side that keeps the snapshot's bytes on their side of it on weakly ordered machines
(:mod:`.memory_fence`).

``checksum`` is xxh3-64 of bytes ``[HEADER_SIZE, payload_offset + payload_len)``, valid when
``checksum_seq == seq``; it is computed off the training path (by the agent's persister), so a
just-committed snapshot may not carry one yet. ``docs/checkpoint-format.md`` shows how to load a
shard with only ``json``, ``pickle``, ``struct`` and ``torch``.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Sequence
from typing import Any

import xxhash

from trainguard.ipc import memory_fence

__all__ = [
    "ALIGNMENT",
    "HEADER_FORMAT",
    "HEADER_SIZE",
    "MAGIC",
    "VERSION",
    "LayoutError",
    "SnapshotHeader",
    "TensorEntry",
    "align",
    "compute_checksum",
    "decode_table",
    "encode_table",
    "read_seq",
    "write_checksum",
    "write_seq",
]

MAGIC = b"TGSNAP01"
VERSION = 1
HEADER_SIZE = 4096
ALIGNMENT = 64
HEADER_FORMAT = "<8sIIQqQIIQQQQQQQQQ"
_HEADER = struct.Struct(HEADER_FORMAT)
_SEQ = struct.Struct("<Q")
_SEQ_OFFSET = 16
_CHECKSUM_OFFSET = 96  # checksum and checksum_seq, two u64


class LayoutError(ValueError):
    """Bytes that are not a usable snapshot; the message says which part is wrong."""


def align(offset: int) -> int:
    return (offset + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclasses.dataclass(frozen=True)
class SnapshotHeader:
    seq: int
    step: int
    generation: int
    rank: int
    world_size: int
    table_offset: int
    table_len: int
    skeleton_offset: int
    skeleton_len: int
    payload_offset: int
    payload_len: int
    checksum: int = 0
    checksum_seq: int = 0
    created_unix_ns: int = 0

    @property
    def end(self) -> int:
        """Bytes the snapshot occupies, header included."""
        return self.payload_offset + self.payload_len

    @property
    def committed(self) -> bool:
        return self.seq > 0 and self.seq % 2 == 0

    @property
    def has_checksum(self) -> bool:
        return self.checksum_seq == self.seq and self.committed

    def pack(self) -> bytes:
        return _HEADER.pack(
            MAGIC,
            VERSION,
            HEADER_SIZE,
            self.seq,
            self.step,
            self.generation,
            self.rank,
            self.world_size,
            self.table_offset,
            self.table_len,
            self.skeleton_offset,
            self.skeleton_len,
            self.payload_offset,
            self.payload_len,
            self.checksum,
            self.checksum_seq,
            self.created_unix_ns,
        )

    @classmethod
    def unpack(cls, buffer: Any, *, size: int | None = None) -> SnapshotHeader:
        """Read and check a header; ``size`` is the bytes available behind it, if known.

        Raises:
            LayoutError: wrong magic or version, or regions outside ``size``.
        """
        if len(buffer) < _HEADER.size:
            raise LayoutError(f"{len(buffer)} bytes is too short for a snapshot header")
        fields = _HEADER.unpack_from(buffer, 0)
        memory_fence.fence()  # its seq is a sequence lock's first read: the bytes read after
        magic, version, header_size = fields[0], fields[1], fields[2]
        if magic != MAGIC:
            raise LayoutError(f"not a trainguard snapshot (magic {magic!r})")
        if version != VERSION or header_size != HEADER_SIZE:
            raise LayoutError(f"unsupported snapshot version {version} (header {header_size})")
        header = cls(*fields[3:])
        limit = size if size is not None else len(buffer)
        regions = (
            ("table", header.table_offset, header.table_len),
            ("skeleton", header.skeleton_offset, header.skeleton_len),
            ("payload", header.payload_offset, header.payload_len),
        )
        for name, offset, length in regions:
            if header.committed and (offset < HEADER_SIZE or offset + length > limit):
                raise LayoutError(
                    f"{name} region [{offset}, {offset + length}) lies outside the {limit} bytes"
                )
        return header


@dataclasses.dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lies, relative to the payload start."""

    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    device: str = "cpu"
    """Where the tensor lived when it was saved (torch's name, ``cuda:0``), and where a restore
    puts it back; written only when not ``cpu``, so loaders that ignore it get CPU tensors."""
    holder: int | None = None
    """The rank whose snapshot holds the bytes instead (nbytes 0); None: this one."""


def encode_table(entries: Sequence[TensorEntry]) -> bytes:
    tensors = [
        {"dtype": e.dtype, "shape": list(e.shape), "offset": e.offset, "nbytes": e.nbytes}
        | ({"device": e.device} if e.device != "cpu" else {})
        | ({} if e.holder is None else {"holder": e.holder})
        for e in entries
    ]
    return json.dumps({"tensors": tensors}, separators=(",", ":")).encode()


def decode_table(data: bytes) -> list[TensorEntry]:
    """Raises: LayoutError when the table is not the JSON the writer produces."""
    try:
        body = json.loads(data)
        return [
            TensorEntry(
                dtype=str(item["dtype"]),
                shape=tuple(int(size) for size in item["shape"]),
                offset=int(item["offset"]),
                nbytes=int(item["nbytes"]),
                device=str(item.get("device", "cpu")),
                holder=None if item.get("holder") is None else int(item["holder"]),
            )
            for item in body["tensors"]
        ]
    except (ValueError, KeyError, TypeError) as error:
        raise LayoutError(f"tensor table is unreadable: {error}") from error


def read_seq(buffer: Any) -> int:
    memory_fence.fence()  # the bytes read before it: before the mark is read again
    value: int = _SEQ.unpack_from(buffer, _SEQ_OFFSET)[0]
    memory_fence.fence()  # the bytes read after it: not before the mark
    return value


def write_seq(buffer: Any, seq: int) -> None:
    memory_fence.fence()  # the bytes written before an even mark: seen before it
    _SEQ.pack_into(buffer, _SEQ_OFFSET, seq)
    memory_fence.fence()  # the bytes written after an odd mark: seen after it


def write_checksum(buffer: Any, checksum: int, seq: int) -> None:
    struct.pack_into("<QQ", buffer, _CHECKSUM_OFFSET, checksum, seq)


def compute_checksum(buffer: Any, header: SnapshotHeader) -> int:
    """xxh3-64 of everything after the header; releases the GIL while hashing."""
    view = memoryview(buffer)[HEADER_SIZE : header.end]
    try:
        value: int = xxhash.xxh3_64_intdigest(view)
    finally:
        view.release()
    return value
