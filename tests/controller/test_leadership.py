"""One controller leads; a standby takes over within the lease's TTL of the leader's end, and
a deposed leader learns it and can write nothing."""

from __future__ import annotations

import asyncio

import pytest

from trainguard import testing
from trainguard.controller import leadership
from trainguard.store import kv

TTL = 0.6


def test_a_standby_leads_once_the_leader_resigns_or_dies() -> None:
    async def scenario() -> tuple[list[str], float, float]:
        store = testing.key_value_store()
        first, second, third = (leadership.Leadership(store, ttl=TTL) for _ in range(3))
        await first.campaign("a:1", on_standby=lambda leader: None)
        seen: list[str] = []
        loop = asyncio.get_running_loop()
        standing = asyncio.create_task(second.campaign("b:2", on_standby=seen.append))
        await asyncio.sleep(0.2)
        assert not standing.done()
        assert await leadership.current_leader(store) == "a:1"
        resigned_at = loop.time()
        await first.resign()
        await standing
        handover = loop.time() - resigned_at
        # The second dies without resigning: its lease runs out.
        assert second._keeper is not None
        second._keeper.cancel()
        died_at = loop.time()
        await asyncio.wait_for(third.campaign("c:3", on_standby=seen.append), 10)
        takeover = loop.time() - died_at
        assert await leadership.current_leader(store) == "c:3"
        return seen, handover, takeover

    seen, handover, takeover = asyncio.run(scenario())
    assert seen == ["a:1", "b:2"]
    assert handover < 0.5, "a resignation hands over at once"
    assert TTL * 0.5 < takeover < TTL + 1.0


def test_a_deposed_leader_learns_it_and_its_fenced_writes_are_refused() -> None:
    async def scenario() -> tuple[str, kv.Entry | None]:
        store = testing.key_value_store()
        old, new = leadership.Leadership(store, ttl=TTL), leadership.Leadership(store, ttl=TTL)
        fence = await old.campaign("a:1", on_standby=lambda leader: None)
        await store.put("jobs/j", b"old", fence=fence)
        assert old._keeper is not None
        old._keeper.cancel()  # paused past its TTL
        await asyncio.wait_for(new.campaign("b:2", on_standby=lambda leader: None), 10)
        with pytest.raises(kv.FencedError):
            await store.put("jobs/j", b"stale", fence=fence)
        old._keeper = asyncio.create_task(old._keep())  # it wakes up
        await asyncio.wait_for(old.lost.wait(), 10)
        with pytest.raises(kv.ConflictError):
            await old.announce("a:1")
        return old.lost_reason, await store.get("jobs/j")

    reason, entry = asyncio.run(scenario())
    assert reason.startswith("its lease ended")
    assert entry is not None
    assert entry.value == b"old"


class _HangsOnce:
    """A store whose first keep-alive never answers, as a member that is back up but still
    electing its leader."""

    def __init__(self, store: kv.KeyValueStore) -> None:
        self._store = store
        self.hung = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def keep_alive(self, lease: int) -> None:
        if not self.hung:
            self.hung = True
            await asyncio.Event().wait()
        await self._store.keep_alive(lease)


def test_a_keep_alive_that_hangs_does_not_cost_the_lease() -> None:
    async def scenario() -> tuple[bool, bool, str | None]:
        store = _HangsOnce(testing.key_value_store())
        leader = leadership.Leadership(store, ttl=TTL)  # type: ignore[arg-type]
        await leader.campaign("a:1", on_standby=lambda leader: None)
        await asyncio.sleep(TTL * 4)
        held = await leadership.current_leader(store)  # type: ignore[arg-type]
        await leader.resign()
        return store.hung, leader.lost.is_set(), held

    hung, lost, held = asyncio.run(scenario())
    assert hung
    assert not lost
    assert held == "a:1"
