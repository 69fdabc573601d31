"""Choosing the state to restore from memory or disk, and flushing memory to disk."""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from trainguard import clock as clocks
from trainguard.agent import persister
from trainguard.agent.checkpoint_memory import CheckpointMemory, CheckpointSettings, RestoreChoice
from trainguard.agent.persister_client import PersisterClient
from trainguard.agent.snapshot_slots import SnapshotSlots
from trainguard.ipc import messages, snapshot_layout
from trainguard.ipc.checkpoint_layout import CheckpointDirectory
from trainguard.job import events
from trainguard.proto import helpers_pb2 as pb
from trainguard.train import snapshot

T = TypeVar("T")
JOB = "job-1"


async def with_memory(slots: SnapshotSlots, root: Path, recorded: list[events.Event],
                      use: Callable[[CheckpointMemory], Awaitable[T]],
                      *, settings: CheckpointSettings | None = None) -> T:
    """Run ``use`` with a CheckpointMemory over ``slots``, a directory and a real persister."""
    client = PersisterClient(env=os.environ)
    memory = CheckpointMemory(
        settings or CheckpointSettings(checkpoint_dir=root), job=JOB, world_size=2,
        directory=CheckpointDirectory(root), slots=slots, persister=client,
        record=recorded.append, clock=clocks.SystemClock())
    try:
        return await asyncio.wait_for(use(memory), 60)
    finally:
        pid = client.pid
        await asyncio.wait_for(client.close(), 20)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def plan(slots: SnapshotSlots, root: Path, recorded: list[events.Event]
         ) -> tuple[RestoreChoice, dict[int, int]]:
    """plan_restore, and the next slot of each rank."""
    async def use(memory: CheckpointMemory) -> tuple[RestoreChoice, dict[int, int]]:
        choice = await memory.plan_restore()
        return choice, {rank: memory.next_slot(rank, choice) for rank in range(2)}

    return asyncio.run(with_memory(slots, root, recorded, use))


def persist_to_disk(root: Path, step: int, writer: Callable[..., int],
                    make_state: Callable[..., dict[str, Any]], *, world_size: int = 2) -> Path:
    """A checkpoint of ``step`` on disk, written by the persister from slots of its own."""
    own = SnapshotSlots()
    try:
        shards = []
        for rank in range(world_size):
            seq = writer(own, rank, 0, make_state(step, rank), step=step, world_size=world_size)
            shards.append(pb.Shard(rank=rank, path=own.path(rank, 0), seq=seq))
        reply = persister.persist(pb.Persist(step=step, world_size=world_size, root=str(root),
                                             keep=10, shards=shards))
    finally:
        own.close()
    assert reply.WhichOneof("kind") == "persisted"
    return Path(reply.persisted.path)


def record_checksum(slots: SnapshotSlots, rank: int, slot: int) -> None:
    header = slots.header(rank, slot)
    assert header is not None
    with open(slots.path(rank, slot), "r+b") as stream:
        memory = mmap.mmap(stream.fileno(), 0)
        snapshot_layout.write_checksum(
            memory, snapshot_layout.compute_checksum(memory, header), header.seq)
        memory.close()


def flip_payload_byte(path: str | Path, header: snapshot_layout.SnapshotHeader) -> None:
    with open(path, "r+b") as stream:
        stream.seek(header.payload_offset)
        old = stream.read(1)
        stream.seek(header.payload_offset)
        stream.write(bytes([old[0] ^ 0xFF]))


def steps_in_memory(slots: SnapshotSlots, rank: int) -> list[int]:
    return [state.header.step for state in slots.committed(rank)]


def test_nothing_saved(tmp_path: Path, slots: SnapshotSlots) -> None:
    recorded: list[events.Event] = []
    choice, next_slots = plan(slots, tmp_path / "ckpt", recorded)
    assert choice == RestoreChoice(messages.RestoreSource.NONE, 0, {}, "")
    assert next_slots == {0: 0, 1: 0}
    assert recorded == []


