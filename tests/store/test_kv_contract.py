"""The key-value store's contract (trainguard.store.kv), which every backend passes: revisions,
compare-and-set, prefix listings, watches from a revision, compaction, and leases that end with
their keys."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from trainguard import testing
from trainguard.store import kv, sqlite_kv, urls

T = TypeVar("T")

Opener = Callable[[], kv.KeyValueStore]


@pytest.fixture(params=["sqlite", "memory", "etcd"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens the backend under test (each call another client of the same store, where the
    backend has more than one)."""
    if request.param == "sqlite":
        return lambda: urls.open_store(f"sqlite://{tmp_path}/kv.db")
    if request.param == "etcd":
        url = request.getfixturevalue("etcd_url")
        return lambda: urls.open_store(url)
    memory = testing.key_value_store()  # the fake of unit tests
    return lambda: memory


def run(opener: Opener, use: Callable[[kv.KeyValueStore], Awaitable[T]]) -> T:
    async def scenario() -> T:
        store = opener()
        try:
            return await asyncio.wait_for(use(store), 30)
        finally:
            await store.close()

    return asyncio.run(scenario())


async def _take(changes: AsyncIterator[kv.Change], count: int) -> list[kv.Change]:
    return [await anext(changes) for _ in range(count)]


def test_writes_move_the_revision_and_each_entry_keeps_its_own(opener: Opener) -> None:
    async def use(store: kv.KeyValueStore) -> list[kv.Entry | None]:
        first = await store.put("jobs/a", b"1")
        second = await store.put("jobs/b", b"2")
        third = await store.put("jobs/a", b"3")
        assert first < second < third
        return [await store.get("jobs/a"), await store.get("jobs/b"), await store.get("none")]

    a, b, missing = run(opener, use)
    assert a is not None
    assert b is not None
    assert (a.value, a.version, a.create_revision < a.mod_revision) == (b"3", 2, True)
    assert (b.value, b.version, b.create_revision == b.mod_revision, b.lease) == (b"2", 1, True, 0)
    assert missing is None


def test_a_listing_holds_exactly_the_prefix_by_key_at_its_revision(opener: Opener) -> None:
    async def use(store: kv.KeyValueStore) -> tuple[kv.Listing, int]:
        for key in ("hosts/b", "hosts/a", "hostsx", "host", "jobs/a"):
            last = await store.put(key, key.encode())
        return await store.list("hosts/"), last

    listing, last = run(opener, use)
    assert [entry.key for entry in listing.entries] == ["hosts/a", "hosts/b"]
    assert listing.revision == last


@pytest.mark.parametrize("prefix", ["", "a", "\U0010ffff"])
def test_the_end_of_a_prefix_bounds_every_key_under_it(prefix: str) -> None:
    end = kv.prefix_end(prefix)
    if end is None:
        assert prefix.strip("\U0010ffff") == ""
    else:
        assert prefix < end
        assert prefix + "\U0010ffff" * 3 < end


def test_compare_and_set_writes_only_on_the_revision_expected(opener: Opener) -> None:
    async def use(store: kv.KeyValueStore) -> list[str]:
        created = await store.put("leader", b"a", expect=0)
        errors = []
        attempts: list[Callable[[], Awaitable[object]]] = [
            lambda: store.put("leader", b"b", expect=0),
            lambda: store.put("leader", b"b", expect=created + 1),
            lambda: store.delete("leader", expect=created + 2)]
        for attempt in attempts:
            with pytest.raises(kv.ConflictError) as caught:
                await attempt()
            errors.append(str(caught.value))
        entry = await store.get("leader")
        assert entry is not None
        assert entry.value == b"a", "a refused write changes nothing"
        changed = await store.put("leader", b"b", expect=created)
        assert await store.delete("leader", expect=changed)
        assert not await store.delete("leader")
        with pytest.raises(kv.ConflictError, match="is absent, the write expected it revision"):
            await store.put("leader", b"c", expect=changed)
        return errors

    errors = run(opener, use)
    assert errors[0].startswith("key 'leader' is last changed at revision ")
    assert errors[0].endswith(", the write expected it absent")
    assert all("the write expected it revision" in error for error in errors[1:])


def test_a_watch_replays_from_its_revision_then_follows(opener: Opener) -> None:
    async def use(store: kv.KeyValueStore) -> list[tuple[str, str, bytes, int]]:
        start = await store.put("jobs/a", b"1")
        await store.put("other", b"x")
        await store.delete("jobs/a")
        changes = aiter(store.watch("jobs/", start_revision=start))
        seen = await _take(changes, 2)  # history

        async def later() -> None:
            await asyncio.sleep(0.05)
            await store.put("jobs/b", b"2")

        writer = asyncio.create_task(later())
        seen += await _take(changes, 1)  # followed
        await writer
        assert [change.revision for change in seen] == sorted(c.revision for c in seen)
        return [(str(c.kind), c.entry.key, c.entry.value, c.entry.mod_revision - c.revision)
                for c in seen]

    assert run(opener, use) == [("put", "jobs/a", b"1", 0), ("delete", "jobs/a", b"1", 0),
                                ("put", "jobs/b", b"2", 0)]


