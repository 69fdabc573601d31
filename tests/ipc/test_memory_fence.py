"""The memory fence of the snapshot slots' sequence lock: none on x86, a real one elsewhere, a
clear error where there is none; and the lock's marks fenced on both sides."""

from __future__ import annotations

import ctypes.util

import pytest

from tests.conftest import unavailable
from trainguard.ipc import memory_fence
from trainguard.ipc import snapshot_layout as layout


def test_x86_needs_no_fence() -> None:
    for machine in ("x86_64", "AMD64", "i686"):
        what, fence = memory_fence._resolve(machine)
        assert "none needed" in what
        assert fence is memory_fence._nothing


def test_libatomic_fences_here() -> None:
    if ctypes.util.find_library("atomic") is None:
        unavailable("finds no GCC libatomic (make test installs libatomic1 as root)")
    fence = memory_fence._libatomic()
    assert fence is not None
    for _ in range(1000):
        fence()


def test_membarrier_registers_and_fences_on_this_kernel() -> None:
    fence = memory_fence._membarrier("x86_64")
    assert fence is not None, "Linux 4.14 or later has membarrier's private expedited command"
    for _ in range(100):
        fence()


def test_a_machine_whose_call_number_is_unknown_has_no_membarrier() -> None:
    assert memory_fence._membarrier("vax") is None


def test_a_weakly_ordered_machine_takes_libatomic_then_membarrier(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(memory_fence, "_libatomic", lambda: lambda: calls.append("libatomic"))
    monkeypatch.setattr(memory_fence, "_membarrier",
                        lambda machine: lambda: calls.append(f"membarrier {machine}"))
    what, fence = memory_fence._resolve("aarch64")
    fence()
    assert (what, calls) == ("libatomic's atomic_thread_fence", ["libatomic"])
    monkeypatch.setattr(memory_fence, "_libatomic", lambda: None)
    what, fence = memory_fence._resolve("AArch64")
    fence()
    assert (what, calls[-1]) == ("Linux's membarrier system call", "membarrier aarch64")


def test_a_weakly_ordered_machine_without_a_fence_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_fence, "_libatomic", lambda: None)
    monkeypatch.setattr(memory_fence, "_membarrier", lambda machine: None)
    with pytest.raises(memory_fence.FenceUnavailableError,
                       match=r"this riscv64 machine reorders memory.*libatomic1"):
        memory_fence._resolve("riscv64")


def test_this_machine_has_a_fence() -> None:
    assert memory_fence.kind()
    memory_fence.fence()


@pytest.fixture
def marks(monkeypatch: pytest.MonkeyPatch) -> tuple[bytearray, list[int]]:
    """A slot's first bytes, and the mark it held at each fence."""
    buffer = bytearray(layout.HEADER_SIZE)
    mark = slice(layout._SEQ_OFFSET, layout._SEQ_OFFSET + 8)
    seen: list[int] = []
    monkeypatch.setattr(memory_fence, "fence",
                        lambda: seen.append(int.from_bytes(buffer[mark], "little")))
    return buffer, seen


def test_a_mark_written_is_fenced_on_both_sides(marks: tuple[bytearray, list[int]]) -> None:
    buffer, seen = marks
    layout.write_seq(buffer, 3)
    layout.write_seq(buffer, 4)
    assert seen == [0, 3, 3, 4]
    assert layout.read_seq(buffer) == 4
    assert seen[4:] == [4, 4]


def test_a_header_read_is_fenced_after(marks: tuple[bytearray, list[int]]) -> None:
    buffer, seen = marks
    packed = layout.SnapshotHeader(
        seq=2, step=1, generation=0, rank=0, world_size=1, table_offset=layout.HEADER_SIZE,
        table_len=0, skeleton_offset=layout.HEADER_SIZE, skeleton_len=0,
        payload_offset=layout.HEADER_SIZE, payload_len=0, created_unix_ns=0).pack()
    buffer[: len(packed)] = packed
    layout.SnapshotHeader.unpack(buffer)
    assert seen == [2]
