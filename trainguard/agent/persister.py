"""The persister: a helper process that checksums snapshots and writes them to disk.

It runs apart from the agent so that hashing and disk writes never compete with the agent's event
loop, and so that its death mid-write (tested with SIGKILL) costs only the checkpoint being
written: shards are written under temporary names and renamed when durable, and the manifest that
makes a checkpoint complete is renamed into place last.

Runs as ``python -m trainguard.agent.persister PARENT_PID``; reads ``PersisterRequest`` messages
on stdin and answers each with a ``PersisterReply`` on stdout (helpers.proto, length-framed):

- ``hash{shards}`` -> ``hashed{results}``: checksums written into the memory slots' headers.
- ``persist{step, world_size, root, keep, bandwidth, shards}`` -> ``persisted{step, path,
  nbytes, seconds, removed}`` or ``persist_failed{step, error, overwritten}`` (``overwritten``: a
  worker reused a slot before it was copied out; a newer snapshot may do). ``bandwidth`` limits
  bytes per second (0: no limit), for hosts where checkpoint writes would starve the job's own
  I/O.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import shutil
import sys
import time
from pathlib import Path

import psutil
import xxhash

from trainguard import clock as clocks
from trainguard import owner_only
from trainguard.agent import lifeline
from trainguard.ipc import checkpoint_layout, snapshot_layout
from trainguard.proto import helpers_pb2 as pb
from trainguard.proto import versioned

__all__ = ["PersistError", "hash_slot", "main", "persist"]

_CHUNK = 8 << 20


class PersistError(RuntimeError):
    """A checkpoint that could not be written; ``overwritten`` when a newer one may succeed."""

    def __init__(self, message: str, *, overwritten: bool = False) -> None:
        super().__init__(message)
        self.overwritten = overwritten


@dataclasses.dataclass(frozen=True)
class _Shard:
    rank: int
    path: str
    seq: int


class _OpenSlot:
    """A memory slot mapped for reading, checked to hold the snapshot ``seq`` it should."""

    def __init__(self, shard: _Shard) -> None:
        self.shard = shard
        descriptor = os.open(shard.path, os.O_RDWR)
        try:
            size = os.fstat(descriptor).st_size
            # Populated at once: copying out must be quick, before the worker reuses the slot.
            self.memory = mmap.mmap(descriptor, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
        finally:
            os.close(descriptor)
        try:
            self.header = snapshot_layout.SnapshotHeader.unpack(self.memory, size=size)
        except snapshot_layout.LayoutError as error:
            self.memory.close()
            raise PersistError(f"rank {shard.rank}: {error}") from error
        self.check()

    def check(self) -> None:
        seq = snapshot_layout.read_seq(self.memory)
        if seq != self.shard.seq:
            raise PersistError(
                f"rank {self.shard.rank}: snapshot {self.shard.seq} was overwritten (now {seq})",
                overwritten=True)

    def record_checksum(self, checksum: int) -> None:
        if snapshot_layout.read_seq(self.memory) == self.shard.seq:
            snapshot_layout.write_checksum(self.memory, checksum, self.shard.seq)

    def close(self) -> None:
        self.memory.close()


def hash_slot(shard: _Shard) -> int:
    slot = _OpenSlot(shard)
    try:
        checksum = snapshot_layout.compute_checksum(slot.memory, slot.header)
        slot.check()
        slot.record_checksum(checksum)
        return checksum
    finally:
        slot.close()


class _Throttle:
    def __init__(self, bandwidth: int) -> None:
        self._bandwidth = bandwidth
        self._started = time.monotonic()
        self._written = 0

    def wrote(self, nbytes: int) -> None:
        self._written += nbytes
        if self._bandwidth > 0:
            ahead = self._written / self._bandwidth - (time.monotonic() - self._started)
            if ahead > 0:
                time.sleep(ahead)


def _write_shard(data: memoryview, header: snapshot_layout.SnapshotHeader, target: Path,
                 throttle: _Throttle) -> int:
    """Write one rank's snapshot durably under ``target``; returns its checksum."""
    temporary = target.with_name(target.name + ".tmp")
    digest = xxhash.xxh3_64()
    with os.fdopen(owner_only.create(temporary), "wb") as stream:
        stream.write(bytes(snapshot_layout.HEADER_SIZE))  # the header goes in last, with checksum
        for start in range(snapshot_layout.HEADER_SIZE, header.end, _CHUNK):
            chunk = data[start : min(start + _CHUNK, header.end)]
            digest.update(chunk)
            stream.write(chunk)
            throttle.wrote(len(chunk))
        checksum = digest.intdigest()
        stream.seek(0)
        stream.write(dataclasses.replace(header, checksum=checksum, checksum_seq=header.seq).pack())
        stream.flush()
        os.fsync(stream.fileno())
    temporary.rename(target)
    return checksum


