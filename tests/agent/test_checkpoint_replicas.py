"""Restoring and dumping with data-parallel replicas standing in for lost ranks (R5, R6)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from trainguard import clock as clocks
from trainguard.agent import persister
from trainguard.agent.checkpoint_memory import CheckpointMemory, CheckpointSettings, RestoreChoice
from trainguard.agent.persister_client import PersisterClient, PersisterLostError
from trainguard.agent.snapshot_slots import SnapshotSlots
from trainguard.ipc import messages
from trainguard.ipc.checkpoint_layout import CheckpointDirectory
from trainguard.job import events
from trainguard.job.replicas import ReplicaLayout
from trainguard.proto import helpers_pb2 as pb
from trainguard.train import snapshot

T = TypeVar("T")
JOB = "job-r"
WORLD = 4
ALL_REPLICAS = ReplicaLayout(WORLD, WORLD)  # every rank holds the same state
PAIRS = ReplicaLayout(WORLD, 2)  # ranks 0 and 2 hold one part, 1 and 3 the other

Writer = Callable[..., int]
MakeState = Callable[..., dict[str, Any]]


class FakePersister:
    """Records the commands; answers each with ``reply`` (or the result of ``answer``)."""

    def __init__(self, *, reply: pb.PersisterReply | None = None,
                 answer: Callable[[pb.Persist], pb.PersisterReply] | None = None,
                 lost: bool = False) -> None:
        self.commands: list[pb.Persist] = []
        self._reply = reply
        self._answer = answer
        self._lost = lost
        self.closed = False

    async def call(self, request: pb.PersisterRequest) -> pb.PersisterReply:
        command = request.persist
        self.commands.append(command)
        if self._lost:
            raise PersisterLostError("the persister exited with -9")
        if self._answer is not None:
            return self._answer(command)
        assert self._reply is not None
        reply = pb.PersisterReply()
        reply.CopyFrom(self._reply)
        kind = reply.WhichOneof("kind")
        assert kind is not None
        getattr(reply, kind).step = command.step
        return reply

    async def close(self) -> None:
        self.closed = True


PERSISTED = pb.PersisterReply(persisted=pb.Persisted(path="/ckpt/step-x", nbytes=1234,
                                                    seconds=0.5))


def run_with(slots: SnapshotSlots, root: Path, use: Callable[[CheckpointMemory], Awaitable[T]],
             *, fake: FakePersister | None = None,
             recorded: list[events.Event] | None = None) -> T:
    memory = CheckpointMemory(
        CheckpointSettings(checkpoint_dir=root), job=JOB, world_size=WORLD,
        directory=CheckpointDirectory(root), slots=slots,
        persister=cast(PersisterClient, fake or FakePersister(reply=PERSISTED)),
        record=(recorded if recorded is not None else []).append, clock=clocks.SystemClock())
    return asyncio.run(asyncio.wait_for(use(memory), 60))


def plan(slots: SnapshotSlots, root: Path, *, lost: Collection[int] = (),
         layout: ReplicaLayout | None = None) -> tuple[RestoreChoice, dict[int, int]]:
    async def use(memory: CheckpointMemory) -> tuple[RestoreChoice, dict[int, int]]:
        choice = await memory.plan_restore(lost=lost, layout=layout)
        return choice, {rank: memory.next_slot(rank, choice) for rank in range(WORLD)}

    return run_with(slots, root, use)


def steps_in_memory(slots: SnapshotSlots, rank: int) -> list[int]:
    return [state.header.step for state in slots.committed(rank)]


def two_steps_everywhere(slots: SnapshotSlots, writer: Writer, make_state: MakeState
                         ) -> dict[int, int]:
    """Every rank holds step 3 in slot 0 and step 4 in slot 1; returns step 4's seqs."""
    seqs = {}
    for rank in range(WORLD):
        writer(slots, rank, 0, make_state(3, rank), step=3, world_size=WORLD)
        seqs[rank] = writer(slots, rank, 1, make_state(4, rank), step=4, world_size=WORLD)
    return seqs


