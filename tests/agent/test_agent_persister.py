"""The persister's work, called in this process: checksumming slots and writing checkpoints."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import xxhash

from trainguard.agent import persister
from trainguard.agent.snapshot_slots import SnapshotSlots
from trainguard.ipc import checkpoint_layout, snapshot_layout
from trainguard.ipc.checkpoint_layout import CheckpointDirectory
from trainguard.proto import helpers_pb2 as pb
from trainguard.train import snapshot


def write_step(slots: SnapshotSlots, writer: Callable[..., int],
               make_state: Callable[..., dict[str, Any]], step: int, *, slot: int = 0,
               world_size: int = 2, numel: int = 256) -> list[pb.Shard]:
    """Every rank writes ``step`` into ``slot``; returns the persist command's shards."""
    shards: list[pb.Shard] = []
    for rank in range(world_size):
        seq = writer(slots, rank, slot, make_state(step, rank, numel=numel), step=step,
                     world_size=world_size)
        shards.append(pb.Shard(rank=rank, path=slots.path(rank, slot), seq=seq))
    return shards


def persist_command(root: Path, step: int, shards: list[pb.Shard], *,
                    keep: int = 3, bandwidth: int = 0) -> pb.Persist:
    return pb.Persist(step=step, world_size=len(shards), root=str(root), keep=keep,
                      bandwidth=bandwidth, shards=shards)


def persisted(reply: pb.PersisterReply) -> pb.Persisted:
    assert reply.WhichOneof("kind") == "persisted", reply
    return reply.persisted


def failed(reply: pb.PersisterReply) -> pb.PersistFailed:
    assert reply.WhichOneof("kind") == "persist_failed", reply
    return reply.persist_failed