def test_a_watch_from_compacted_history_is_refused(opener: Opener) -> None:
    async def use(store: kv.KeyValueStore) -> None:
        first = await store.put("k", b"0")
        for number in range(1, 5):
            last = await store.put("k", str(number).encode())
        await store.compact(last)
        with pytest.raises(kv.CompactedError,
                           match=f"changes from revision {first} are compacted"):
            await anext(aiter(store.watch("k", start_revision=first)))
        recent = await anext(aiter(store.watch("k", start_revision=last)))
        assert recent.entry.value == b"4"

    run(opener, use)


def test_the_embedded_store_compacts_history_past_what_it_keeps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_kv, "HISTORY", 50)

    async def use(store: kv.KeyValueStore) -> None:
        for number in range(120):
            await store.put("k", str(number).encode())
        with pytest.raises(kv.CompactedError, match="changes from revision 1 are compacted"):
            await anext(aiter(store.watch("k", start_revision=1)))
        newest = await store.get("k")
        assert newest is not None
        recent = await anext(aiter(store.watch("k", start_revision=newest.mod_revision)))
        assert recent.entry.value == b"119"

    run(lambda: sqlite_kv.SqliteKeyValueStore.open(tmp_path / "kv.db"), use)


def test_a_lease_ends_with_its_keys_unless_kept_alive(opener: Opener) -> None:
    async def use(store: kv.KeyValueStore) -> None:
        kept, lapsing = await store.grant(2.0), await store.grant(2.0)
        assert 0 not in (kept, lapsing)
        assert kept != lapsing
        start = await store.put("hosts/kept", b"", lease=kept)
        await store.put("hosts/lapsing", b"", lease=lapsing)
        changes = aiter(store.watch("hosts/", start_revision=start))
        await _take(changes, 2)
        for _ in range(6):  # 3 s: past the TTL of the lease not kept alive
            await asyncio.sleep(0.5)
            await store.keep_alive(kept)
        deleted, = await _take(changes, 1)
        assert (deleted.kind, deleted.entry.key) == (kv.ChangeKind.DELETE, "hosts/lapsing")
        assert await store.get("hosts/lapsing") is None
        with pytest.raises(kv.LeaseLostError):
            await store.keep_alive(lapsing)
        with pytest.raises(kv.LeaseLostError):
            await store.put("hosts/late", b"", lease=lapsing)
        await store.revoke(kept)
        assert [e.key for e in (await store.list("hosts/")).entries] == []

    run(opener, use)


def test_a_second_client_of_the_same_file_sees_every_write(tmp_path: Path) -> None:
    """The controller's store survives it: a restarted controller (or a second process) reads
    the same revisions, and its watches follow the other's writes."""
    async def scenario() -> tuple[int, bytes]:
        first = sqlite_kv.SqliteKeyValueStore.open(tmp_path / "kv.db")
        second = sqlite_kv.SqliteKeyValueStore.open(tmp_path / "kv.db")
        try:
            revision = await first.put("a", b"1")
            changes = aiter(second.watch("", start_revision=revision + 1))
            waiting: asyncio.Future[kv.Change] = asyncio.ensure_future(anext(changes))
            await asyncio.sleep(0.05)
            await first.put("b", b"2")
            change = await asyncio.wait_for(waiting, 10)
            return change.revision - revision, change.entry.value
        finally:
            await first.close()
            await second.close()

    assert asyncio.run(scenario()) == (1, b"2")


def test_an_idle_watch_waits_between_looks(tmp_path: Path) -> None:
    """A watch looks at the store once a poll when nothing changes (its own looks are no
    change that wakes it)."""
    async def scenario() -> int:
        store = sqlite_kv.SqliteKeyValueStore.open(tmp_path / "kv.db")
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)
        try:
            waiting = asyncio.ensure_future(anext(aiter(store.watch("", start_revision=1))))
            await asyncio.sleep(1.0)
            waiting.cancel()
            return len(statements)
        finally:
            await store.close()

    assert asyncio.run(scenario()) < 40 * 1.0 / sqlite_kv.POLL


def test_a_fenced_write_holds_only_while_its_fence_stands(opener: Opener) -> None:
    """A controller's writes are fenced by its leader key: once another holds it, they are
    refused and change nothing."""
    async def use(store: kv.KeyValueStore) -> list[str]:
        mine = kv.Fence("leader", await store.put("leader", b"a"))
        written = await store.put("jobs/a", b"1", fence=mine)
        assert await store.delete("jobs/b", fence=mine) is False
        theirs = kv.Fence("leader", await store.put("leader", b"b"))  # another leads now
        refusals = []
        attempts: list[Callable[[], Awaitable[object]]] = [
            lambda: store.put("jobs/a", b"2", fence=mine),
            lambda: store.put("jobs/a", b"2", fence=mine, expect=written),
            lambda: store.delete("jobs/a", fence=mine)]
        for attempt in attempts:
            with pytest.raises(kv.FencedError) as caught:
                await attempt()
            refusals.append(str(caught.value))
        entry = await store.get("jobs/a")
        assert entry is not None
        assert (entry.value, entry.mod_revision) == (b"1", written)
        with pytest.raises(kv.ConflictError):  # their fence holds: then expect is checked
            await store.put("jobs/a", b"3", fence=theirs, expect=0)
        return refusals

    refusals = run(opener, use)
    assert all(r.startswith("fence 'leader' is last changed at revision ") for r in refusals)
    assert all(r.endswith(": not written") for r in refusals)