def persist_to_disk(root: Path, step: int, writer: Writer, make_state: MakeState) -> Path:
    """A checkpoint of ``step`` for the whole world on disk, written from slots of its own."""
    own = SnapshotSlots()
    try:
        shards = []
        for rank in range(WORLD):
            seq = writer(own, rank, 0, make_state(step, rank), step=step, world_size=WORLD)
            shards.append(pb.Shard(rank=rank, path=own.path(rank, 0), seq=seq))
        reply = persister.persist(pb.Persist(step=step, world_size=WORLD, root=str(root),
                                             keep=10, shards=shards))
    finally:
        own.close()
    assert reply.WhichOneof("kind") == "persisted"
    return Path(reply.persisted.path)


# --- plan_restore ------------------------------------------------------------------------------


def test_a_lost_rank_gets_the_newest_step_from_a_replica(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    two_steps_everywhere(slots, writer, make_state)

    choice, next_slots = plan(slots, tmp_path / "ckpt", lost={1}, layout=ALL_REPLICAS)

    assert choice.source is messages.RestoreSource.MEMORY
    assert choice.step == 4
    assert choice.peers == {1: 0}
    assert choice.send_to(0) == [1]
    assert [choice.send_to(rank) for rank in (1, 2, 3)] == [[], [], []]
    assert choice.label == "memory and peers"
    assert choice.paths == {0: slots.path(0, 1), 2: slots.path(2, 1), 3: slots.path(3, 1)}
    assert choice.note == ""
    # The lost rank's memory is not trusted: both its slots are cleared.
    assert slots.header(1, 0) is None
    assert slots.header(1, 1) is None
    assert steps_in_memory(slots, 1) == []
    assert [steps_in_memory(slots, rank) for rank in (0, 2, 3)] == [[4, 3]] * 3
    assert next_slots == {0: 0, 1: 0, 2: 0, 3: 0}
    _, tree = snapshot.read_snapshot(choice.paths[choice.peers[1]])
    assert tree["state"]["model"]["weight"][0].item() == 400.0


def test_read_locally_the_rank_reads_its_replicas_snapshot_itself(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    """A generation of new processes on one host: rank 1's stand-in is read from memory by
    rank 1 itself, so no donor sends anything over a process group."""
    two_steps_everywhere(slots, writer, make_state)
    choice, _ = plan(slots, tmp_path / "ckpt", lost={1}, layout=ALL_REPLICAS)

    local = choice.read_locally()

    assert (local.source, local.step, local.peers, local.stand_ins) == (
        messages.RestoreSource.MEMORY, 4, {}, {1: 0})
    assert local.paths == choice.paths | {1: slots.path(0, 1)}
    assert [local.send_to(rank) for rank in range(WORLD)] == [[]] * WORLD
    assert local.label == "memory and peers"
    _, tree = snapshot.read_snapshot(local.paths[1])
    assert tree["state"]["model"]["weight"][0].item() == 400.0


def test_read_locally_without_stand_ins_is_the_same_choice(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    two_steps_everywhere(slots, writer, make_state)
    choice, _ = plan(slots, tmp_path / "ckpt", layout=ALL_REPLICAS)
    assert choice.read_locally() is choice
    assert choice.stand_ins == {}


def test_the_donor_is_the_lost_ranks_own_replica(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    two_steps_everywhere(slots, writer, make_state)

    choice, _ = plan(slots, tmp_path / "ckpt", lost={1}, layout=PAIRS)

    assert choice.source is messages.RestoreSource.MEMORY
    assert (choice.step, choice.peers) == (4, {1: 3})
    assert choice.send_to(3) == [1]
    assert choice.send_to(0) == []


def test_two_lost_ranks_of_different_parts(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    two_steps_everywhere(slots, writer, make_state)

    choice, _ = plan(slots, tmp_path / "ckpt", lost={0, 1}, layout=PAIRS)

    assert (choice.source, choice.step) == (messages.RestoreSource.MEMORY, 4)
    assert choice.peers == {0: 2, 1: 3}
    assert (choice.send_to(2), choice.send_to(3)) == ([0], [1])
    assert set(choice.paths) == {2, 3}


def test_one_donor_serves_several_lost_ranks(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    two_steps_everywhere(slots, writer, make_state)

    choice, _ = plan(slots, tmp_path / "ckpt", lost={1, 3}, layout=ALL_REPLICAS)

    assert choice.peers == {1: 0, 3: 0}
    assert choice.send_to(0) == [1, 3]


def test_a_step_written_as_shares_has_no_stand_in_for_a_lost_rank(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    root = tmp_path / "ckpt"
    disk = persist_to_disk(root, 2, writer, make_state)
    for rank in range(WORLD):
        tree = make_state(4, 0)
        weight = tree["state"]["model"]["weight"]
        # rank 0 writes the weight, the others leave it to rank 0
        shares = {} if rank == 0 else {id(weight): 0}
        prepared = snapshot.prepare(tree, elsewhere=shares)
        path, _ = slots.grant(rank, 0, prepared.nbytes)
        mapped = snapshot.MappedSlot(path)
        mapped.write(prepared, step=4, generation=0, rank=rank, world_size=WORLD)
        mapped.close()

    choice, _ = plan(slots, root, lost={0}, layout=ALL_REPLICAS)

    assert (choice.source, choice.step, choice.peers) == (messages.RestoreSource.DISK, 2, {})
    assert choice.paths == {rank: str(disk / f"rank-{rank:05d}.tgsnap") for rank in range(WORLD)}


def test_a_replica_that_keeps_the_lost_ranks_share_stands_in_for_it(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    # Step 3 everywhere; step 4 on ranks 1-3 only (rank 0 died before its snapshot). Ranks 2
    # and 3 leave the weight to rank 0, rank 1 keeps it too (shares kept twice).
    for rank in range(WORLD):
        writer(slots, rank, 0, make_state(3, rank), step=3, world_size=WORLD)
    for rank in (1, 2, 3):
        tree = make_state(4, 0)
        weight = tree["state"]["model"]["weight"]
        prepared = snapshot.prepare(tree, elsewhere={} if rank == 1 else {id(weight): 0})
        path, _ = slots.grant(rank, 1, prepared.nbytes)
        mapped = snapshot.MappedSlot(path)
        mapped.write(prepared, step=4, generation=0, rank=rank, world_size=WORLD)
        mapped.close()

    choice, _ = plan(slots, tmp_path / "ckpt", layout=ALL_REPLICAS)

    assert (choice.source, choice.step, choice.peers) == (messages.RestoreSource.MEMORY, 4, {0: 1})
    holders = choice.holder_paths(WORLD)
    assert holders[0] == holders[1] == slots.path(1, 1)  # rank 0's share: in rank 1's snapshot
    assert holders[2:] == [slots.path(2, 1), slots.path(3, 1)]


def test_without_a_layout_a_lost_rank_means_no_memory_state(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    two_steps_everywhere(slots, writer, make_state)

    choice, next_slots = plan(slots, tmp_path / "ckpt", lost={1})

    assert choice == RestoreChoice(messages.RestoreSource.NONE, 0, {}, "")
    assert choice.label == "none"
    assert next_slots == {0: 0, 1: 0, 2: 0, 3: 0}
    assert [steps_in_memory(slots, rank) for rank in range(WORLD)] == [[]] * WORLD


def test_without_a_layout_a_lost_rank_falls_back_to_disk(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    root = tmp_path / "ckpt"
    disk = persist_to_disk(root, 2, writer, make_state)
    two_steps_everywhere(slots, writer, make_state)

    choice, _ = plan(slots, root, lost={1})

    assert choice.source is messages.RestoreSource.DISK
    assert choice.step == 2
    assert choice.peers == {}
    assert choice.label == "disk"
    assert choice.paths == {rank: str(disk / f"rank-{rank:05d}.tgsnap") for rank in range(WORLD)}


def test_a_lost_part_with_no_healthy_replica_falls_back(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    two_steps_everywhere(slots, writer, make_state)

    choice, _ = plan(slots, tmp_path / "ckpt", lost={1, 3}, layout=PAIRS)

    assert choice.source is messages.RestoreSource.NONE
    assert [steps_in_memory(slots, rank) for rank in range(WORLD)] == [[]] * WORLD


def test_nothing_lost_needs_no_peers(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    two_steps_everywhere(slots, writer, make_state)

    choice, next_slots = plan(slots, tmp_path / "ckpt", layout=ALL_REPLICAS)

    assert (choice.source, choice.step, choice.peers) == (messages.RestoreSource.MEMORY, 4, {})
    assert choice.label == "memory"
    assert next_slots == {0: 0, 1: 0, 2: 0, 3: 0}
    assert [steps_in_memory(slots, rank) for rank in range(WORLD)] == [[4, 3]] * WORLD


def _three_ranks_ahead(slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    """Ranks 0-2 committed step 5 (slot 1) and step 4 (slot 0); rank 3 only step 4."""
    for rank in range(WORLD):
        writer(slots, rank, 0, make_state(4, rank), step=4, world_size=WORLD)
    for rank in range(3):
        writer(slots, rank, 1, make_state(5, rank), step=5, world_size=WORLD)


def test_a_step_three_ranks_committed_is_complete_through_a_replica(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    _three_ranks_ahead(slots, writer, make_state)

    choice, next_slots = plan(slots, tmp_path / "ckpt", layout=ALL_REPLICAS)

    assert choice.source is messages.RestoreSource.MEMORY
    assert choice.step == 5
    assert choice.peers == {3: 0}
    assert choice.send_to(0) == [3]
    assert choice.paths == {rank: slots.path(rank, 1) for rank in range(3)}
    assert [next_slots[rank] for rank in range(3)] == [0, 0, 0]
    assert [steps_in_memory(slots, rank) for rank in range(3)] == [[5, 4]] * 3


def test_a_step_three_ranks_committed_is_not_complete_without_a_layout(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    _three_ranks_ahead(slots, writer, make_state)

    choice, next_slots = plan(slots, tmp_path / "ckpt")

    assert (choice.source, choice.step, choice.peers) == (messages.RestoreSource.MEMORY, 4, {})
    assert choice.paths == {rank: slots.path(rank, 0) for rank in range(WORLD)}
    assert next_slots == {0: 1, 1: 1, 2: 1, 3: 1}
    assert [steps_in_memory(slots, rank) for rank in range(WORLD)] == [[4]] * WORLD


def test_replica_complete_steps_lists_every_step_with_its_stand_ins(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    _three_ranks_ahead(slots, writer, make_state)

    async def use(memory: CheckpointMemory) -> list[tuple[int, list[tuple[int, int]],
                                                            dict[int, int]]]:
        return [(step, [(state.rank, state.slot) for state in states], peers)
                for step, states, peers in memory.replica_complete_steps(layout=PAIRS)]

    found = run_with(slots, tmp_path / "ckpt", use)

    assert found == [
        (5, [(0, 1), (1, 1), (2, 1)], {3: 1}),
        (4, [(0, 0), (1, 0), (2, 0), (3, 0)], {}),
    ]


def test_replica_complete_steps_leaves_out_lost_ranks_memory(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    _three_ranks_ahead(slots, writer, make_state)

    async def use(memory: CheckpointMemory) -> list[tuple[int, list[int], dict[int, int]]]:
        return [(step, [state.rank for state in states], peers)
                for step, states, peers in memory.replica_complete_steps(lost={1},
                                                                         layout=PAIRS)]

    found = run_with(slots, tmp_path / "ckpt", use)

    # Step 5: rank 3 has no step 5, and its replica rank 1 is lost.
    assert found == [(4, [0, 2, 3], {1: 3})]


# --- dump ---------------------------------------------------------------------------------------


def test_dump_saves_the_lost_ranks_state_from_a_replica(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    seqs = two_steps_everywhere(slots, writer, make_state)
    root = tmp_path / "ckpt"
    fake = FakePersister(reply=PERSISTED)
    recorded: list[events.Event] = []

    async def use(memory: CheckpointMemory) -> tuple[int | None, int]:
        return await memory.dump(lost={1}, layout=ALL_REPLICAS), memory.persisted_step

    step, persisted = run_with(slots, root, use, fake=fake, recorded=recorded)

    assert (step, persisted) == (4, 4)
    [command] = fake.commands
    assert (command.step, command.world_size, command.root, command.keep) == (
        4, WORLD, str(root), 3)
    assert list(command.shards) == [
        pb.Shard(rank=0, path=slots.path(0, 1), seq=seqs[0], as_rank=0),
        pb.Shard(rank=0, path=slots.path(0, 1), seq=seqs[0], as_rank=1),
        pb.Shard(rank=2, path=slots.path(2, 1), seq=seqs[2], as_rank=2),
        pb.Shard(rank=3, path=slots.path(3, 1), seq=seqs[3], as_rank=3),
    ]
    assert recorded == [events.CheckpointPersisted(job=JOB, step=4, path="/ckpt/step-x",
                                                   nbytes=1234, seconds=0.5)]


def test_dump_with_pairs_uses_the_lost_ranks_own_part(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    two_steps_everywhere(slots, writer, make_state)
    fake = FakePersister(reply=PERSISTED)

    async def use(memory: CheckpointMemory) -> int | None:
        return await memory.dump(lost={0, 1}, layout=PAIRS)

    assert run_with(slots, tmp_path / "ckpt", use, fake=fake) == 4
    [command] = fake.commands
    assert [(shard.rank, shard.as_rank) for shard in command.shards] == [
        (2, 0), (3, 1), (2, 2), (3, 3)]


def test_dump_does_not_write_a_step_already_on_disk(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    two_steps_everywhere(slots, writer, make_state)
    fake = FakePersister(reply=PERSISTED)

    async def use(memory: CheckpointMemory) -> tuple[int | None, int | None]:
        first = await memory.dump(lost={1}, layout=ALL_REPLICAS)
        return first, await memory.dump(lost={1}, layout=ALL_REPLICAS)

    assert run_with(slots, tmp_path / "ckpt", use, fake=fake) == (4, 4)
    assert len(fake.commands) == 1


@pytest.mark.parametrize(("lost", "layout"), [({1, 3}, PAIRS), ({0, 1, 2, 3}, ALL_REPLICAS)])
def test_dump_without_a_replica_saves_nothing(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState,
        lost: set[int], layout: ReplicaLayout) -> None:
    two_steps_everywhere(slots, writer, make_state)
    fake = FakePersister(reply=PERSISTED)

    async def use(memory: CheckpointMemory) -> int | None:
        return await memory.dump(lost=lost, layout=layout)

    assert run_with(slots, tmp_path / "ckpt", use, fake=fake) is None
    assert fake.commands == []


def test_dump_with_nothing_in_memory_saves_nothing(tmp_path: Path, slots: SnapshotSlots) -> None:
    fake = FakePersister(reply=PERSISTED)

    async def use(memory: CheckpointMemory) -> int | None:
        return await memory.dump(lost={1}, layout=ALL_REPLICAS)

    assert run_with(slots, tmp_path / "ckpt", use, fake=fake) is None
    assert fake.commands == []


@pytest.mark.parametrize("fake", [
    FakePersister(reply=pb.PersisterReply(persist_failed=pb.PersistFailed(error="disk full"))),
    FakePersister(lost=True),
], ids=["failed", "lost"])
def test_dump_that_the_persister_does_not_finish_returns_none(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState,
        fake: FakePersister) -> None:
    two_steps_everywhere(slots, writer, make_state)
    recorded: list[events.Event] = []

    async def use(memory: CheckpointMemory) -> tuple[int | None, int]:
        return await memory.dump(lost={1}, layout=ALL_REPLICAS), memory.persisted_step

    assert run_with(slots, tmp_path / "ckpt", use, fake=fake, recorded=recorded) == (None, -1)
    assert len(fake.commands) == 1
    assert recorded == []


def test_a_dumped_checkpoint_restores_the_lost_rank_from_disk(
        tmp_path: Path, slots: SnapshotSlots, writer: Writer, make_state: MakeState) -> None:
    """The persister really writes the replica's snapshot as the lost rank's shard, and the
    checkpoint verifies when it is restored."""
    two_steps_everywhere(slots, writer, make_state)
    root = tmp_path / "ckpt"
    fake = FakePersister(answer=persister.persist)

    async def use(memory: CheckpointMemory) -> tuple[int | None, RestoreChoice]:
        step = await memory.dump(lost={1}, layout=ALL_REPLICAS)
        return step, await memory.plan_restore(lost={1})  # no layout: memory cannot serve

    step, choice = run_with(slots, root, use, fake=fake)

    assert step == 4
    assert choice.source is messages.RestoreSource.DISK
    assert choice.step == 4
    assert choice.note == ""
    directory = CheckpointDirectory(root)
    manifest = directory.read_manifest(directory.step_dir(4))
    assert [(shard.rank, shard.source) for shard in manifest.shards] == [
        (0, None), (1, 0), (2, None), (3, None)]
    header, tree = snapshot.read_snapshot(choice.paths[1])
    assert header.rank == 0
    assert tree["state"]["model"]["weight"][0].item() == 400.0  # rank 0's state of step 4
    _, own = snapshot.read_snapshot(choice.paths[3])
    assert own["state"]["model"]["weight"][0].item() == 403.0
