"""Shared-memory snapshot slots owned by the agent."""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from trainguard.agent import snapshot_slots
from trainguard.agent.snapshot_slots import SnapshotMemoryError, SnapshotSlots
from trainguard.ipc import snapshot_layout
from trainguard.train import snapshot

GiB = 2**30


def page_round(nbytes: int) -> int:
    return -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE


def flip_payload_byte(path: str, header: snapshot_layout.SnapshotHeader) -> None:
    descriptor = os.open(path, os.O_RDWR)
    try:
        old = os.pread(descriptor, 1, header.payload_offset)
        os.pwrite(descriptor, bytes([old[0] ^ 0xFF]), header.payload_offset)
    finally:
        os.close(descriptor)


def set_seq(path: str, seq: int) -> None:
    descriptor = os.open(path, os.O_RDWR)
    try:
        memory = mmap.mmap(descriptor, snapshot_layout.HEADER_SIZE)
        snapshot_layout.write_seq(memory, seq)
        memory.close()
    finally:
        os.close(descriptor)


def test_grant_returns_a_path_another_open_can_map(slots: SnapshotSlots) -> None:
    path, capacity = slots.grant(0, 0, 10_000)
    assert re.fullmatch(rf"/proc/{os.getpid()}/fd/\d+", path)
    assert path == slots.path(0, 0)
    descriptor = os.open(path, os.O_RDWR)
    try:
        assert os.fstat(descriptor).st_size == capacity
        memory = mmap.mmap(descriptor, capacity)
        memory[capacity - 5:] = b"hello"
        memory.close()
    finally:
        os.close(descriptor)
    with open(path, "rb") as again:
        again.seek(capacity - 5)
        assert again.read() == b"hello"


def test_capacity_has_headroom_and_is_page_rounded(slots: SnapshotSlots) -> None:
    _, capacity = slots.grant(0, 1, 10_000)
    assert capacity >= 11_000
    assert capacity % mmap.PAGESIZE == 0
    assert capacity == page_round(11_000)
    assert slots.total_bytes == capacity


def test_regrant_of_a_smaller_size_returns_the_same_slot(slots: SnapshotSlots) -> None:
    path, capacity = slots.grant(2, 0, 50_000)
    with open(path, "r+b") as stream:
        stream.write(b"kept")
    assert slots.grant(2, 0, 20_000) == (path, capacity)
    assert slots.grant(2, 0, capacity) == (path, capacity)
    with open(path, "rb") as stream:
        assert stream.read(4) == b"kept"


def test_growth_replaces_the_slot(slots: SnapshotSlots) -> None:
    path, capacity = slots.grant(0, 0, 10_000)
    with open(path, "r+b") as stream:
        stream.write(b"old")
    grown_path, grown = slots.grant(0, 0, 100_000)
    assert grown == page_round(110_000)
    assert grown > capacity
    assert slots.total_bytes == grown
    with open(grown_path, "rb") as stream:
        assert stream.read(3) == b"\0\0\0"  # a new memory file, not the old one grown
        assert os.fstat(stream.fileno()).st_size == grown


def test_slots_of_ranks_are_separate(slots: SnapshotSlots) -> None:
    first, _ = slots.grant(0, 0, 4096)
    second, _ = slots.grant(0, 1, 4096)
    third, _ = slots.grant(1, 0, 4096)
    assert len({first, second, third}) == 3
    assert slots.ranks() == {0, 1}
    assert slots.path(1, 1) == ""


def test_not_enough_memory_names_the_sizes() -> None:
    slots = SnapshotSlots(available=lambda: 2 * GiB, reserve_fraction=0.9)
    try:
        with pytest.raises(SnapshotMemoryError) as caught:
            slots.grant(3, 0, 4 * GiB)
        message = str(caught.value)
        assert "rank 3 needs 4.40 GiB of shared memory" in message
        assert "only 1.80 GiB can be reserved" in message
        assert slots.path(3, 0) == ""
        assert slots.total_bytes == 0
    finally:
        slots.close()


@pytest.mark.parametrize("slot", [-1, 2, 7])
def test_invalid_slot_is_refused(slots: SnapshotSlots, slot: int) -> None:
    with pytest.raises(ValueError, match=f"slot must be 0 or 1, got {slot}"):
        slots.grant(0, slot, 4096)


def test_header_of_a_missing_or_empty_slot_is_none(slots: SnapshotSlots) -> None:
    assert slots.header(0, 0) is None
    slots.grant(0, 0, 4096)
    assert slots.header(0, 0) is None
    assert slots.committed(0) == []


