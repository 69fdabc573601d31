"""The state in the node agent's shared memory, under ``trainguard run``.

Each rank has two slots that the agent reserves (double buffering: the agent may copy one to
disk while the next snapshot goes into the other). A snapshot is copied into a slot under its
sequence lock and announced to the agent, which checksums and persists it in the background. A
restore asks the agent for a plan: the rank's own slot, a data-parallel peer's snapshot over the
process group, or the newest verified checkpoint on disk. With shares
(:mod:`trainguard.train.replica_shares`), each replica writes only its shares of the replicated
state, and a restore reads the rest from the holders' snapshots of the same step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from trainguard.ipc import messages, snapshot_layout
from trainguard.train import (
    agent_link,
    copy_behind,
    process_group,
    replica_shares,
    snapshot,
    state_backend,
)

__all__ = ["COPY_BEHIND_BYTES", "DECLARED_SNAPSHOT_SECONDS", "AgentMemoryBackend"]

logger = logging.getLogger(__name__)

COPY_BEHIND_BYTES = 16 * 2**20
"""Optimizer tensors are copied behind only when they hold at least this much: handing the
copy to its thread costs about 0.8 ms per snapshot on a 2-core host running 4 ranks (the woken
thread takes the interpreter lock from the training thread), more than copying a few MB."""

DECLARED_SNAPSHOT_SECONDS = 0.1
"""A snapshot expected to take at least this long is declared to the agent as busy work (its
own hang deadline; the others' step deadlines wait for it). A shorter one is not: its time
simply counts in the step interval, which the step deadline adapts to (2 s at the least), and
two messages fewer per step matter when a snapshot costs a millisecond."""


class _OptimizerSteps:
    """Counts the optimizers' steps, each counted as it begins, under a lock that a
    completion holds while it copies their tensors: so no step changes them mid-copy, and a
    completion sees whether one began since the snapshot."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.watch = copy_behind.BeforeSteps(self._begin).watch

    def _begin(self) -> None:
        with self.lock:
            self.count += 1


@dataclasses.dataclass(frozen=True)
class _Saved:
    """The newest snapshot, as a completion needs it."""

    slot: int
    step: int
    generation: int
    prepared: snapshot.Prepared
    optimizer_steps: int  # _OptimizerSteps.count when it was taken
    owned: frozenset[int] = frozenset()
    """The optimizers' tensors, by index, when they were copied behind (the script changes
    them only in ``step()``): while no step has begun since, the live ones are these bytes."""


@dataclasses.dataclass
class _ReadAhead:
    """A restore read on its own thread (:meth:`AgentMemoryBackend.read_ahead`)."""

    thread: threading.Thread = dataclasses.field(init=False)
    plan: messages.RestorePlan | None = None
    live: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    loaded: state_backend.Loaded | None = None  # None: the plan is left to load()
    error: Exception | None = None


class AgentMemoryBackend:
    def __init__(self, link: agent_link.AgentLink, *, rank: int, world_size: int,
                 request_timeout: float, shares: replica_shares.ReplicaShares,
                 behind: bool | None = False) -> None:
        """Nothing is reserved yet: the first snapshot of each slot asks the agent for memory.

        Args:
            link: the connection to this worker's agent.
            request_timeout: seconds to wait for the agent to answer a restore or a reservation.
            shares: which tensors this rank writes, and how a restore assembles the rest.
            behind: whether the optimizers' tensors are copied while the next step computes
                (False: every snapshot is copied before ``save`` returns); None: while this
                rank has a replica (``shares.replicated``). A rank killed while its copy runs
                behind loses its newest snapshot, and only a replica's can stand in for it;
                without one, the copy behind would cost a step in most kills.
        """
        self._behind = copy_behind.CopyBehind() if behind is not False else None
        self._behind_setting = behind
        self._told_differ = False
        self._shares = shares
        self._link = link
        self._rank = rank
        self._world_size = world_size
        self._request_timeout = request_timeout
        self._slot_paths = ["", ""]
        self._mapped: dict[int, snapshot.MappedSlot] = {}
        self._next_slot = 0
        self._layouts = snapshot.Layouts()
        self._last_seconds: float | None = None
        self._steps = _OptimizerSteps()
        self._saving = threading.Lock()  # a save, or a completion from the reader thread
        self._saved_again = threading.Condition(self._saving)  # notified after each save
        self._saved: _Saved | None = None
        self._room: tuple[list[Any], int] | None = None  # (entries, bytes a completion adds)
        self._completed: _Saved | None = None  # the snapshot completed last
        self._closed = False
        self._ahead: _ReadAhead | None = None
        # (before, current) rules of messages.SnapshotInterval, each (every, from_step): one
        # tuple, replaced whole, since the reader thread sets it while training reads it.
        self._intervals = ((1, 0), (1, 0))

    def due(self, step: int) -> bool:
        """On the steps of the agent's interval (every step until it says otherwise)."""
        before, current = self._intervals
        every, start = current if step >= current[1] else before
        return (step - start) % every == 0

    def pace(self, order: messages.SnapshotInterval) -> None:
        """Take the agent's interval: from ``order.from_step`` on, the rule before it stays."""
        before, current = self._intervals
        if order.from_step > current[1]:
            before = current
        self._intervals = (before, (order.every, order.from_step))

    def save(self, tree: dict[str, Any], *, step: int, generation: int, started: float,
             optimizers: Sequence[torch.optim.Optimizer] = (), whole: bool = False) -> float:
        """Copy ``tree`` into the next slot; the agent persists it to disk in the background.
        With ``optimizers`` (and the copy behind on), their tensors are copied while the next
        step computes (:mod:`trainguard.train.copy_behind`), and the snapshot is committed then.

        Raises:
            StateError: the agent could not reserve memory for the snapshot, or the copy of
                the snapshot before it failed.
        """
        # Before the lock, which its plan takes. What it read is dropped: a script that saves
        # before restoring (or never restores) would keep a whole state in memory for nothing.
        self._finish_reading_ahead()
        self._ahead = None
        with self._saved_again:
            seconds = self._save(tree, step=step, generation=generation, started=started,
                                 optimizers=optimizers, whole=whole)
            self._saved_again.notify_all()
            return seconds

    def _save(self, tree: dict[str, Any], *, step: int, generation: int, started: float,
              optimizers: Sequence[torch.optim.Optimizer], whole: bool) -> float:
        self.flush()
        slot = self._next_slot
        declared = self.slow_save_expected()  # the session declared it busy work
        self._steps.watch(optimizers)
        prepared = self._layouts.prepare(
            tree, holders=None if whole else functools.partial(self._shares.holders,
                                                               optimizers=optimizers))
        if self._shares.differ and not self._told_differ:
            self._told_differ = True
            self._link.send(messages.ReplicasDiffer(self._shares.differ, time.monotonic()))
        mapped = self._slot(slot, prepared.nbytes + self._completion_room(prepared))
        behind = self._behind if (self._shares.replicated if self._behind_setting is None
                                  else self._behind_setting) else None
        owned: list[int] = []  # the optimizers' tensors, by index, for a copy behind
        # Below the threshold in all, no subset is worth a thread: skip finding the owned ones.
        if optimizers and behind is not None and prepared.payload_len >= COPY_BEHIND_BYTES:
            behind.guard(optimizers)
            owners = copy_behind.optimizer_tensors(optimizers)
            owned = [index for index, tensor in enumerate(prepared.tensors)
                     if tensor.data_ptr() in owners]
            if sum(prepared.entries[index].nbytes for index in owned) < COPY_BEHIND_BYTES:
                owned = []
        later = [index for index in owned if prepared.entries[index].nbytes]
        finish = mapped.begin_write(prepared, step=step, generation=generation, rank=self._rank,
                                    world_size=self._world_size, later=later)
        self._next_slot = 1 - slot
        self._saved = _Saved(slot, step, generation, prepared, self._steps.count,
                             frozenset(owned))
        blocked = time.perf_counter() - started
        if later and behind is not None:
            self._last_seconds = blocked
            behind.submit(lambda: self._commit(finish, step, slot, prepared.nbytes,
                                               before=blocked, hold=True))
            return blocked
        self._commit(finish, step, slot, prepared.nbytes, before=blocked, hold=not declared)
        self._last_seconds = time.perf_counter() - started
        return self._last_seconds

    def _completion_room(self, prepared: snapshot.Prepared) -> int:
        """The bytes a completion adds to ``prepared``: its tensors left to this rank's ring
        predecessor, which are the predecessor's run of the optimizers' tensors (the rest of
        that run this rank keeps: :meth:`ReplicaShares.holders`). Reserved with the slot, since
        a completion cannot ask the agent for memory (it runs on the thread that reads the
        agent's answers). Worked out once per layout."""
        if self._room is None or self._room[0] is not prepared.entries:
            tensors = [prepared.tensors[index] for index in self._predecessors_run(prepared)]
            self._room = (prepared.entries, sum(
                snapshot_layout.align(tensor.numel() * tensor.element_size())
                for tensor in tensors))
        return self._room[1]

    def _predecessors_run(self, prepared: snapshot.Prepared) -> list[int]:
        """The tensors ``prepared`` leaves to this rank's ring predecessor, by index."""
        predecessor = self._shares.predecessor
        return [index for index, entry in enumerate(prepared.entries)
                if entry.holder == predecessor]

    def complete(self, holder: int | None = None, *, wait: bool = True) -> str:
        """Write the newest snapshot again into the other slot, with the run of the
        optimizers' tensors that only ``holder`` (this rank's ring predecessor; None: it,
        whichever it is) kept, taken from this rank's live tensors: ``holder`` is lost, perhaps
        without its snapshot of that step (:mod:`trainguard.train.replica_shares`). Only while
        no optimizer step has begun since the snapshot, so that the live tensors are that
        step's. ``wait``: after an optimizer step, wait for the snapshot that follows it (the
        agent's order may come while the training thread is between the two). Called on the
        thread that reads the agent's orders, or by a rank leaving on an error (its
        predecessor may be why); returns "" once written, else why it was not.
        """
        if holder is None:
            holder = self._shares.predecessor
        elif holder != self._shares.predecessor:
            return f"rank {holder} is not this rank's ring predecessor"
        deadline = time.monotonic() + messages.COMPLETE_SHARES_WAIT
        # Not `with`: a snapshot stuck in a collective (the replicas' comparison) would hold
        # this thread, which must go on reading the agent's orders.
        if not self._saving.acquire(timeout=messages.COMPLETE_SHARES_WAIT):
            return "this rank is inside a snapshot"
        try:
            if not self._saved_again.wait_for(
                    lambda: self._closed or (self._saved is not None
                                             and self._steps.count == self._saved.optimizer_steps),
                    max(0.0, deadline - time.monotonic()) if wait else 0.0):
                return ("an optimizer step began since this rank's newest snapshot"
                        if self._saved is not None else "no snapshot since this rank restored")
            if self._closed:
                return "the session is closed"
            self.flush()
            saved = self._saved
            assert saved is not None
            if saved is self._completed:
                return ""  # once is enough
            fill = self._predecessors_run(saved.prepared)
            if not fill:
                return (f"this rank's snapshot of step {saved.step} leaves nothing to rank "
                        f"{holder}")
            source = self._mapped[saved.slot]
            target = self._mapped.get(1 - saved.slot)
            with self._steps.lock:
                if self._steps.count != saved.optimizer_steps:
                    return "an optimizer step began since this rank's newest snapshot"
                started = time.perf_counter()
                views = source.views(saved.prepared)
                tensors = [view if view is not None else tensor
                           for view, tensor in zip(views, saved.prepared.tensors, strict=True)]
                holders = [None if index in fill else entry.holder
                           for index, entry in enumerate(saved.prepared.entries)]
                completed = snapshot.relaid(saved.prepared, holders, tensors)
                if target is None or target.capacity < completed.nbytes:
                    return "no slot with room for the completed snapshot"
                seq = target.write(completed, step=saved.step, generation=saved.generation,
                                   rank=self._rank, world_size=self._world_size)
            self._next_slot = saved.slot  # the completed snapshot stays
            self._completed = saved
            self._link.send(messages.SnapshotCommitted(
                saved.step, 1 - saved.slot, seq, completed.nbytes,
                time.perf_counter() - started, time.monotonic()))
            return ""
        except (state_backend.StateError, snapshot.SnapshotError) as error:
            return str(error)
        finally:
            self._saving.release()

    def _commit(self, finish: Callable[[], int], step: int, slot: int, nbytes: int, *,
                before: float, hold: bool) -> None:
        """Finish the copy, then tell the agent what the snapshot cost: ``before`` (the
        seconds up to ``finish``) plus the copy that ``finish`` makes, counted whole even when
        it runs behind the next step, where it competes with training for the cores and memory
        (so ``--snapshot-every auto`` judges the copy, not the millisecond that it blocks).
        Held for the next step's mark unless the snapshot was declared busy work: the agent
        reads completeness from the slot headers, and its statistics can wait that long."""
        began = time.perf_counter()
        seq = finish()
        seconds = before + time.perf_counter() - began
        self._link.send(messages.SnapshotCommitted(step, slot, seq, nbytes, seconds,
                                                   time.monotonic()), hold=hold)

    def flush(self) -> None:
        """Until the snapshot whose copy runs behind is committed.

        Raises:
            StateError: that copy failed.
        """
        if self._behind is None:
            return
        try:
            self._behind.wait()
        except Exception as error:  # whatever the copy raised, said once
            raise state_backend.StateError(f"the snapshot's copy failed: {error}") from error

    def slow_save_expected(self) -> bool:
        """The first snapshot into a slot maps (and may reserve) its memory; after that, the
        last snapshot (building the tree included) says how long the next will take."""
        return (self._last_seconds is None or self._last_seconds >= DECLARED_SNAPSHOT_SECONDS
                or self._next_slot not in self._mapped)

    def _slot(self, slot: int, nbytes: int) -> snapshot.MappedSlot:
        mapped = self._mapped.get(slot)
        if mapped is None and self._slot_paths[slot]:
            mapped = self._mapped[slot] = snapshot.MappedSlot(
                self._slot_paths[slot], register_with_cuda=True)
        if mapped is not None and mapped.capacity >= nbytes:
            return mapped
        request_id = self._link.next_request_id()
        reply = self._link.request(messages.ReserveSlot(request_id, slot, nbytes),
                                   request_id=request_id, timeout=self._request_timeout)
        if isinstance(reply, messages.RequestFailed):
            raise state_backend.StateError(f"no memory for the snapshot: {reply.error}")
        assert isinstance(reply, messages.SlotGranted)
        if mapped is not None:
            mapped.close()
        self._slot_paths[slot] = reply.path
        self._mapped[slot] = mapped = snapshot.MappedSlot(reply.path, register_with_cuda=True)
        return mapped

    def read_ahead(self) -> None:
        """Start reading the state the next :meth:`load` returns, on a thread of its own.

        A process that restores builds its model and forms its process group first (a new
        process of a recovery: a tenth of a second or more on a busy host, while the ranks that
        wait for it sit idle), and the state it then reads is already planned by the agent. So
        the reading can go on meanwhile: :meth:`load` waits for it, and takes it. A state that
        comes over the process group (a peer's on another host) or goes onto a device is left
        to :meth:`load`. For a state read from a replica's snapshot, the slot of the whole
        snapshot that the session takes next (:meth:`Session.restore`) is reserved here too.
        Called again (the next generation), it replaces what was read for the last one.
        """
        self._finish_reading_ahead()
        ahead = _ReadAhead()
        ahead.thread = threading.Thread(target=self._read_ahead_into, args=(ahead,),
                                        name="trainguard-read-ahead", daemon=True)
        self._ahead = ahead
        ahead.thread.start()

    def _read_ahead_into(self, ahead: _ReadAhead) -> None:
        try:
            ahead.plan, ahead.live = self._plan()
            if self._readable_ahead(ahead.plan):
                ahead.loaded = self._read(ahead.plan, ahead.live)
                if ahead.plan.source is messages.RestoreSource.REPLICA:
                    self._reserve_whole(ahead.loaded.tree)
        except Exception as error:  # raised by load(), on the training thread
            ahead.error = error

    @staticmethod
    def _readable_ahead(plan: messages.RestorePlan) -> bool:
        """Whether the state ``plan`` names can be read off the training thread: not over the
        process group (which may not exist yet), and not onto a device (a thread must not be
        the first to use CUDA: the script may still be choosing its device); a snapshot that
        cannot be read is left for :meth:`load` to meet."""
        if process_group.exchanges(plan):
            return False
        try:
            return plan.source is messages.RestoreSource.NONE or snapshot.on_host(plan.path)
        except snapshot.SnapshotError:
            return False

    def _reserve_whole(self, tree: Any) -> None:
        """Reserve the next slot for ``tree`` snapshotted whole; a failure is left for the
        snapshot itself to meet and say (it asks again)."""
        try:
            self._slot(self._next_slot, snapshot.prepare(tree).nbytes)
        except (state_backend.StateError, snapshot.SnapshotError) as error:
            logger.debug("rank %d: no slot reserved ahead: %s", self._rank, error)

    def _finish_reading_ahead(self) -> _ReadAhead | None:
        """The read-ahead in progress, waited for: nothing else may change the slots (its
        plan maps them) while it runs."""
        ahead = self._ahead
        if ahead is not None:
            ahead.thread.join()
        return ahead

    def load(self) -> state_backend.Loaded:
        """The agent picks memory when its snapshot is intact, else the newest complete
        checkpoint on disk that verifies; what :meth:`read_ahead` read, when it did.

        Raises:
            StateError: no plan, or the planned state cannot be read or received.
        """
        ahead = self._finish_reading_ahead()
        self._ahead = None
        if ahead is None:
            return self._read(*self._plan())
        if ahead.error is not None:
            raise ahead.error
        assert ahead.plan is not None
        return ahead.loaded or self._read(ahead.plan, ahead.live)

    def _plan(self) -> tuple[messages.RestorePlan, dict[int, torch.Tensor]]:
        """The agent's plan for this rank, with the slots it names mapped; and the tensors of
        this rank's newest snapshot that its live ones still hold, when the plan restores that
        snapshot (:meth:`_unchanged`).

        Raises:
            StateError: the agent gave no plan.
        """
        self.flush()
        self._shares.new_generation()
        with self._saving:  # the state is about to change: no completion of what came before
            newest, completed = self._saved, self._completed
            self._saved = None
        request_id = self._link.next_request_id()
        plan = self._link.request(messages.RestorePlanRequest(request_id),
                                  request_id=request_id, timeout=self._request_timeout)
        if not isinstance(plan, messages.RestorePlan):
            raise state_backend.StateError(f"the agent could not plan a restore: {plan}")
        for slot, mapped in list(self._mapped.items()):
            if mapped.path != plan.slot_paths[slot]:  # a survivor keeps what it has mapped
                mapped.close()
                del self._mapped[slot]
        self._slot_paths = list(plan.slot_paths)
        self._next_slot = plan.next_slot
        return plan, self._unchanged(plan, newest, completed is newest)

    def _unchanged(self, plan: messages.RestorePlan, newest: _Saved | None,
                   completed: bool) -> dict[int, torch.Tensor]:
        """By index, the optimizers' tensors of ``newest`` (this rank's newest snapshot) when
        ``plan`` restores it (its slot, or the other one when a completion wrote it again there)
        and no optimizer step has begun since: the live tensors are then those bytes, and a
        rank that stayed (``session.run``) need not read them back, nor its replicas' shares of
        them. As for the copy behind, it is the script's word that only ``step()`` changes
        them (``copy_behind=False`` says otherwise, and nothing is reused)."""
        if (newest is None or not newest.owned or plan.source is not messages.RestoreSource.MEMORY
                or plan.step != newest.step or self._steps.count != newest.optimizer_steps):
            return {}
        slots = [newest.slot, 1 - newest.slot] if completed else [newest.slot]
        if plan.path not in [plan.slot_paths[slot] for slot in slots]:
            return {}
        return {index: newest.prepared.tensors[index] for index in newest.owned}

    @staticmethod
    def _read(plan: messages.RestorePlan, live: Mapping[int, torch.Tensor]
              ) -> state_backend.Loaded:
        """The state ``plan`` names, read (or received over the process group), with ``live``
        tensors in it as they are (see :func:`snapshot.decode`).

        Raises:
            StateError: it cannot be read or received.
        """
        if plan.source is messages.RestoreSource.NONE:
            return state_backend.Loaded(str(plan.source), 0, None, plan.note)
        absent: list[snapshot.Absent] = []
        try:
            received = process_group.exchange_state(plan, absent=absent)
            header, tree = received or snapshot.read_snapshot(plan.path, absent=absent,
                                                              live=live)
            replica_shares.fill_from_files(absent, dict(enumerate(plan.holder_paths)))
        except (snapshot.SnapshotError, process_group.ExchangeError) as error:
            raise state_backend.StateError(
                f"cannot restore from {plan.source}: {error}") from error
        source = messages.RestoreSource.PEER if received is not None else plan.source
        return state_backend.Loaded(str(source), header.step, tree, plan.note)

    def close(self) -> None:
        self._finish_reading_ahead()
        # No copy may still write into the slots unmapped below, nor a completion on the reader
        # thread; a failed copy is the session's to report (it flushes first), so it is not
        # raised here a second time.
        with self._saving:
            self._closed = True
            with contextlib.suppress(state_backend.StateError):
                self.flush()
            for mapped in self._mapped.values():
                mapped.close()
            self._mapped.clear()
