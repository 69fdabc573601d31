"""The agent's checkpoint memory: snapshots in shared memory, persisted in the background.

Workers copy their state into slots this component owns (:mod:`.snapshot_slots`) and tell it
when a snapshot is committed. A step is *complete* once every rank has committed it. The newest
complete step is checksummed once it has stayed the newest for a second and, every
``persist_interval`` seconds, persisted to disk by the
persister process (across hosts, the step the job's controller orders, the same on every host:
:meth:`CheckpointMemory.persist`); training never waits for either. A spare host that takes a
lost node's ranks takes that node's checkpoint directory too (:meth:`CheckpointMemory.take`).
After a fault, :meth:`CheckpointMemory.plan_restore` picks the newest complete step that is
intact in memory, else the newest complete checkpoint on disk that verifies, and says why each
newer candidate was skipped.

A checkpoint directory that fills up or turns read-only does not stop training: the failure is
warned about once, with the free space, until a write succeeds again, and :meth:`lag` tells the
end of the run how far the disk is behind memory.

Why one module past 500 lines: persisting, restore planning and the inventory reported to the
controller (``held_steps``, ``disk_steps``) all read the same slots and the same record of what
is on disk (``_persisted_step``), and each changes what the others see (a restore plan rolls the
record back; a persist, timed here or ordered, moves it on). The value a plan produces
(:class:`RestoreChoice`, with :func:`redone_steps`) is what would move out next if it grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from trainguard import clock as clocks
from trainguard.agent import persister_client, snapshot_slots
from trainguard.faults import process
from trainguard.ipc import checkpoint_layout, messages
from trainguard.job import events, replicas
from trainguard.proto import helpers_pb2

__all__ = ["CheckpointLag", "CheckpointMemory", "CheckpointSettings", "RestoreChoice",
           "redone_steps"]

logger = logging.getLogger(__name__)

_PERSIST_ATTEMPTS = 3
# Checksumming reads the whole snapshot: memory bandwidth and CPU that training shares. A complete
# step is checksummed once it has stayed the newest this long, at most once per this long: a
# snapshot taken every step is overwritten two steps later, before a restore could use its
# checksum (a restore trusts the newest step's sequence number), and hashing one every second
# took about 2% of a core beside 4 ranks of 75 MB. Snapshots further apart are each checksummed.
_HASH_INTERVAL = 1.0


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    checkpoint_dir: Path | None = None
    """Where checkpoints are persisted; default ``<run dir>/checkpoints``."""
    keep_checkpoints: int = 3
    """Complete checkpoints kept on disk (>= 1); older ones are deleted."""
    persist_interval: float = 30.0
    """Seconds between disk writes of the newest complete snapshot (>= 0; 0: every one; across
    hosts at most one a second, of the newest step every host holds). Memory snapshots can be
    taken every step; disk writes cost bandwidth, so they are paced."""
    persist_bandwidth: int = 0
    """Bytes per second the persister may write (0: unlimited)."""

    def __post_init__(self) -> None:
        if self.keep_checkpoints < 1:
            raise ValueError(f"keep-checkpoints must be >= 1, got {self.keep_checkpoints}")
        if self.persist_interval < 0:
            raise ValueError(f"persist-interval must be >= 0 seconds, got {self.persist_interval}")
        if self.persist_bandwidth < 0:
            raise ValueError(f"persist-bandwidth must be >= 0, got {self.persist_bandwidth}")


@dataclasses.dataclass(frozen=True)
class RestoreChoice:
    source: messages.RestoreSource
    step: int
    paths: dict[int, str]  # rank -> file holding its state
    note: str
    peers: dict[int, int] = dataclasses.field(default_factory=dict)
    """rank -> the data-parallel replica that sends it its state (source PEER for that rank)."""
    stand_ins: dict[int, int] = dataclasses.field(default_factory=dict)
    """rank -> the replica whose snapshot it reads from this host's memory itself (source
    REPLICA for that rank; ``paths`` names that snapshot)."""

    @property
    def label(self) -> str:
        """Where the state comes from, for people: ``memory``, ``memory and peers``, ``disk``."""
        return f"{self.source} and peers" if self.peers or self.stand_ins else str(self.source)

    def read_locally(self, ranks: Collection[int] | None = None) -> RestoreChoice:
        """This choice with each replica on this host that stands in for a rank of this host
        (``ranks``; None: every rank is) read by the rank itself from memory, not sent over
        the process group: for a generation of new processes on this host, which may restore
        before they form their process group (a plain Session does). A replica sending to a
        rank on another host, or from one, still sends."""
        local = {rank: donor for rank, donor in self.peers.items()
                 if donor in self.paths and (ranks is None or rank in ranks)}
        if not local:
            return self
        paths = self.paths | {rank: self.paths[donor] for rank, donor in local.items()}
        remote = {rank: donor for rank, donor in self.peers.items() if rank not in local}
        return dataclasses.replace(self, paths=paths, peers=remote, stand_ins=local)

    def holder_paths(self, world_size: int) -> list[str]:
        """By rank, the snapshot of the step that holds its shares: its own, else its stand-in's
        (a replica's snapshot names no lost rank as a holder: see replica_complete_steps)."""
        paths = self.read_locally().paths
        return [paths.get(rank, "") for rank in range(world_size)]

    def send_to(self, rank: int) -> list[int]:
        return sorted(receiver for receiver, donor in self.peers.items() if donor == rank)


@dataclasses.dataclass(frozen=True)
class CheckpointLag:
    """The newest complete snapshot in memory is newer than the newest checkpoint on disk."""

    memory_step: int
    disk_step: int | None  # None: this run has no checkpoint on disk
    error: str  # why the last write failed; empty when none failed (it was not yet due)

    @property
    def steps(self) -> int:
        """Steps a run resuming from disk would redo."""
        return self.memory_step - (self.disk_step or 0)


def redone_steps(committed: Mapping[int, int | None], restore_step: int) -> str:
    """Why a restart from ``restore_step`` redoes completed steps, given each rank's newest
    snapshot (``committed``); empty when it redoes none.

    A rank that fails inside (or just before) its snapshot of step N+1 leaves N+1 complete on
    its replicas only. A replica's snapshot that keeps its share stands in for it; when none
    can (two ring neighbours lost; a rank without replicas), everyone goes back to N.
    """
    held = [step for step in committed.values() if step is not None]
    newest = max(held, default=None)
    if newest is None or newest <= restore_step:
        return ""
    behind = sorted(rank for rank, step in committed.items() if step is None or step < newest)
    ahead = sorted(rank for rank, step in committed.items() if step == newest)
    count = newest - restore_step
    return (f"{count} completed step{'s' if count > 1 else ''} redone: ranks {ahead} hold a "
            f"snapshot of step {newest} but ranks {behind} do not (the fault struck before "
            f"their snapshot of it was complete), and every rank resumes at step {restore_step}, "
            f"the newest step each rank can restore: no replica of theirs can stand in for them "
            f"at step {newest} (none left keeps their shares, or they have no replicas)")


class CheckpointMemory:
    def __init__(
        self,
        settings: CheckpointSettings,
        *,
        job: str,
        world_size: int,
        ranks: Sequence[int] | None = None,
        directory: checkpoint_layout.CheckpointDirectory,
        slots: snapshot_slots.SnapshotSlots,
        persister: persister_client.PersisterClient,
        record: Callable[[events.Event], object],
        clock: clocks.Clock,
        persist_on_order: bool = False,
    ) -> None:
        """``persist_on_order``: disk writes are ordered (:meth:`persist`) by the controller of
        a job across hosts, which has every host write the same steps; this host's own timer
        then only checksums."""
        self.settings = settings
        self._persist_on_order = persist_on_order
        self.directory = directory
        self._job = job
        self._world_size = world_size
        self._ranks = list(ranks if ranks is not None else range(world_size))
        """The ranks whose snapshots this host's memory holds (a job on several hosts: not
        every rank of ``world_size``)."""
        self._slots = slots
        self._persister = persister
        self._record = record
        self._clock = clock
        self._persisted_step = -1
        self._hashed_step = -1
        self._last_persist = clock.monotonic()
        self._last_look = float("-inf")
        self._settling: tuple[int, float] | None = None  # the newest complete step, seen since
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._busy = asyncio.Lock()
        self._failing: str | None = None  # the error of the writes failing since the last success
        self._disk_steps: tuple[tuple[int, tuple[int, ...], Path], list[int]] | None = None

    # --- what workers ask for ----------------------------------------------------------------

    def grant(self, rank: int, slot: int, nbytes: int) -> tuple[str, int]:
        """Raises: SnapshotMemoryError, ValueError (see SnapshotSlots.grant)."""
        return self._slots.grant(rank, slot, nbytes)

    def slot_paths(self, rank: int) -> list[str]:
        return [self._slots.path(rank, slot) for slot in range(snapshot_slots.SLOTS_PER_RANK)]

    def committed(self) -> None:
        """A worker committed a snapshot: look for a newly complete step, if a checksum or a
        write is due (waking the loop at every commit of every rank costs the agent more than
        the commit's message itself)."""
        now = self._clock.monotonic()
        if self._write_due(now) or self._look_due(now):
            self._wake.set()

    def _write_due(self, now: float) -> bool:
        """Whether the background loop writes the newest step to disk now (not when the
        controller orders each write)."""
        return (not self._persist_on_order
                and now - self._last_persist >= self.settings.persist_interval)

    def _look_due(self, now: float) -> bool:
        """Whether a commit wakes the loop to look for a step to checksum: at most once per
        :data:`_HASH_INTERVAL`, since a wake-up at every commit of every rank costs more."""
        return now - self._last_look >= _HASH_INTERVAL

    def newest_step(self, rank: int) -> int | None:
        """The step of the rank's newest complete snapshot, read from its slot headers (a
        commit message may still be on its way, or never come from a killed rank)."""
        held = self.held_steps(rank)
        return held[0] if held else None

    def take(self, ranks: Sequence[int], *, node: int) -> None:
        """This host's memory holds ``ranks`` from now on, node ``node``'s (a spare taking a
        lost host's), and its checkpoints are that node's: on a shared disk, or on that host
        come back, the node's checkpoints are there to restore.

        Raises:
            checkpoint_layout.CheckpointError: that node's directory is not writable.
        """
        directory = checkpoint_layout.CheckpointDirectory(
            checkpoint_layout.node_directory(self.directory.root.parent, node))
        directory.ensure_writable()
        self.directory = directory
        self._ranks = list(ranks)

    def held_steps(self, rank: int) -> list[int]:
        """Every step of which ``rank``'s snapshot in this host's memory is complete, newest
        first."""
        return [state.header.step for state in self._slots.committed(rank)]

    def writing(self, rank: int) -> bool:
        return self._slots.writing(rank)

    def complete_steps(self) -> list[tuple[int, list[snapshot_slots.SlotState]]]:
        """Steps every rank holds in memory itself, newest first, with each rank's slot.

        Read from the slot headers themselves, which survive any worker and any lost message.
        """
        return [(step, states) for step, states, _ in self.replica_complete_steps()]

    def replica_complete_steps(
        self, *, lost: Collection[int] = (), layout: replicas.ReplicaLayout | None = None,
        remote: Collection[int] = (), only: int | None = None
    ) -> list[tuple[int, list[snapshot_slots.SlotState], dict[int, int]]]:
        """Steps every rank can restore from memory, newest first: from its own snapshot, or
        (given the job's replica ``layout``) from a replica's. ``lost``: ranks whose memory
        does not count; ``remote``: ranks sent their state of step ``only`` by a replica on
        another host (needing nothing here). Returns the snapshots used and, for each rank
        without its own, the replica that stands in."""
        held = {rank: {state.header.step: state  # the first of a step: committed last
                       for state in reversed(self._slots.committed(rank))}
                for rank in self._ranks if rank not in lost and rank not in remote}
        steps = {step for states in held.values() for step in states}
        if only is not None and remote:
            steps.add(only)  # this host's ranks may all be receivers
        found = []
        for step in sorted(steps, reverse=True):
            used: dict[int, snapshot_slots.SlotState] = {}
            peers: dict[int, int] = {}
            having = [rank for rank, states in held.items() if step in states]
            holders: dict[int, set[int]] = {}  # read from the tables once a rank lacks the step
            for rank in self._ranks:
                if rank in remote:
                    continue
                if rank in having:
                    used[rank] = held[rank][step]
                    continue
                if layout is None:
                    break
                holders = holders or {r: self._slots.holders(held[r][step]) for r in having}
                # A replica whose snapshot leaves tensors to this rank (shares) cannot stand in.
                donor = layout.donor(rank, [r for r in having if rank not in holders[r]])
                if donor is None:
                    break
                peers[rank] = donor
            else:
                found.append((step, list(used.values()), peers))
        return found

    def disk_steps(self) -> list[int]:
        """The steps on disk whose manifest holds every rank of this host, newest first (their
        shards are verified only when one is restored). Every report to the controller carries
        them: read from the manifests again only after a write or a restore plan changed
        them."""
        key = (self._persisted_step, tuple(self._ranks), self.directory.root)
        if self._disk_steps is None or self._disk_steps[0] != key:
            found = []
            for step, path in self.directory.step_dirs():
                with contextlib.suppress(checkpoint_layout.CheckpointError):
                    self.directory.holding(path, world_size=self._world_size, ranks=self._ranks)
                    found.append(step)
            self._disk_steps = (key, found)
        return list(self._disk_steps[1])

    def newest_complete(self) -> tuple[int, list[snapshot_slots.SlotState]] | None:
        complete = self.complete_steps()
        return complete[0] if complete else None

    @property
    def persisted_step(self) -> int:
        return self._persisted_step

    def lag(self) -> CheckpointLag | None:
        """How far the disk is behind memory; None when it holds the newest complete step."""
        newest = self.newest_complete()
        if newest is None or newest[0] <= self._persisted_step:
            return None
        return CheckpointLag(memory_step=newest[0], error=self._failing or "",
                             disk_step=self._persisted_step if self._persisted_step >= 0 else None)

    # --- background persistence --------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="checkpoint-persistence")

    async def _run(self) -> None:
        while True:
            now = self._clock.monotonic()
            due = self._last_persist + self.settings.persist_interval - now
            # Once a write is due, the next committed snapshot triggers it.
            waits = [due] if due > 0 else []
            if self._settling is not None:  # a step to checksum once it has settled
                waits.append(max(0.0, self._settling[1] + _HASH_INTERVAL - now))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=min(waits, default=None))
            self._wake.clear()
            now = self._clock.monotonic()
            if self._write_due(now):
                await self.flush()
            elif self._look_due(now) or self._settled(now):
                self._last_look = now
                await self._hash_settled(now)

    def _shards(self, states: list[snapshot_slots.SlotState],
                peers: dict[int, int] | None = None) -> list[helpers_pb2.Shard]:
        """The persister's shard list; ``peers``: ranks saved from a replica's snapshot."""
        by_rank = {state.rank: state for state in states}
        own = [(state.rank, state) for state in states]
        stand_ins = [(rank, by_rank[donor]) for rank, donor in (peers or {}).items()]
        return [
            helpers_pb2.Shard(rank=state.rank, path=self._slots.path(state.rank, state.slot),
                              seq=state.header.seq, as_rank=rank)
            for rank, state in sorted(own + stand_ins, key=lambda item: item[0])
        ]

    def _settled(self, now: float) -> bool:
        return self._settling is not None and now - self._settling[1] >= _HASH_INTERVAL

    async def _hash_settled(self, now: float) -> None:
        """Checksum the newest complete step if it has been the newest since the last look,
        :data:`_HASH_INTERVAL` ago at least; else remember it, to look again then."""
        async with self._busy:
            newest = self.newest_complete()
            if newest is None or newest[0] <= max(self._hashed_step, self._persisted_step):
                self._settling = None
                return
            step, states = newest
            if self._settling is None or self._settling[0] != step:
                self._settling = (step, now)
                return
            if not self._settled(now):
                return
            self._settling = None
            try:
                await self._persister.call(helpers_pb2.PersisterRequest(
                    hash=helpers_pb2.Hash(shards=self._shards(states))))
                self._hashed_step = step
            except persister_client.PersisterLostError as error:
                logger.warning("checksumming the snapshot of step %d failed: %s", step, error)

    async def flush(self) -> bool:
        """Persist the newest complete snapshot unless the disk has it; True when it is durable.

        The newest snapshot is looked up only once the persister is free, and looked up again if
        a worker reused a slot before the persister copied it out (a slot is reused two
        snapshots later; on a busy host the persister may get the CPU later than that).
        """
        async with self._busy:
            for attempt in range(1, _PERSIST_ATTEMPTS + 1):
                newest = self.newest_complete()
                if newest is None or newest[0] <= self._persisted_step:
                    return True
                self._last_persist = self._clock.monotonic()
                reply = await self._persist(newest[0], self._shards(newest[1]))
                if reply is None:
                    return False
                if reply.WhichOneof("kind") == "persisted":
                    return True
                if not reply.persist_failed.overwritten:
                    return False  # _persist reported it
                if attempt == _PERSIST_ATTEMPTS:
                    # The workers outran the copy, which says nothing of the directory: a
                    # later step is written when the persister gets the CPU in time.
                    logger.info("step %d not persisted: its snapshot was overwritten %d times "
                                "while being written (%s)", newest[0], attempt,
                                reply.persist_failed.error)
                    return False
            return False

    async def persist(self, step: int) -> bool:
        """Persist ``step`` of every rank here, unless the disk has it; True when it is durable,
        False when its snapshot is no longer in memory (the workers outran the order)."""
        async with self._busy:
            if step <= self._persisted_step:
                return step in self.disk_steps()
            states = dict(self.complete_steps()).get(step)
            if states is None:
                return False
            self._last_persist = self._clock.monotonic()
            reply = await self._persist(step, self._shards(states))
            return reply is not None and reply.WhichOneof("kind") == "persisted"

    async def dump(self, *, lost: Collection[int], layout: replicas.ReplicaLayout | None
                   ) -> int | None:
        """The dying checkpoint (R5): persist the newest step every rank has in memory, the
        ``lost`` ranks' state taken from their replicas; returns its step (None: nothing to
        save)."""
        async with self._busy:
            candidates = self.replica_complete_steps(lost=lost, layout=layout)
            if not candidates:
                return None
            step, states, peers = candidates[0]
            if step > self._persisted_step:
                reply = await self._persist(step, self._shards(states, peers))
                if reply is None or reply.WhichOneof("kind") != "persisted":
                    return None
            return step

    async def _persist(self, step: int, shards: list[helpers_pb2.Shard]
                       ) -> helpers_pb2.PersisterReply | None:
        request = helpers_pb2.PersisterRequest(persist=helpers_pb2.Persist(
            step=step, world_size=self._world_size, root=str(self.directory.root),
            keep=self.settings.keep_checkpoints, bandwidth=self.settings.persist_bandwidth,
            shards=shards))
        try:
            reply = await self._persister.call(request)
        except persister_client.PersisterLostError as error:
            self._failed(step, str(error))
            return None
        if reply.WhichOneof("kind") == "persisted":
            persisted = reply.persisted
            if self._failing is not None:
                logger.warning("checkpoint of step %d written: the checkpoint directory %s "
                               "works again", step, self.directory.root)
                self._failing = None
            self._persisted_step = step
            self._record(events.CheckpointPersisted(
                job=self._job, step=step, path=persisted.path, nbytes=persisted.nbytes,
                seconds=persisted.seconds))
        elif not reply.persist_failed.overwritten:
            self._failed(step, reply.persist_failed.error)
        return reply

    def _failed(self, step: int, error: str) -> None:
        """Warn of a failed write once, until one succeeds: a full disk fails every write."""
        if self._failing is None:
            try:
                free = f"{shutil.disk_usage(self.directory.root).free / 2**20:.1f} MiB free"
            except OSError as unknown:
                free = f"free space unknown: {unknown}"
            logger.warning("persisting step %d failed: %s (checkpoint directory %s, %s); "
                           "training goes on from memory, and later failures are not reported "
                           "until a checkpoint is written again", step, error,
                           self.directory.root, free)
        else:
            logger.debug("persisting step %d failed: %s", step, error)
        self._failing = error

    # --- restore -----------------------------------------------------------------------------

    async def plan_restore(self, *, lost: Collection[int] = (),
                           layout: replicas.ReplicaLayout | None = None,
                           step: int | None = None,
                           peers: Mapping[int, int] | None = None) -> RestoreChoice:
        """Choose the state every rank of the next generation starts from, and prepare memory.

        ``lost``: ranks whose memory snapshots are not to be used (their device was taken out
        of use); they are cleared. With the job's replica ``layout`` (only when the ranks can
        take state from a peer), a rank without its own snapshot of a step gets a replica's.
        ``step``: the step to restore, which every host of the job restores (0 with nothing
        saved: start afresh); None: the newest step these ranks can. Memory slots holding steps
        newer than the choice (a timeline that was rolled back) are cleared; the rank's next
        snapshot goes to the slot not holding the restored one.

        Raises:
            process.RecoveryError: ``step`` is held neither in memory nor on disk (nothing
                has been cleared).
        """
        memory, skipped = await self._memory_candidate(lost, layout, step, dict(peers or {}))
        disk_step, disk_paths, disk_skipped = await self._disk_candidate(
            newer_than=memory.step if memory else None, only=step)
        skipped.extend(disk_skipped)
        if disk_step is not None and disk_paths is not None:
            choice = RestoreChoice(messages.RestoreSource.DISK, disk_step, disk_paths, "")
        elif memory is not None:
            choice = memory
        elif not step:
            choice = RestoreChoice(messages.RestoreSource.NONE, 0, {}, "")
        else:
            found = "; ".join(skipped) or "no snapshot or checkpoint of it"
            raise process.RecoveryError(
                f"step {step} cannot be restored on this host's ranks {self._ranks}: {found}")
        self._forget_after(choice, lost)
        note = "; ".join(skipped)
        return dataclasses.replace(choice, note=note)

    def next_slot(self, rank: int, choice: RestoreChoice) -> int:
        if choice.source is messages.RestoreSource.MEMORY:
            for state in self._slots.committed(rank):
                if state.header.step == choice.step:
                    return 1 - state.slot
        return 0

    async def _memory_candidate(
        self, lost: Collection[int], layout: replicas.ReplicaLayout | None, only: int | None,
        remote: dict[int, int]
    ) -> tuple[RestoreChoice | None, list[str]]:
        skipped: list[str] = []
        for step, states, local in self.replica_complete_steps(lost=lost, layout=layout,
                                                              remote=remote, only=only):
            if only is not None and step != only:
                continue
            peers = local | remote
            problems = await asyncio.gather(
                *(asyncio.to_thread(self._slots.verify, state) for state in states))
            bad = [f"rank {state.rank}: {problem}"
                   for state, problem in zip(states, problems, strict=True) if problem]
            if not bad:
                paths = {s.rank: self._slots.path(s.rank, s.slot) for s in states}
                return RestoreChoice(messages.RestoreSource.MEMORY, step, paths, "",
                                     peers), skipped
            reason = "; ".join(bad)
            skipped.append(f"memory snapshot of step {step} skipped ({reason})")
            self._record(events.CheckpointRejected(
                job=self._job, path=f"memory:step-{step}", reason=reason))
        return None, skipped

    async def _disk_candidate(
        self, *, newer_than: int | None, only: int | None
    ) -> tuple[int | None, dict[int, str] | None, list[str]]:
        skipped: list[str] = []
        for step, path in self.directory.step_dirs():
            if newer_than is not None and step <= newer_than:
                break
            if only is not None and step != only:
                continue
            try:
                manifest = await asyncio.to_thread(self.directory.check, path,
                                                   world_size=self._world_size, ranks=self._ranks)
            except checkpoint_layout.CheckpointError as error:
                skipped.append(f"{path} skipped ({error})")
                self._record(events.CheckpointRejected(job=self._job, path=str(path),
                                                       reason=str(error)))
                continue
            return step, {s.rank: str(path / s.file) for s in manifest.shards}, skipped
        return None, None, skipped

    def _forget_after(self, choice: RestoreChoice, lost: Collection[int]) -> None:
        """Make memory and bookkeeping agree with the chosen state: later steps never were,
        and the lost ranks' memory is gone."""
        self._hashed_step = min(self._hashed_step, choice.step)
        if choice.source is messages.RestoreSource.DISK:
            self._persisted_step = choice.step
        else:  # a newer step on disk was rejected: the new timeline may write it again
            self._persisted_step = min(self._persisted_step, choice.step)
        for rank in self._slots.ranks():
            for state in self._slots.committed(rank):
                keep = (choice.source is messages.RestoreSource.MEMORY
                        and state.header.step <= choice.step and rank not in lost)
                if not keep:
                    self._slots.invalidate(rank, state.slot)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        async with self._busy:
            await self._persister.close()
        self._slots.close()
