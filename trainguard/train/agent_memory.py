"""The state in the node agent's shared memory, under ``trainguard run``.

Each rank has two slots that the agent reserves (double buffering: the agent may copy one to
disk while the next snapshot goes into the other). A snapshot is copied into a slot under its
sequence lock and announced to the agent, which checksums and persists it in the background. A
restore asks the agent for a plan: the rank's own slot, a data-parallel peer's snapshot over the
process group, or the newest verified checkpoint on disk. With shares
(:mod:`trainguard.train.replica_shares`), each replica writes only its share of the replicated
state, and a restore assembles the rest from the replica group.
"""

from __future__ import annotations

import time
from typing import Any

from trainguard.ipc import messages
from trainguard.train import agent_link, process_group, replica_shares, snapshot, state_backend

__all__ = ["AgentMemoryBackend"]


class AgentMemoryBackend:
    def __init__(self, link: agent_link.AgentLink, *, rank: int, world_size: int,
                 request_timeout: float, shares: replica_shares.ReplicaShares) -> None:
        """Nothing is reserved yet: the first snapshot of each slot asks the agent for memory.

        Args:
            link: the connection to this worker's agent.
            request_timeout: seconds to wait for the agent to answer a restore or a reservation.
            shares: which tensors this rank writes, and how a restore assembles the rest.
        """
        self._shares = shares
        self._link = link
        self._rank = rank
        self._world_size = world_size
        self._request_timeout = request_timeout
        self._slot_paths = ["", ""]
        self._mapped: dict[int, snapshot.MappedSlot] = {}
        self._next_slot = 0
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

    def save(self, tree: dict[str, Any], *, step: int, generation: int, started: float) -> float:
        """Copy ``tree`` into the next slot; the agent persists it to disk in the background.

        Raises:
            StateError: the agent could not reserve memory for the snapshot.
        """
        prepared = snapshot.prepare(tree, elsewhere=self._shares.elsewhere(tree))
        slot = self._next_slot
        mapped = self._slot(slot, prepared.nbytes)
        seq = mapped.write(prepared, step=step, generation=generation, rank=self._rank,
                           world_size=self._world_size)
        seconds = time.perf_counter() - started
        self._link.send(messages.SnapshotCommitted(step, slot, seq, prepared.nbytes, seconds,
                                                   time.monotonic()))
        self._next_slot = 1 - slot
        return seconds

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

    def load(self) -> state_backend.Loaded:
        """The agent picks memory when its snapshot is intact, else the newest complete
        checkpoint on disk that verifies.

        Raises:
            StateError: no plan, or the planned state cannot be read or received.
        """
        self._shares.new_generation()
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
        if plan.source is messages.RestoreSource.NONE:
            return state_backend.Loaded(str(plan.source), 0, None, plan.note)
        absent: list[snapshot.Absent] = []
        try:
            received = process_group.exchange_state(plan, absent=absent)
            header, tree = received or snapshot.read_snapshot(plan.path, absent=absent)
            if absent:
                self._shares.fill(tree, absent)
        except (snapshot.SnapshotError, process_group.ExchangeError,
                replica_shares.SharesError) as error:
            raise state_backend.StateError(
                f"cannot restore from {plan.source}: {error}") from error
        source = messages.RestoreSource.PEER if received is not None else plan.source
        return state_backend.Loaded(str(source), header.step, tree, plan.note)

    def close(self) -> None:
        for mapped in self._mapped.values():
            mapped.close()
        self._mapped.clear()
