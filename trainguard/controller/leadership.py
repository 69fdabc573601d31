"""One active controller among several sharing a store: the leader holds :data:`LEADER_KEY`
under a lease it keeps alive; the others stand by, watching the key, and the first to write it
once it is gone leads next.

A leader that dies stops keeping its lease, so its key goes within the lease's TTL and a standby
takes over. A leader that lives on but loses its lease (paused past the TTL, cut off from the
store while another took over) learns it at its next keep-alive and must stop acting: its writes
are fenced by the key's revision (:class:`~trainguard.store.kv.Fence`), so even before it learns
it, nothing it writes is taken. While the store cannot be reached at all, the leader stays the
leader: no one else can take over without the store either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from trainguard.store import kv

__all__ = ["LEADER_KEY", "Leadership", "current_leader"]

logger = logging.getLogger(__name__)

LEADER_KEY = "controller/leader"
"""Its value: the leader's address (``HOST:PORT``), where agents reach it."""
RETRY_SECONDS = 0.5
"""Pause before asking again a store that could not be reached."""


async def current_leader(store: kv.KeyValueStore) -> str | None:
    """The leader's address, or None while no controller leads."""
    entry = await store.get(LEADER_KEY)
    return entry.value.decode() if entry is not None else None


class Leadership:
    def __init__(self, store: kv.KeyValueStore, *, ttl: float) -> None:
        """``ttl``: seconds a leader's lease lasts unkept; a standby takes over within it."""
        if not ttl > 0:
            raise ValueError(f"leader-ttl must be > 0 seconds, got {ttl}")
        self._store = store
        self._ttl = ttl
        self._lease = 0
        self._keeper: asyncio.Task[None] | None = None
        self.fence: kv.Fence | None = None
        """Every write of the leader is fenced by it."""
        self.lost = asyncio.Event()
        """Set when this controller learns it no longer leads."""
        self.lost_reason = ""

    async def campaign(self, address: str, *, on_standby: Callable[[str], None]) -> kv.Fence:
        """Until this controller leads, announcing ``address``; the fence of its writes.
        ``on_standby`` is told the leader's address each time another leads."""
        while True:
            try:
                lease = await self._store.grant(self._ttl)
                try:
                    revision = await self._store.put(LEADER_KEY, address.encode(), expect=0,
                                                     lease=lease)
                except kv.ConflictError:
                    await self._store.revoke(lease)
                    await self._stand_by(on_standby)
                    continue
            except (kv.UnavailableError, kv.CompactedError) as error:
                logger.warning("the store cannot be reached to campaign for leadership: %s",
                               error)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            self._lease = lease
            self.fence = kv.Fence(LEADER_KEY, revision)
            self._keeper = asyncio.create_task(self._keep(), name="trainguard-leadership")
            return self.fence

    async def announce(self, address: str) -> kv.Fence:
        """Say where this leader is now (once it listens); the new fence.

        Raises:
            kv.ConflictError: it no longer leads.
        """
        assert self.fence is not None, "campaign first"
        revision = await self._store.put(LEADER_KEY, address.encode(),
                                         expect=self.fence.revision, lease=self._lease)
        self.fence = kv.Fence(LEADER_KEY, revision)
        return self.fence

    async def resign(self) -> None:
        """Stop leading now, so a standby takes over at once instead of after the TTL."""
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
        if self._lease:
            with contextlib.suppress(kv.UnavailableError):
                await self._store.revoke(self._lease)
            self._lease = 0

    async def _stand_by(self, on_standby: Callable[[str], None]) -> None:
        """Until the leader's key is gone."""
        entry = await self._store.get(LEADER_KEY)
        if entry is None:
            return
        on_standby(entry.value.decode())
        async for change in self._store.watch(LEADER_KEY, start_revision=entry.mod_revision):
            if change.kind is kv.ChangeKind.DELETE:
                return

    async def _keep(self) -> None:
        # Each call is bounded and a failed one is retried soon: a call that hangs (a member
        # back up but still electing its leader) must not let the lease run out while a retry
        # would be answered. Worst case from a keep-alive to the next: 1/3 + 1/4 + 1/10 TTL.
        call_timeout = self._ttl / 4
        unreachable = False
        while True:
            await asyncio.sleep(self._ttl / 10 if unreachable else self._ttl / 3)
            try:
                await asyncio.wait_for(self._store.keep_alive(self._lease), call_timeout)
            except kv.LeaseLostError as error:
                self.lost_reason = (f"its lease ended ({error}): another controller may lead "
                                    "now")
                self.lost.set()
                return
            except (kv.UnavailableError, TimeoutError) as error:
                if not unreachable:
                    logger.warning("the store cannot be reached to keep the leadership (%s): "
                                   "leading on while no one else can take over",
                                   error or f"no answer within {call_timeout:.2f} s")
                unreachable = True
                continue
            if unreachable:
                logger.warning("the store answers again: still the leader")
                unreachable = False
