"""The embedded :class:`~trainguard.store.kv.KeyValueStore`: one SQLite file (or ``:memory:``,
the fake of unit tests), with etcd's revisions, history, compaction and leases.

Tables: ``kv`` (the entries), ``kv_changes`` (one row per revision: the history that watches
replay, the oldest beyond ``history`` revisions compacted), ``kv_leases`` (id, TTL, expiry on
the wall clock) and ``kv_meta`` (the store's revision and the compacted one). Every write is one
``BEGIN IMMEDIATE`` transaction, so processes sharing the file see whole writes in order.
Leases are expired by whoever touches the store next, and by every watch at each poll: a lease
ends when its expiry passes, not when someone looks.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

from trainguard import owner_only
from trainguard.store import api, kv

__all__ = ["SqliteKeyValueStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1), revision INTEGER NOT NULL,
    compacted INTEGER NOT NULL, next_lease INTEGER NOT NULL
);
INSERT OR IGNORE INTO kv_meta VALUES (1, 0, 0, 1);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY, value BLOB NOT NULL, create_revision INTEGER NOT NULL,
    mod_revision INTEGER NOT NULL, version INTEGER NOT NULL, lease INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS kv_by_lease ON kv (lease);
CREATE TABLE IF NOT EXISTS kv_changes (
    revision INTEGER PRIMARY KEY, kind TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
    create_revision INTEGER NOT NULL, version INTEGER NOT NULL, lease INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS kv_leases (
    id INTEGER PRIMARY KEY, ttl REAL NOT NULL, expires REAL NOT NULL
);
"""

HISTORY = 10_000
"""Revisions of history kept for watches; older ones are compacted."""

POLL = 0.1
"""Seconds between a watch's looks at the store for other processes' writes and for leases
that ended."""

_ENTRY = "key, value, create_revision, mod_revision, version, lease"