def test_newest_step_every_rank_holds_in_memory(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    writer(slots, 0, 0, make_state(3, 0), step=3)
    writer(slots, 0, 1, make_state(4, 0), step=4)
    writer(slots, 1, 1, make_state(3, 1), step=3)
    writer(slots, 1, 0, make_state(4, 1), step=4)
    recorded: list[events.Event] = []

    choice, next_slots = plan(slots, tmp_path / "ckpt", recorded)

    assert choice.source is messages.RestoreSource.MEMORY
    assert choice.step == 4
    assert choice.paths == {0: slots.path(0, 1), 1: slots.path(1, 0)}
    assert choice.note == ""
    assert next_slots == {0: 0, 1: 1}
    assert steps_in_memory(slots, 0) == [4, 3]
    assert steps_in_memory(slots, 1) == [4, 3]
    assert recorded == []
    _, tree = snapshot.read_snapshot(choice.paths[1])
    assert tree["state"]["model"]["weight"][0].item() == 401.0


def test_a_step_torn_on_one_rank_falls_back_to_the_older_one(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    writer(slots, 0, 0, make_state(3, 0), step=3)
    writer(slots, 0, 1, make_state(4, 0), step=4)
    writer(slots, 1, 0, make_state(3, 1), step=3)
    torn = writer(slots, 1, 1, make_state(4, 1), step=4)
    with open(slots.path(1, 1), "r+b") as stream:  # rank 1 died while copying step 4
        memory = mmap.mmap(stream.fileno(), 0)
        snapshot_layout.write_seq(memory, torn + 1)
        memory.close()
    recorded: list[events.Event] = []

    choice, next_slots = plan(slots, tmp_path / "ckpt", recorded)

    assert choice.source is messages.RestoreSource.MEMORY
    assert choice.step == 3
    assert choice.paths == {0: slots.path(0, 0), 1: slots.path(1, 0)}
    assert next_slots == {0: 1, 1: 1}
    # Rank 0's step 4 belongs to a timeline that was rolled back.
    assert slots.header(0, 1) is None
    assert steps_in_memory(slots, 0) == [3]
    assert steps_in_memory(slots, 1) == [3]


def test_a_memory_checksum_mismatch_falls_back_to_an_older_memory_step(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    for rank in range(2):
        writer(slots, rank, 0, make_state(3, rank), step=3)
        writer(slots, rank, 1, make_state(4, rank), step=4)
        record_checksum(slots, rank, 1)
    header = slots.header(1, 1)
    assert header is not None
    flip_payload_byte(slots.path(1, 1), header)
    recorded: list[events.Event] = []

    choice, next_slots = plan(slots, tmp_path / "ckpt", recorded)

    assert choice.source is messages.RestoreSource.MEMORY
    assert choice.step == 3
    assert choice.paths == {0: slots.path(0, 0), 1: slots.path(1, 0)}
    assert next_slots == {0: 1, 1: 1}
    assert choice.note.startswith("memory snapshot of step 4 skipped (rank 1: checksum ")
    assert f"does not match the recorded {header.checksum:016x}" in choice.note
    assert len(recorded) == 1
    [rejected] = recorded
    assert isinstance(rejected, events.CheckpointRejected)
    assert rejected.job == JOB
    assert rejected.path == "memory:step-4"
    assert rejected.reason.startswith("rank 1: checksum ")
    assert steps_in_memory(slots, 0) == [3]
    assert steps_in_memory(slots, 1) == [3]


def test_a_memory_checksum_mismatch_falls_back_to_disk(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    root = tmp_path / "ckpt"
    disk = persist_to_disk(root, 2, writer, make_state)
    for rank in range(2):
        writer(slots, rank, 0, make_state(4, rank), step=4)
        record_checksum(slots, rank, 0)
    header = slots.header(0, 0)
    assert header is not None
    flip_payload_byte(slots.path(0, 0), header)
    recorded: list[events.Event] = []

    choice, next_slots = plan(slots, root, recorded)

    assert choice.source is messages.RestoreSource.DISK
    assert choice.step == 2
    assert choice.paths == {0: str(disk / "rank-00000.tgsnap"), 1: str(disk / "rank-00001.tgsnap")}
    assert next_slots == {0: 0, 1: 0}
    assert "memory snapshot of step 4 skipped (rank 0: checksum " in choice.note
    assert [type(event) for event in recorded] == [events.CheckpointRejected]
    assert steps_in_memory(slots, 0) == []
    assert steps_in_memory(slots, 1) == []
    _, tree = snapshot.read_snapshot(choice.paths[1])
    assert tree["step"] == 2


def test_disk_newer_than_memory_wins(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    root = tmp_path / "ckpt"
    for rank in range(2):
        writer(slots, rank, 0, make_state(3, rank), step=3)
        writer(slots, rank, 1, make_state(4, rank), step=4)
    disk = persist_to_disk(root, 6, writer, make_state)
    persist_to_disk(root, 2, writer, make_state)
    recorded: list[events.Event] = []

    choice, next_slots = plan(slots, root, recorded)

    assert choice.source is messages.RestoreSource.DISK
    assert choice.step == 6
    assert choice.paths == {0: str(disk / "rank-00000.tgsnap"), 1: str(disk / "rank-00001.tgsnap")}
    assert choice.note == ""
    assert next_slots == {0: 0, 1: 0}
    assert steps_in_memory(slots, 0) == []  # memory holds an older timeline
    assert steps_in_memory(slots, 1) == []
    assert recorded == []


def test_memory_newer_than_disk_wins(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    root = tmp_path / "ckpt"
    persist_to_disk(root, 2, writer, make_state)
    for rank in range(2):
        writer(slots, rank, 0, make_state(4, rank), step=4)
    recorded: list[events.Event] = []
    choice, _ = plan(slots, root, recorded)
    assert choice.source is messages.RestoreSource.MEMORY
    assert choice.step == 4


def test_a_corrupt_newest_disk_checkpoint_is_skipped(
        tmp_path: Path, writer: Callable[..., int], slots: SnapshotSlots,
        make_state: Callable[..., dict[str, Any]]) -> None:
    root = tmp_path / "ckpt"
    older = persist_to_disk(root, 5, writer, make_state)
    newest = persist_to_disk(root, 6, writer, make_state)
    shard = newest / "rank-00001.tgsnap"
    header, _ = snapshot.read_snapshot(str(shard))
    flip_payload_byte(shard, header)
    recorded: list[events.Event] = []

    choice, _ = plan(slots, root, recorded)

    assert choice.source is messages.RestoreSource.DISK
    assert choice.step == 5
    assert choice.paths == {0: str(older / "rank-00000.tgsnap"),
                            1: str(older / "rank-00001.tgsnap")}
    assert choice.note.startswith(f"{newest} skipped (rank-00001.tgsnap is corrupt: checksum ")
    [rejected] = recorded
    assert isinstance(rejected, events.CheckpointRejected)
    assert rejected.path == str(newest)
    assert rejected.reason.startswith("rank-00001.tgsnap is corrupt")


def test_partial_and_mismatched_disk_checkpoints_are_skipped(
        tmp_path: Path, writer: Callable[..., int], slots: SnapshotSlots,
        make_state: Callable[..., dict[str, Any]]) -> None:
    root = tmp_path / "ckpt"
    usable = persist_to_disk(root, 5, writer, make_state)
    other_world = persist_to_disk(root, 6, writer, make_state, world_size=3)
    partial = root / "step-000000007"
    partial.mkdir()
    recorded: list[events.Event] = []

    choice, _ = plan(slots, root, recorded)

    assert choice.source is messages.RestoreSource.DISK
    assert choice.step == 5
    assert choice.paths[0] == str(usable / "rank-00000.tgsnap")
    assert choice.note == (
        f"{partial} skipped (partial checkpoint: no manifest (its writer stopped)); "
        f"{other_world} skipped (saved with 3 ranks, the job has 2)")
    assert [event.path for event in recorded
            if isinstance(event, events.CheckpointRejected)] == [str(partial), str(other_world)]


def test_a_manifest_that_is_not_a_json_object_is_skipped(
        tmp_path: Path, writer: Callable[..., int], slots: SnapshotSlots,
        make_state: Callable[..., dict[str, Any]]) -> None:
    root = tmp_path / "ckpt"
    usable = persist_to_disk(root, 5, writer, make_state)
    damaged = persist_to_disk(root, 6, writer, make_state)
    (damaged / "manifest.json").write_text("null")
    recorded: list[events.Event] = []

    choice, _ = plan(slots, root, recorded)

    assert choice.source is messages.RestoreSource.DISK
    assert choice.step == 5
    assert choice.paths[0] == str(usable / "rank-00000.tgsnap")
    assert choice.note.startswith(f"{damaged} skipped (")
    assert [event.path for event in recorded
            if isinstance(event, events.CheckpointRejected)] == [str(damaged)]


def test_flush_persists_the_newest_complete_step(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    root = tmp_path / "ckpt"
    for rank in range(2):
        writer(slots, rank, 0, make_state(3, rank), step=3)
    writer(slots, 0, 1, make_state(4, 0), step=4)  # step 4 is not complete yet
    recorded: list[events.Event] = []

    async def use(memory: CheckpointMemory) -> tuple[bool, bool, int, int]:
        first = await memory.flush()
        persisted_after_first = memory.persisted_step
        second = await memory.flush()  # nothing newer: no write
        events_before = len(recorded)
        writer(slots, 1, 1, make_state(4, 1), step=4)
        third = await memory.flush()
        assert len(recorded) == events_before + 1
        return first, second and third, persisted_after_first, memory.persisted_step

    first, later, persisted_first, persisted_last = asyncio.run(
        with_memory(slots, root, recorded, use))

    assert first is True
    assert later is True
    assert (persisted_first, persisted_last) == (3, 4)
    directory = CheckpointDirectory(root)
    assert [step for step, _ in directory.step_dirs()] == [4, 3]
    for step, path in directory.step_dirs():
        manifest = directory.read_manifest(path)
        assert manifest.step == step
        directory.verify(path, manifest)
    persisted = [event for event in recorded if isinstance(event, events.CheckpointPersisted)]
    assert [(event.job, event.step, event.path) for event in persisted] == [
        (JOB, 3, str(directory.step_dir(3))), (JOB, 4, str(directory.step_dir(4)))]
    assert persisted[1].nbytes == sum(
        shard.nbytes for shard in directory.read_manifest(directory.step_dir(4)).shards)
    assert len(recorded) == 2


def test_persist_writes_the_ordered_step_not_the_newest(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    """A job across hosts: the controller orders the same step on every host."""
    root = tmp_path / "ckpt"
    for rank in range(2):
        writer(slots, rank, 0, make_state(3, rank), step=3)
        writer(slots, rank, 1, make_state(4, rank), step=4)
    recorded: list[events.Event] = []

    async def use(memory: CheckpointMemory) -> list[bool]:
        return [await memory.persist(3), await memory.persist(3), await memory.persist(2),
                await memory.persist(5)]

    assert asyncio.run(with_memory(slots, root, recorded, use)) == [True, True, False, False]
    assert [step for step, _ in CheckpointDirectory(root).step_dirs()] == [3]


def test_a_spare_taking_a_node_reads_and_writes_that_nodes_directory(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    checkpoints = tmp_path / "checkpoints"
    persist_to_disk(checkpoints / "node-1", 7, writer, make_state)
    recorded: list[events.Event] = []

    async def use(memory: CheckpointMemory) -> tuple[list[int], list[int], Path]:
        before = memory.disk_steps()
        memory.take([0, 1], node=1)
        return before, memory.disk_steps(), memory.directory.root

    spare_dir = checkpoints / "node-2"
    before, after, root = asyncio.run(with_memory(slots, spare_dir, recorded, use))
    assert (before, after, root) == ([], [7], checkpoints / "node-1")


def test_flush_with_nothing_complete_is_a_no_op(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    writer(slots, 0, 0, make_state(3, 0), step=3)
    recorded: list[events.Event] = []

    async def use(memory: CheckpointMemory) -> bool:
        return await memory.flush()

    assert asyncio.run(with_memory(slots, tmp_path / "ckpt", recorded, use)) is True
    assert recorded == []
    assert not (tmp_path / "ckpt").exists()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="keep-checkpoints must be >= 1, got 0"):
        CheckpointSettings(keep_checkpoints=0)
    with pytest.raises(ValueError, match="persist-interval must be >= 0 seconds"):
        CheckpointSettings(persist_interval=-1)
    with pytest.raises(ValueError, match="persist-bandwidth must be >= 0"):
        CheckpointSettings(persist_bandwidth=-5)


class OutrunPersister:
    """A persister whose every copy is overtaken by the workers reusing the slot."""

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, request: pb.PersisterRequest) -> pb.PersisterReply:
        self.calls += 1
        return pb.PersisterReply(persist_failed=pb.PersistFailed(
            step=request.persist.step, overwritten=True,
            error="rank 1: snapshot 3 was overwritten (now 5)"))

    async def close(self) -> None:
        return None


def test_snapshots_overwritten_while_persisting_are_not_a_directory_failure(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]], caplog: pytest.LogCaptureFixture) -> None:
    """Workers outrunning the copy say nothing of the checkpoint directory: no warning that it
    failed, and no directory error behind the disk's lag."""
    for rank in range(2):
        writer(slots, rank, 0, make_state(3, rank), step=3)
    fake = OutrunPersister()
    recorded: list[events.Event] = []
    memory = CheckpointMemory(
        CheckpointSettings(checkpoint_dir=tmp_path), job=JOB, world_size=2,
        directory=CheckpointDirectory(tmp_path), slots=slots,
        persister=fake,  # type: ignore[arg-type]
        record=recorded.append, clock=clocks.SystemClock())

    with caplog.at_level("INFO", logger="trainguard.agent.checkpoint_memory"):
        assert asyncio.run(memory.flush()) is False

    assert fake.calls == 3
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert "not persisted: its snapshot was overwritten 3 times" in caplog.text
    lag = memory.lag()
    assert lag is not None
    assert (lag.memory_step, lag.error) == (3, "")


def test_a_step_is_checksummed_once_it_has_stayed_the_newest_for_a_second(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    """A snapshot every step is overwritten two steps later, before its checksum could serve a
    restore: while newer steps keep coming (every 0.1 s) none is hashed; the last one is, once
    it has been the newest for a second."""
    settings = CheckpointSettings(checkpoint_dir=tmp_path / "ckpt", persist_interval=1000)

    async def use(memory: CheckpointMemory) -> tuple[list[int], list[bool]]:
        def hashed(step: int | None = None) -> list[bool]:
            return [state.header.has_checksum for rank in range(2)
                    for state in slots.committed(rank) if step in (None, state.header.step)]

        memory.start()
        loop = asyncio.get_running_loop()
        stepping_until = loop.time() + 2.5
        step = 0
        seen_hashed: list[int] = []
        try:
            while loop.time() < stepping_until:
                step += 1
                for rank in range(2):
                    writer(slots, rank, step % 2, make_state(step, rank), step=step)
                memory.committed()
                await asyncio.sleep(0.1)
                seen_hashed += [step] if any(hashed()) else []
            settled_until = loop.time() + 10
            while not all(hashed(step)) and loop.time() < settled_until:
                await asyncio.sleep(0.05)
            return seen_hashed, hashed(step)
        finally:
            await memory.close()

    seen_hashed, last = asyncio.run(with_memory(slots, tmp_path, [], use, settings=settings))
    assert seen_hashed == []
    assert last == [True, True]
