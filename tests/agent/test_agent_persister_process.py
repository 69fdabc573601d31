"""The persister as a real process, driven by PersisterClient, including its death mid-write."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainguard.agent.persister_client import PersisterClient, PersisterLostError
from trainguard.agent.snapshot_slots import SnapshotSlots
from trainguard.ipc.checkpoint_layout import CheckpointDirectory
from trainguard.proto import helpers_pb2 as pb

CALL_TIMEOUT = 60.0


def write_step(slots: SnapshotSlots, writer: Callable[..., int],
               make_state: Callable[..., dict[str, Any]], step: int, *, slot: int,
               numel: int = 256) -> list[pb.Shard]:
    shards: list[pb.Shard] = []
    for rank in range(2):
        seq = writer(slots, rank, slot, make_state(step, rank, numel=numel), step=step)
        shards.append(pb.Shard(rank=rank, path=slots.path(rank, slot), seq=seq))
    return shards


def persist(root: Path, step: int, shards: list[pb.Shard], *,
            bandwidth: int = 0) -> pb.PersisterRequest:
    return pb.PersisterRequest(persist=pb.Persist(step=step, world_size=2, root=str(root),
                                                  keep=3, bandwidth=bandwidth, shards=shards))


async def shut(client: PersisterClient) -> None:
    pid = client.pid
    try:
        await asyncio.wait_for(client.close(), 20)
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_call_persists_and_hashes(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    shards = write_step(slots, writer, make_state, 5, slot=0)

    async def scenario() -> tuple[pb.PersisterReply, pb.PersisterReply, int | None, int]:
        client = PersisterClient(env=os.environ)
        try:
            hashed = await asyncio.wait_for(
                client.call(pb.PersisterRequest(hash=pb.Hash(shards=shards))), CALL_TIMEOUT)
            persisted = await asyncio.wait_for(client.call(persist(tmp_path, 5, shards)),
                                               CALL_TIMEOUT)
            return hashed, persisted, client.pid, client.restarts
        finally:
            await shut(client)

    hashed, persisted, pid, restarts = asyncio.run(scenario())
    assert pid is not None
    assert pid != os.getpid()
    assert restarts == 0
    assert hashed.WhichOneof("kind") == "hashed"
    assert [result.rank for result in hashed.hashed.results] == [0, 1]
    assert persisted.WhichOneof("kind") == "persisted"
    assert persisted.persisted.path == str(tmp_path / "step-000000005")
    directory = CheckpointDirectory(tmp_path)
    manifest = directory.read_manifest(tmp_path / "step-000000005")
    directory.verify(tmp_path / "step-000000005", manifest)
    for rank in range(2):
        header = slots.header(rank, 0)
        assert header is not None
        assert header.has_checksum
        assert header.checksum == hashed.hashed.results[rank].checksum
        assert header.checksum == manifest.shards[rank].checksum


async def wait_for_partial(root: Path, step: int, *, timeout: float) -> Path:
    """The persister's ``.partial-`` directory for ``step``, once it holds a shard."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        for candidate in root.glob(f"step-{step:09d}.partial-*"):
            if any(candidate.iterdir()):
                return candidate
        await asyncio.sleep(0.02)
    raise AssertionError(f"no partial checkpoint of step {step} within {timeout} s")


def test_persister_killed_mid_write_costs_only_that_checkpoint(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    first = write_step(slots, writer, make_state, 1, slot=0)
    second = write_step(slots, writer, make_state, 2, slot=1, numel=1 << 20)  # 4 MiB per rank

    async def scenario() -> tuple[BaseException | None, list[int], int, pb.PersisterReply]:
        client = PersisterClient(env=os.environ)
        try:
            done = await asyncio.wait_for(client.call(persist(tmp_path, 1, first)),
                                          CALL_TIMEOUT)
            assert done.WhichOneof("kind") == "persisted"
            # 8 MiB at 1 MiB/s: the write takes about 8 s, and it is killed within it.
            call = asyncio.create_task(
                client.call(persist(tmp_path, 2, second, bandwidth=1 << 20)))
            await wait_for_partial(tmp_path, 2, timeout=CALL_TIMEOUT)
            assert not call.done()
            pid = client.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            lost: BaseException | None = None
            try:
                await asyncio.wait_for(call, CALL_TIMEOUT)
            except PersisterLostError as error:
                lost = error
            complete_after_kill = [step for step, path in CheckpointDirectory(
                tmp_path).step_dirs() if (path / "manifest.json").exists()]
            retried = await asyncio.wait_for(client.call(persist(tmp_path, 2, second)),
                                             CALL_TIMEOUT)
            assert client.pid != pid
            return lost, complete_after_kill, client.restarts, retried
        finally:
            await shut(client)

    lost, complete_after_kill, restarts, retried = asyncio.run(scenario())

    assert isinstance(lost, PersisterLostError)
    assert f"exited with {-signal.SIGKILL}" in str(lost)
    assert complete_after_kill == [1]
    assert restarts == 1
    assert retried.WhichOneof("kind") == "persisted"
    directory = CheckpointDirectory(tmp_path)
    for step in (1, 2):
        path = directory.step_dir(step)
        directory.verify(path, directory.read_manifest(path))
    # The successful persist's retention removed the dead writer's leftovers.
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "step-000000001", "step-000000002"]


def test_a_killed_persister_leaves_the_previous_checkpoint_intact(
        tmp_path: Path, slots: SnapshotSlots, writer: Callable[..., int],
        make_state: Callable[..., dict[str, Any]]) -> None:
    first = write_step(slots, writer, make_state, 1, slot=0)
    second = write_step(slots, writer, make_state, 2, slot=1, numel=1 << 20)

    async def scenario() -> None:
        client = PersisterClient(env=os.environ)
        try:
            await asyncio.wait_for(client.call(persist(tmp_path, 1, first)), CALL_TIMEOUT)
            call = asyncio.create_task(
                client.call(persist(tmp_path, 2, second, bandwidth=1 << 20)))
            await wait_for_partial(tmp_path, 2, timeout=CALL_TIMEOUT)
            assert client.pid is not None
            os.kill(client.pid, signal.SIGKILL)
            with pytest.raises(PersisterLostError):
                await asyncio.wait_for(call, CALL_TIMEOUT)
        finally:
            await shut(client)

    asyncio.run(scenario())
    directory = CheckpointDirectory(tmp_path)
    assert [step for step, _ in directory.step_dirs()] == [1]
    path = directory.step_dir(1)
    directory.verify(path, directory.read_manifest(path))
    assert len(list(tmp_path.glob("step-000000002.partial-*"))) == 1