def test_header_and_committed_after_writes(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    seq3 = writer(slots, 1, 0, make_state(3, 1), step=3, world_size=4, generation=2)
    seq4 = writer(slots, 1, 1, make_state(4, 1), step=4, world_size=4, generation=2)
    header = slots.header(1, 1)
    assert header is not None
    assert (header.seq, header.step, header.rank, header.world_size, header.generation) == (
        seq4, 4, 1, 4, 2)
    assert header.committed
    assert not header.has_checksum
    states = slots.committed(1)
    assert [(state.slot, state.header.step, state.header.seq) for state in states] == [
        (1, 4, seq4), (0, 3, seq3)]
    assert slots.committed(0) == []


def test_committed_leaves_out_a_torn_slot(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    writer(slots, 0, 0, make_state(3, 0), step=3)
    seq = writer(slots, 0, 1, make_state(4, 0), step=4)
    set_seq(slots.path(0, 1), seq + 1)  # a worker died while writing its next snapshot here
    assert [state.header.step for state in slots.committed(0)] == [3]


def test_writing_is_seen_from_the_sequence_lock(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    assert not slots.writing(0)  # no slot yet
    writer(slots, 0, 0, make_state(3, 0), step=3)
    seq = writer(slots, 0, 1, make_state(4, 0), step=4)
    assert not slots.writing(0)
    set_seq(slots.path(0, 1), seq + 1)  # a worker began its next snapshot here
    assert slots.writing(0)
    assert not slots.writing(1)
    set_seq(slots.path(0, 1), seq + 2)
    assert not slots.writing(0)


def test_verify_of_an_intact_slot_without_checksum(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    writer(slots, 0, 0, make_state(5, 0), step=5)
    [state] = slots.committed(0)
    assert not state.header.has_checksum
    assert slots.verify(state) is None


def test_verify_of_an_intact_slot_with_checksum(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    seq = writer(slots, 0, 0, make_state(5, 0), step=5)
    path = slots.path(0, 0)
    with open(path, "r+b") as stream:
        memory = mmap.mmap(stream.fileno(), 0)
        header = snapshot_layout.SnapshotHeader.unpack(memory)
        snapshot_layout.write_checksum(
            memory, snapshot_layout.compute_checksum(memory, header), seq)
        memory.close()
    [state] = slots.committed(0)
    assert state.header.has_checksum
    assert slots.verify(state) is None


def test_verify_reports_a_checksum_mismatch(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    seq = writer(slots, 0, 1, make_state(5, 0), step=5)
    path = slots.path(0, 1)
    recorded = 0x0123456789ABCDEF  # wrong from the start
    with open(path, "r+b") as stream:
        memory = mmap.mmap(stream.fileno(), 0)
        snapshot_layout.write_checksum(memory, recorded, seq)
        memory.close()
    [state] = slots.committed(0)
    flip_payload_byte(path, state.header)
    with open(path, "rb") as stream:
        memory = mmap.mmap(stream.fileno(), 0, prot=mmap.PROT_READ)
        actual = snapshot_layout.compute_checksum(memory, state.header)
        memory.close()
    assert slots.verify(state) == (
        f"checksum {actual:016x} does not match the recorded {recorded:016x}")


def test_verify_detects_corruption_after_a_correct_checksum(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    seq = writer(slots, 0, 0, make_state(5, 0), step=5)
    path = slots.path(0, 0)
    with open(path, "r+b") as stream:
        memory = mmap.mmap(stream.fileno(), 0)
        header = snapshot_layout.SnapshotHeader.unpack(memory)
        snapshot_layout.write_checksum(
            memory, snapshot_layout.compute_checksum(memory, header), seq)
        memory.close()
    [state] = slots.committed(0)
    flip_payload_byte(path, state.header)
    problem = slots.verify(state)
    assert problem is not None
    assert problem.startswith("checksum ")
    assert f"does not match the recorded {state.header.checksum:016x}" in problem


def test_verify_reports_a_slot_overwritten_since_listed(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    writer(slots, 0, 0, make_state(5, 0), step=5)
    [state] = slots.committed(0)
    writer(slots, 0, 0, make_state(7, 0), step=7)
    assert slots.verify(state) == "overwritten since it was listed"


def test_invalidate_empties_the_slot(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    writer(slots, 0, 0, make_state(3, 0), step=3)
    writer(slots, 0, 1, make_state(4, 0), step=4)
    slots.invalidate(0, 1)
    slots.invalidate(5, 0)  # a slot never granted: nothing to do
    assert slots.header(0, 1) is None
    assert [state.header.step for state in slots.committed(0)] == [3]
    with pytest.raises(snapshot.SnapshotError, match="not a trainguard snapshot"):
        snapshot.read_snapshot(slots.path(0, 1))


def test_a_written_slot_reads_back(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    tree = make_state(9, 1)
    writer(slots, 1, 0, tree, step=9)
    header, read = snapshot.read_snapshot(slots.path(1, 0))
    assert header.step == 9
    assert torch.equal(read["state"]["model"]["weight"], tree["state"]["model"]["weight"])
    assert torch.equal(read["state"]["model"]["bias"], tree["state"]["model"]["bias"])


def test_close_releases_every_slot() -> None:
    slots = SnapshotSlots()
    path, _ = slots.grant(0, 0, 4096)
    descriptor = int(path.rsplit("/", 1)[1])
    slots.close()
    assert slots.path(0, 0) == ""
    assert slots.total_bytes == 0
    with pytest.raises(OSError):  # noqa: PT011 - EBADF, unless the number was reused
        os.fstat(descriptor)


def test_available_memory_is_positive() -> None:
    assert snapshot_slots.available_memory() > 0


def test_a_slot_is_owner_only(slots: SnapshotSlots) -> None:
    """A memfd is born 0777; another user must not map a rank's state."""
    path, _ = slots.grant(0, 0, 10_000)
    assert os.stat(path).st_mode & 0o777 == 0o600
