"""Snapshots of a state tree: prepare, write under the sequence lock, read back."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from trainguard.ipc import snapshot_layout
from trainguard.train import snapshot
from trainguard.train.snapshot import MappedSlot, SnapshotError


def make_slot(path: Path, nbytes: int) -> MappedSlot:
    with path.open("wb") as stream:
        stream.truncate(nbytes)
    return MappedSlot(str(path))


def write(path: Path, tree: Any, *, step: int = 1, capacity: int | None = None) -> int:
    prepared = snapshot.prepare(tree)
    slot = make_slot(path, capacity or prepared.nbytes)
    try:
        return slot.write(prepared, step=step, generation=0, rank=0, world_size=1)
    finally:
        slot.close()


def adam_state() -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(3, 4)).pow(2).sum().backward()
    optimizer.step()
    return optimizer.state_dict()


def assert_same(left: Any, right: Any) -> None:
    """Equal trees: tensors of the same dtype, shape and values; everything else ==."""
    if isinstance(left, torch.Tensor):
        assert isinstance(right, torch.Tensor)
        assert left.dtype == right.dtype
        assert left.shape == right.shape
        assert torch.equal(left, right)
    elif isinstance(left, dict):
        assert isinstance(right, dict)
        assert list(left) == list(right)
        for key in left:
            assert_same(left[key], right[key])
    elif isinstance(left, (list, tuple)):
        assert type(left) is type(right)
        assert len(left) == len(right)
        for a, b in zip(left, right, strict=True):
            assert_same(a, b)
    else:
        assert left == right


def rich_tree() -> tuple[dict[str, Any], torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    shared = torch.randn(5, generator=generator)
    base = torch.randn(3, 7, generator=generator)
    tree = {
        "step": 11,
        "state": {
            "tensors": {
                "float32": torch.randn(4, 3, generator=generator),
                "float64": torch.randn(6, dtype=torch.float64, generator=generator),
                "int64": torch.arange(-5, 5, dtype=torch.int64),
                "bfloat16": torch.randn(2, 9, generator=generator).to(torch.bfloat16),
                "bool": torch.tensor([True, False, False, True, True]),
                "scalar": torch.tensor(2.75),
                "empty": torch.empty(0, 3),
                "transposed": base.t(),
                "requires_grad": torch.ones(2, requires_grad=True),
            },
            "shared": [shared, shared],
            "optimizer": adam_state(),
            "values": {"int": 3, "float": 0.5, "str": "text", "none": None, "bytes": b"\x00\x01",
                       "tuple": (1, ("nested", 2.0)), "list": [1, [2, {"deep": [3]}]]},
        },
        "rng": {},
    }
    return tree, shared


def test_round_trip_of_a_rich_tree(tmp_path: Path) -> None:
    tree, _ = rich_tree()
    assert not tree["state"]["tensors"]["transposed"].is_contiguous()
    path = tmp_path / "slot"
    write(path, tree, step=11)
    header, read = snapshot.read_snapshot(str(path))
    assert header.step == 11
    assert header.committed
    expected = dict(tree)
    expected["state"] = dict(tree["state"])
    expected["state"]["tensors"] = dict(tree["state"]["tensors"])
    expected["state"]["tensors"]["requires_grad"] = torch.ones(2)
    assert_same(read, expected)
    assert not read["state"]["tensors"]["requires_grad"].requires_grad
    assert read["state"]["tensors"]["transposed"].is_contiguous()


def test_a_tensor_referenced_twice_is_stored_once(tmp_path: Path) -> None:
    tree, shared = rich_tree()
    prepared = snapshot.prepare(tree)
    # 9 distinct tensors, 1 shared one, and Adam's step, exp_avg and exp_avg_sq for 2 params.
    assert len(prepared.tensors) == 9 + 1 + 6
    assert sum(1 for tensor in prepared.tensors if torch.equal(tensor, shared)) == 1
    assert len(snapshot.prepare({"a": [shared, shared], "b": shared}).tensors) == 1
    path = tmp_path / "slot"
    write(path, tree)
    _, read = snapshot.read_snapshot(str(path))
    first, second = read["state"]["shared"]
    assert first is second
    assert torch.equal(first, shared)


def test_layout_of_a_prepared_snapshot(tmp_path: Path) -> None:
    tree, _ = rich_tree()
    prepared = snapshot.prepare(tree)
    assert prepared.payload_offset % mmap.PAGESIZE == 0
    assert prepared.payload_offset >= prepared.skeleton_offset + len(prepared.skeleton)
    assert prepared.table_offset == snapshot_layout.HEADER_SIZE
    for tensor, entry in zip(prepared.tensors, prepared.entries, strict=True):
        assert entry.offset % snapshot_layout.ALIGNMENT == 0
        assert entry.nbytes == tensor.numel() * tensor.element_size()
        assert entry.shape == tuple(tensor.shape)
        assert entry.dtype == str(tensor.dtype).removeprefix("torch.")
    last = prepared.entries[-1]
    assert prepared.payload_len >= last.offset + last.nbytes
    assert snapshot_layout.decode_table(prepared.table) == prepared.entries


def test_adam_state_restores_into_a_new_optimizer(tmp_path: Path) -> None:
    state = adam_state()
    path = tmp_path / "slot"
    write(path, {"optimizer": state})
    _, read = snapshot.read_snapshot(str(path))
    assert_same(read["optimizer"], state)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.5)
    optimizer.load_state_dict(read["optimizer"])
    assert optimizer.param_groups[0]["lr"] == 0.01
    assert_same(optimizer.state_dict()["state"], state["state"])


def test_seq_goes_odd_then_even_and_by_two_per_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[int] = []
    original = snapshot_layout.write_seq

    def spy(buffer: Any, seq: int) -> None:
        written.append(seq)
        original(buffer, seq)

    monkeypatch.setattr(snapshot_layout, "write_seq", spy)
    prepared = snapshot.prepare({"w": torch.ones(10)})
    slot = make_slot(tmp_path / "slot", prepared.nbytes)
    try:
        seqs = [slot.write(prepared, step=step, generation=0, rank=0, world_size=1)
                for step in range(3)]
        assert snapshot_layout.read_seq(slot.memory) == 6
    finally:
        slot.close()
    assert seqs == [2, 4, 6]
    assert written == [1, 2, 3, 4, 5, 6]


def test_writing_over_a_torn_snapshot_skips_to_the_next_even_seq(tmp_path: Path) -> None:
    prepared = snapshot.prepare({"w": torch.ones(10)})
    slot = make_slot(tmp_path / "slot", prepared.nbytes)
    try:
        slot.write(prepared, step=1, generation=0, rank=0, world_size=1)
        snapshot_layout.write_seq(slot.memory, 5)  # a writer died mid-copy
        assert slot.write(prepared, step=2, generation=0, rank=0, world_size=1) == 8
    finally:
        slot.close()
    header, _ = snapshot.read_snapshot(str(tmp_path / "slot"))
    assert (header.seq, header.step) == (8, 2)


def test_header_fields_are_written(tmp_path: Path) -> None:
    prepared = snapshot.prepare({"w": torch.ones(10)})
    slot = make_slot(tmp_path / "slot", prepared.nbytes + 8192)
    try:
        slot.write(prepared, step=77, generation=3, rank=5, world_size=8)
    finally:
        slot.close()
    header, _ = snapshot.read_snapshot(str(tmp_path / "slot"))
    assert (header.step, header.generation, header.rank, header.world_size) == (77, 3, 5, 8)
    assert header.end == prepared.nbytes
    assert header.created_unix_ns > 0
    assert not header.has_checksum


def test_a_tree_larger_than_the_slot_is_refused(tmp_path: Path) -> None:
    small = snapshot.prepare({"w": torch.ones(10)})
    large = snapshot.prepare({"w": torch.ones(100_000)})
    slot = make_slot(tmp_path / "slot", small.nbytes)
    try:
        seq = slot.write(small, step=1, generation=0, rank=0, world_size=1)
        with pytest.raises(SnapshotError) as caught:
            slot.write(large, step=2, generation=0, rank=0, world_size=1)
        assert str(caught.value) == (
            f"snapshot of {large.nbytes} bytes does not fit the slot's {small.nbytes}")
        assert snapshot_layout.read_seq(slot.memory) == seq  # the old snapshot is untouched
    finally:
        slot.close()
    header, _ = snapshot.read_snapshot(str(tmp_path / "slot"))
    assert header.step == 1


def test_reading_a_torn_snapshot_fails(tmp_path: Path) -> None:
    path = tmp_path / "slot"
    seq = write(path, {"w": torch.ones(3)})
    with path.open("r+b") as stream:
        memory = mmap.mmap(stream.fileno(), 0)
        snapshot_layout.write_seq(memory, seq + 1)
        memory.close()
    with pytest.raises(SnapshotError, match=f"holds no complete snapshot \\(seq {seq + 1}\\)"):
        snapshot.read_snapshot(str(path))


def test_reading_something_that_is_not_a_snapshot_fails(tmp_path: Path) -> None:
    path = tmp_path / "junk"
    path.write_bytes(b"x" * 8192)
    with pytest.raises(SnapshotError, match="not a trainguard snapshot"):
        snapshot.read_snapshot(str(path))
    with pytest.raises(SnapshotError, match="cannot open snapshot"):
        snapshot.read_snapshot(str(tmp_path / "missing"))


def test_reading_an_empty_file_fails_as_a_snapshot_error(tmp_path: Path) -> None:
    # read_snapshot promises SnapshotError for anything that is not a complete snapshot; a
    # shard truncated to nothing must not escape as mmap's ValueError.
    path = tmp_path / "empty.tgsnap"
    path.write_bytes(b"")
    with pytest.raises(SnapshotError, match=r"empty\.tgsnap"):
        snapshot.read_snapshot(str(path))


def test_a_sparse_tensor_is_refused() -> None:
    sparse = torch.eye(3).to_sparse()
    with pytest.raises(SnapshotError, match=r"cannot snapshot a torch\.sparse_coo tensor"):
        snapshot.prepare({"weights": [sparse]})


def test_read_tensors_do_not_share_memory_with_the_slot(tmp_path: Path) -> None:
    path = tmp_path / "slot"
    original = torch.arange(1000, dtype=torch.float32)
    write(path, {"w": original})
    header, read = snapshot.read_snapshot(str(path))
    with path.open("r+b") as stream:
        stream.seek(header.payload_offset)
        stream.write(b"\xff" * 4000)
    assert torch.equal(read["w"], original)
    read["w"].fill_(-1.0)
    _, again = snapshot.read_snapshot(str(path))
    assert torch.isnan(again["w"]).all()  # the slot's bytes, as overwritten above


def test_read_with_a_custom_copy(tmp_path: Path) -> None:
    path = tmp_path / "slot"
    write(path, {"w": torch.arange(6, dtype=torch.int64)})
    copies: list[torch.Size] = []

    def copy(view: torch.Tensor) -> torch.Tensor:
        copies.append(view.shape)
        return view.to(torch.float64)

    _, read = snapshot.read_snapshot(str(path), copy=copy)
    assert copies == [torch.Size([6])]
    assert read["w"].dtype == torch.float64
    assert read["w"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_flatten_replaces_tensors_by_ids() -> None:
    first, second = torch.ones(2, requires_grad=True), torch.zeros(2)
    skeleton, tensors = snapshot.flatten({"a": first, "b": [second, first]})
    assert len(tensors) == 2
    assert tensors[0] is not first  # a detached view
    assert not tensors[0].requires_grad
    assert tensors[1] is second  # nothing to detach: taken as it is
    assert torch.equal(tensors[0], first)
    assert torch.equal(tensors[1], second)
    assert len(skeleton) < 200


def test_memory_file_slot_round_trip() -> None:
    descriptor = os.memfd_create("trainguard-test")
    try:
        tree = {"w": torch.randn(64, 64)}
        prepared = snapshot.prepare(tree)
        os.ftruncate(descriptor, prepared.nbytes)
        path = f"/proc/{os.getpid()}/fd/{descriptor}"
        slot = MappedSlot(path)
        try:
            slot.write(prepared, step=2, generation=0, rank=0, world_size=1)
        finally:
            slot.close()
        _, read = snapshot.read_snapshot(path)
        assert torch.equal(read["w"], tree["w"])
    finally:
        os.close(descriptor)


def test_a_slot_rewritten_with_other_shapes_or_a_longer_skeleton_reads_back_right(
        tmp_path: Path) -> None:
    """The table and the slot's views of the last layout are reused only while they fit: a
    tensor that changes shape, or a skeleton that pushes the payload to a later page, lays the
    snapshot out anew."""
    layouts = snapshot.Layouts()
    path = tmp_path / "slot"
    slot = make_slot(path, 1 << 20)
    trees = [
        {"w": torch.arange(6.0).reshape(2, 3), "note": ""},
        {"w": torch.arange(6.0).reshape(2, 3) + 1, "note": ""},  # same layout, new values
        {"w": torch.arange(12.0).reshape(3, 4), "note": ""},  # another shape
        {"w": torch.arange(12.0).reshape(3, 4), "note": "x" * (3 * mmap.PAGESIZE)},
        {"w": torch.arange(8, dtype=torch.int64), "note": ""},  # another dtype
    ]
    try:
        for step, tree in enumerate(trees, start=1):
            slot.write(layouts.prepare(tree), step=step, generation=0, rank=0, world_size=1)
            _, read = snapshot.read_snapshot(str(path))
            assert_same(read, tree)
    finally:
        slot.close()


def test_the_table_is_laid_out_once_while_the_tensors_keep_their_layout() -> None:
    layouts = snapshot.Layouts()
    first = layouts.prepare({"w": torch.zeros(3), "step": 1})
    again = layouts.prepare({"w": torch.ones(3), "step": 2})
    assert again.entries is first.entries
    whole = layouts.prepare({"w": torch.ones(3), "step": 2}, holders=lambda *_: None)
    assert whole.entries is first.entries
    held = layouts.prepare({"w": torch.ones(3), "step": 2}, holders=lambda *_: [2])
    assert held.entries is not first.entries
    assert (held.entries[0].holder, held.entries[0].nbytes) == (2, 0)
    other = layouts.prepare({"w": torch.ones(4), "step": 2})
    assert other.entries is not held.entries
    assert other.entries[0].shape == (4,)