def persist(command: pb.Persist) -> pb.PersisterReply:
    """Write every rank's snapshot of one step to disk, then the manifest.

    A worker reuses a slot two snapshots later, which can come long before a slow disk write
    ends. So when memory allows, every shard is first copied out of shared memory into this
    process (milliseconds) and checked to be still the same snapshot; the private copies are then
    written as slowly as the bandwidth limit asks, with no race left. A checkpoint too big to copy
    (over a quarter of the available memory) is written straight from shared memory, each shard
    checked afterwards; a job that snapshots that much state takes its snapshots further apart.
    """
    step = command.step
    directory = checkpoint_layout.CheckpointDirectory(Path(command.root))
    target = directory.partial_dir(step)
    started = time.monotonic()
    throttle = _Throttle(command.bandwidth)
    slots: list[_OpenSlot] = []
    records = []
    try:
        ranks = []  # the rank each shard is saved as: a replica may stand in for a lost rank
        for item in command.shards:
            slot = _OpenSlot(_Shard(item.rank, item.path, item.seq))
            slots.append(slot)
            ranks.append(item.as_rank if item.HasField("as_rank") else item.rank)
            if slot.header.step != step:
                raise PersistError(
                    f"rank {slot.shard.rank}: slot holds step {slot.header.step}, not {step}")
        private = sum(slot.header.end for slot in slots) < psutil.virtual_memory().available // 4
        sources: list[bytes | mmap.mmap] = []
        for slot in slots:
            sources.append(slot.memory[: slot.header.end] if private else slot.memory)
            slot.check()
        owner_only.make_dir(target)
        for rank, slot, data in zip(ranks, slots, sources, strict=True):
            name = checkpoint_layout.shard_name(rank)
            checksum = _write_shard(memoryview(data), slot.header, target / name, throttle)
            if not private:
                slot.check()  # a straight write may have raced a worker
            slot.record_checksum(checksum)
            source = None if rank == slot.shard.rank else slot.shard.rank
            records.append(checkpoint_layout.ShardRecord(rank, name, slot.header.end, checksum,
                                                       source))
        checkpoint_layout.sync_directory(target)
        manifest = checkpoint_layout.Manifest(
            step=step,
            world_size=command.world_size,
            created=clocks.iso_utc(time.time()),
            shards=tuple(sorted(records, key=lambda record: record.rank)),
        )
        directory.commit_manifest(target, manifest)
        final = directory.publish(target, step)
    except (PersistError, OSError) as error:
        shutil.rmtree(target, ignore_errors=True)
        return pb.PersisterReply(persist_failed=pb.PersistFailed(
            step=step, error=str(error),
            overwritten=isinstance(error, PersistError) and error.overwritten))
    finally:
        for slot in slots:
            slot.close()
    removed = directory.retain(command.keep)
    return pb.PersisterReply(persisted=pb.Persisted(
        step=step, path=str(final), nbytes=sum(record.nbytes for record in records),
        seconds=time.monotonic() - started, removed=[str(path) for path in removed]))


def _hash(command: pb.Hash) -> pb.PersisterReply:
    results = []
    for item in command.shards:
        shard = _Shard(item.rank, item.path, item.seq)
        try:
            results.append(pb.Checksum(rank=shard.rank, seq=shard.seq,
                                       checksum=hash_slot(shard)))
        except (PersistError, OSError):
            continue  # overwritten by a newer snapshot, which will be hashed in turn
    return pb.PersisterReply(hashed=pb.Hashed(results=results))


def main(argv: list[str]) -> None:
    lifeline.die_with_parent(int(argv[0]))
    lifeline.leave_stop_signals_to_parent()
    # Not niced: on a host whose cores the workers fill, a niced persister would copy a
    # snapshot out too slowly to beat the worker that reuses its slot two snapshots later.
    while (data := versioned.read_frame(sys.stdin.buffer)) is not None:
        request = versioned.parse(pb.PersisterRequest, data)
        reply = (persist(request.persist) if request.WhichOneof("kind") == "persist"
                 else _hash(request.hash))
        sys.stdout.buffer.write(versioned.frame(versioned.serialize(reply)))
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