def test_persist_writes_a_checkpoint_that_verifies(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    root = tmp_path / "checkpoints"
    shards = write_step(slots, writer, make_state, 5)

    reply = persisted(persister.persist(persist_command(root, 5, shards)))

    final = root / "step-000000005"
    ends = [header.end for header in (slots.header(0, 0), slots.header(1, 0)) if header]
    assert reply.step == 5
    assert reply.path == str(final)
    assert reply.nbytes == sum(ends)
    assert list(reply.removed) == []
    assert reply.seconds >= 0
    directory = CheckpointDirectory(root)
    manifest = directory.read_manifest(final)
    assert manifest.step == 5
    assert manifest.world_size == 2
    assert [(shard.rank, shard.file, shard.nbytes) for shard in manifest.shards] == [
        (0, "rank-00000.tgsnap", ends[0]), (1, "rank-00001.tgsnap", ends[1])]
    directory.verify(final, manifest)
    assert sorted(path.name for path in final.iterdir()) == [
        "manifest.json", "rank-00000.tgsnap", "rank-00001.tgsnap"]
    assert sorted(path.name for path in root.iterdir()) == ["step-000000005"]
    for rank in range(2):
        header, tree = snapshot.read_snapshot(str(final / checkpoint_layout.shard_name(rank)))
        expected = make_state(5, rank)
        assert (header.step, header.rank) == (5, rank)
        assert header.has_checksum
        assert header.checksum == manifest.shards[rank].checksum
        assert tree["step"] == 5
        assert tree["state"]["epoch"] == expected["state"]["epoch"]
        for name in ("weight", "bias"):
            assert torch.equal(tree["state"]["model"][name], expected["state"]["model"][name])


def test_persist_records_the_checksum_in_the_memory_slot(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    shards = write_step(slots, writer, make_state, 5)
    persister.persist(persist_command(tmp_path, 5, shards))
    manifest = CheckpointDirectory(tmp_path).read_manifest(tmp_path / "step-000000005")
    for rank in range(2):
        header = slots.header(rank, 0)
        assert header is not None
        assert header.has_checksum
        assert header.checksum_seq == shards[rank].seq
        assert header.checksum == manifest.shards[rank].checksum
        [state] = slots.committed(rank)
        assert slots.verify(state) is None


def test_shard_file_is_the_memory_snapshot_byte_for_byte(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    shards = write_step(slots, writer, make_state, 5)
    persister.persist(persist_command(tmp_path, 5, shards))
    for rank in range(2):
        header = slots.header(rank, 0)
        assert header is not None
        with open(slots.path(rank, 0), "rb") as stream:
            memory = stream.read(header.end)
        shard = (tmp_path / "step-000000005" / checkpoint_layout.shard_name(rank)).read_bytes()
        assert shard == memory


def test_a_slot_overwritten_before_the_copy_fails_the_persist(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    root = tmp_path / "checkpoints"
    shards = write_step(slots, writer, make_state, 5)
    writer(slots, 1, 0, make_state(7, 1), step=7)  # rank 1 reused the slot

    reply = failed(persister.persist(persist_command(root, 5, shards)))

    assert reply.overwritten
    assert reply.step == 5
    assert f"snapshot {shards[1].seq} was overwritten" in reply.error
    assert reply.error.startswith("rank 1:")
    assert CheckpointDirectory(root).step_dirs() == []
    assert not root.exists() or list(root.iterdir()) == []


def test_a_seq_differing_from_the_command_fails_the_persist(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    shards = write_step(slots, writer, make_state, 5)
    shards[0].seq += 2
    reply = failed(persister.persist(persist_command(tmp_path, 5, shards)))
    assert reply.overwritten
    assert reply.error.startswith("rank 0:")
    assert list(tmp_path.iterdir()) == []


def test_a_slot_of_another_step_fails_the_persist(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    shards = write_step(slots, writer, make_state, 5)
    reply = failed(persister.persist(persist_command(tmp_path, 6, shards)))
    assert not reply.overwritten
    assert reply.error == "rank 0: slot holds step 5, not 6"
    assert list(tmp_path.iterdir()) == []
    header = slots.header(0, 0)
    assert header is not None
    assert not header.has_checksum


def test_an_empty_slot_fails_the_persist(tmp_path: Path, slots: SnapshotSlots) -> None:
    path, _ = slots.grant(0, 0, 4096)
    reply = failed(persister.persist(persist_command(tmp_path, 1, [pb.Shard(rank=0, path=path,
                                                                             seq=2)])))
    assert not reply.overwritten
    assert "rank 0: not a trainguard snapshot" in reply.error


def test_an_unwritable_root_fails_the_persist(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    (tmp_path / "file").write_text("")
    shards = write_step(slots, writer, make_state, 5)
    reply = failed(persister.persist(persist_command(tmp_path / "file" / "ckpt", 5, shards)))
    assert not reply.overwritten
    assert "Not a directory" in reply.error


def test_persist_replaces_a_checkpoint_of_the_same_step(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    first = write_step(slots, writer, make_state, 5, slot=0)
    persisted(persister.persist(persist_command(tmp_path, 5, first)))
    second = write_step(slots, writer, make_state, 5, slot=1, numel=512)
    persisted(persister.persist(persist_command(tmp_path, 5, second)))
    directory = CheckpointDirectory(tmp_path)
    manifest = directory.read_manifest(tmp_path / "step-000000005")
    directory.verify(tmp_path / "step-000000005", manifest)
    _, tree = snapshot.read_snapshot(str(tmp_path / "step-000000005" / "rank-00000.tgsnap"))
    assert tree["state"]["model"]["weight"].numel() == 512
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step-000000005"]


def test_retention_keeps_the_newest(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    directory = CheckpointDirectory(tmp_path)
    removed: list[list[str]] = []
    for step in range(1, 5):
        shards = write_step(slots, writer, make_state, step, slot=step % 2)
        reply = persisted(persister.persist(persist_command(tmp_path, step, shards, keep=2)))
        removed.append(list(reply.removed))
    assert removed == [[], [], [str(directory.step_dir(1))], [str(directory.step_dir(2))]]
    assert [step for step, _ in directory.step_dirs()] == [4, 3]
    for _, path in directory.step_dirs():
        directory.verify(path, directory.read_manifest(path))


def test_bandwidth_limit_slows_the_write(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    shards = write_step(slots, writer, make_state, 5, numel=256 * 1024)  # 1 MiB per rank
    written = 0
    for rank in range(2):
        header = slots.header(rank, 0)
        assert header is not None
        written += header.end - snapshot_layout.HEADER_SIZE
    bandwidth = 4 << 20
    started = time.monotonic()
    reply = persisted(persister.persist(persist_command(tmp_path, 5, shards,
                                                        bandwidth=bandwidth)))
    elapsed = time.monotonic() - started
    assert elapsed >= 0.9 * written / bandwidth
    assert reply.seconds >= 0.9 * written / bandwidth


def test_hash_records_checksums_in_the_slots(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    shards = write_step(slots, writer, make_state, 5)
    reply = persister._hash(pb.Hash(shards=shards))
    assert reply.WhichOneof("kind") == "hashed"
    results = reply.hashed.results
    assert [(result.rank, result.seq) for result in results] == [
        (0, shards[0].seq), (1, shards[1].seq)]
    for rank, result in enumerate(results):
        header = slots.header(rank, 0)
        assert header is not None
        assert header.has_checksum
        assert header.checksum == result.checksum
        with open(slots.path(rank, 0), "rb") as stream:
            data = stream.read(header.end)
        assert result.checksum == xxhash.xxh3_64_intdigest(
            data[snapshot_layout.HEADER_SIZE:])


def test_hash_skips_an_overwritten_slot(
        slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    shards = write_step(slots, writer, make_state, 5)
    writer(slots, 0, 0, make_state(7, 0), step=7)
    reply = persister._hash(pb.Hash(shards=shards))
    assert [result.rank for result in reply.hashed.results] == [1]
    header = slots.header(0, 0)
    assert header is not None
    assert header.step == 7
    assert not header.has_checksum
