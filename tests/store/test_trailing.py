"""Trailing writes: the newest value of each key reaches the store, and a deposed writer stops."""

from __future__ import annotations

import asyncio
import logging

import pytest

from trainguard import testing
from trainguard.store import kv, trailing


def test_only_the_newest_value_of_a_key_is_written_and_none_deletes() -> None:
    async def scenario() -> tuple[list[str], bytes]:
        store = testing.key_value_store()
        await store.put("gone", b"x")
        writer = trailing.TrailingWriter(store, what="the test's state")
        for number in range(5):
            writer.set("a", str(number).encode())
        writer.set("gone", None)
        start = (await store.list("")).revision + 1
        await writer.flush()
        changes = aiter(store.watch("", start_revision=start))
        seen = [f"{(c := await anext(changes)).kind} {c.entry.key}" for _ in range(2)]
        entry = await store.get("a")
        assert entry is not None
        return seen, entry.value

    assert asyncio.run(scenario()) == (["put a", "delete gone"], b"4")


def test_a_writer_whose_fence_moved_is_deposed_and_writes_no_more(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> tuple[bool, kv.Entry | None]:
        store = testing.key_value_store()
        writer = trailing.TrailingWriter(
            store, what="the test's state", fence=kv.Fence("leader", await store.put(
                "leader", b"me")))
        running = asyncio.create_task(writer.run())
        writer.set("a", b"1")
        assert await writer.settle(5)
        await store.put("leader", b"another")
        writer.set("a", b"2")
        await asyncio.wait_for(running, 5)  # it ends by itself
        return writer.deposed.is_set(), await store.get("a")

    with caplog.at_level(logging.ERROR, logger=trailing.__name__):
        deposed, entry = asyncio.run(scenario())
    assert deposed
    assert entry is not None
    assert entry.value == b"1"
    assert "the test's state is no longer written: fence 'leader'" in caplog.text