class SqliteKeyValueStore:
    def __init__(self, connection: sqlite3.Connection, *,
                 clock: Callable[[], float] = time.time) -> None:
        self._db = connection
        self._clock = clock
        self._watches: set[asyncio.Event] = set()  # each set by every change made here
        self._changed = False  # the transaction under way changed something

    @classmethod
    def open(cls, path: Path | str, *, clock: Callable[[], float] = time.time
             ) -> SqliteKeyValueStore:
        """The store in the file ``path`` (created owner-only), or ``":memory:"``.

        Raises:
            api.StoreError: it cannot be opened or is no store.
        """
        try:
            if path != ":memory:":
                path = Path(path)
                owner_only.make_dir(path.parent)
                if not path.exists():
                    os.close(owner_only.create(path))
            connection = sqlite3.connect(path, timeout=10, isolation_level=None)
            if path != ":memory:":
                connection.execute("PRAGMA journal_mode=WAL")
            connection.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as error:
            raise api.StoreError(f"cannot open the key-value store {path}: {error}") from error
        return cls(connection, clock=clock)

    # --- reads --------------------------------------------------------------------------------

    async def get(self, key: str) -> kv.Entry | None:
        with self._writing():  # a read too: leases that ended must be ended first
            return self._entry(key)

    async def list(self, prefix: str) -> kv.Listing:
        where, values = _under(prefix)
        with self._writing():
            revision = self._revision()
            rows = self._db.execute(f"SELECT {_ENTRY} FROM kv WHERE {where} ORDER BY key",
                                    values).fetchall()
        return kv.Listing(revision, [kv.Entry(*row) for row in rows])

    # --- writes -------------------------------------------------------------------------------

    async def put(self, key: str, value: bytes, *, expect: int | None = None,
                  lease: int = 0, fence: kv.Fence | None = None) -> int:
        with self._writing():
            self._check_fence(fence)
            old = self._entry(key)
            _check(key, expect, old)
            if lease and not self._db.execute("SELECT 1 FROM kv_leases WHERE id = ?",
                                              (lease,)).fetchone():
                raise kv.LeaseLostError(f"lease {lease} has ended: {key!r} not written")
            revision = self._revision() + 1
            entry = kv.Entry(key, bytes(value), old.create_revision if old else revision,
                             revision, old.version + 1 if old else 1, lease)
            self._db.execute(f"INSERT OR REPLACE INTO kv ({_ENTRY}) VALUES (?, ?, ?, ?, ?, ?)",
                             dataclasses.astuple(entry))
            self._record(kv.ChangeKind.PUT, entry)
            return revision

    async def delete(self, key: str, *, expect: int | None = None,
                     fence: kv.Fence | None = None) -> bool:
        with self._writing():
            self._check_fence(fence)
            old = self._entry(key)
            _check(key, expect, old)
            if old is None:
                return False
            self._remove(old)
            return True

    async def grant(self, ttl: float) -> int:
        if not ttl > 0:
            raise ValueError(f"a lease's TTL must be > 0 seconds, got {ttl}")
        with self._writing():
            (lease,) = self._db.execute("SELECT next_lease FROM kv_meta").fetchone()
            self._db.execute("UPDATE kv_meta SET next_lease = next_lease + 1")
            self._db.execute("INSERT INTO kv_leases VALUES (?, ?, ?)",
                             (lease, ttl, self._clock() + ttl))
            return int(lease)

    async def keep_alive(self, lease: int) -> None:
        with self._writing():
            updated = self._db.execute("UPDATE kv_leases SET expires = ? + ttl WHERE id = ?",
                                       (self._clock(), lease)).rowcount
            if not updated:
                raise kv.LeaseLostError(f"lease {lease} has ended")

    async def revoke(self, lease: int) -> None:
        with self._writing():
            self._end_lease(lease)

    # --- watches ------------------------------------------------------------------------------

    async def watch(self, prefix: str, *, start_revision: int) -> AsyncIterator[kv.Change]:
        if start_revision < 1:
            raise ValueError(f"a watch starts at revision 1 or later, got {start_revision}")
        where, values = _under(prefix)
        following = start_revision
        written = asyncio.Event()
        self._watches.add(written)
        try:
            async for change in self._follow(where, values, following, written):
                yield change
        finally:
            self._watches.discard(written)

    async def _follow(self, where: str, values: tuple[str, ...], following: int,
                      written: asyncio.Event) -> AsyncIterator[kv.Change]:
        while True:
            written.clear()
            with self._writing():
                (compacted,) = self._db.execute("SELECT compacted FROM kv_meta").fetchone()
                if following <= compacted:
                    raise kv.CompactedError(
                        f"changes from revision {following} are compacted (the store keeps "
                        f"those after {compacted})")
                revision = self._revision()
                rows = self._db.execute(
                    "SELECT revision, kind, key, value, create_revision, version, lease FROM "
                    f"kv_changes WHERE revision >= ? AND {where} ORDER BY revision",
                    (following, *values)).fetchall()
            for number, kind, key, value, created, version, lease in rows:
                yield kv.Change(kv.ChangeKind(kind),
                                kv.Entry(key, value, created, number, version, lease), number)
            following = max(following, revision + 1)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(written.wait(), POLL)

    async def compact(self, revision: int) -> None:
        with self._writing():
            self._compact(min(revision, self._revision() + 1) - 1)

    async def close(self) -> None:
        self._db.close()

    # --- inside a transaction -----------------------------------------------------------------

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One write transaction, in which leases that have ended are ended first: every
        operation runs in one, reads too, so nothing is read under a lease already over."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for (lease,) in self._db.execute("SELECT id FROM kv_leases WHERE expires < ?",
                                                 (self._clock(),)).fetchall():
                    self._end_lease(lease)
                yield
            except BaseException:
                self._changed = False
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as error:
            raise api.StoreError(f"the key-value store failed: {error}") from error
        if self._changed:
            self._changed = False
            for written in self._watches:
                written.set()

    def _revision(self) -> int:
        (revision,) = self._db.execute("SELECT revision FROM kv_meta").fetchone()
        return int(revision)

    def _entry(self, key: str) -> kv.Entry | None:
        row = self._db.execute(f"SELECT {_ENTRY} FROM kv WHERE key = ?", (key,)).fetchone()
        return kv.Entry(*row) if row else None

    def _check_fence(self, fence: kv.Fence | None) -> None:
        if fence is None:
            return
        held = self._entry(fence.key)
        found = held.mod_revision if held else 0
        if found != fence.revision:
            raise kv.FencedError(fence, found)

    def _end_lease(self, lease: int) -> None:
        for row in self._db.execute(f"SELECT {_ENTRY} FROM kv WHERE lease = ? ORDER BY key",
                                    (lease,)).fetchall():
            self._remove(kv.Entry(*row))
        self._db.execute("DELETE FROM kv_leases WHERE id = ?", (lease,))

    def _remove(self, entry: kv.Entry) -> None:
        self._db.execute("DELETE FROM kv WHERE key = ?", (entry.key,))
        self._record(kv.ChangeKind.DELETE, entry)

    def _record(self, kind: kv.ChangeKind, entry: kv.Entry) -> None:
        """The change becomes the store's next revision; history past HISTORY is compacted."""
        revision = self._revision() + 1
        self._db.execute("INSERT INTO kv_changes VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (revision, str(kind), entry.key, entry.value, entry.create_revision,
                          entry.version, entry.lease))
        self._db.execute("UPDATE kv_meta SET revision = ?", (revision,))
        self._changed = True
        if revision - HISTORY > 0 and revision % 100 == 0:
            self._compact(revision - HISTORY)

    def _compact(self, through: int) -> None:
        """History up to and including revision ``through`` goes."""
        self._db.execute("DELETE FROM kv_changes WHERE revision <= ?", (through,))
        self._db.execute("UPDATE kv_meta SET compacted = max(compacted, ?)", (through,))


def _under(prefix: str) -> tuple[str, tuple[str, ...]]:
    """The WHERE clause (and its values) of keys starting with ``prefix``."""
    end = kv.prefix_end(prefix)
    if end is None:
        return "key >= ?", (prefix,)
    return "key >= ? AND key < ?", (prefix, end)


def _check(key: str, expect: int | None, old: kv.Entry | None) -> None:
    found = old.mod_revision if old else 0
    if expect is not None and expect != found:
        raise kv.ConflictError(key, expect, found)
