"""Embedded state store: one SQLite file, in WAL mode so readers never block the writer.

Tables: ``events(id INTEGER PRIMARY KEY, time TEXT, kind TEXT, data TEXT)`` and
``documents(name TEXT PRIMARY KEY, data TEXT, revision INTEGER, updated TEXT)``; ``data`` is JSON,
``time``/``updated`` ISO-8601 UTC. One process writes (the ``trainguard run`` that owns the run
directory); any number of commands may read at the same time.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from trainguard import owner_only
from trainguard.store import api

__all__ = ["SqliteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    name TEXT PRIMARY KEY, data TEXT NOT NULL, revision INTEGER NOT NULL, updated TEXT NOT NULL
);
"""


def _create(path: Path) -> None:
    """A new store appears with its tables (a reader polling for it never finds it empty), and
    owner-only: SQLite gives its -wal and -shm files the mode of the database file."""
    draft = path.with_name(f"{path.name}.new-{os.getpid()}")
    os.close(owner_only.create(draft))
    try:
        with contextlib.closing(sqlite3.connect(draft)) as connection:
            connection.executescript(_SCHEMA)
            connection.commit()
        draft.rename(path)
    finally:
        draft.unlink(missing_ok=True)


class SqliteStore:
    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._connection = connection
        self.path = path

    @classmethod
    def open(cls, path: Path, *, read_only: bool = False) -> SqliteStore:
        """Open (and for writers create) the store at ``path``.

        Raises:
            api.StoreError: the file cannot be created or is not a trainguard store.
        """
        try:
            if read_only:
                if not path.exists():
                    raise api.StoreError(f"no state store at {path}")
                # as_uri() escapes '#', '?' and '%', which a URI would otherwise interpret.
                uri = path.absolute().as_uri() + "?mode=ro"
                connection = sqlite3.connect(uri, uri=True, timeout=10)
            else:
                owner_only.make_dir(path.parent)
                if not path.exists():
                    _create(path)
                connection = sqlite3.connect(path, timeout=10)
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
                connection.executescript(_SCHEMA)
                connection.commit()
        except (sqlite3.Error, OSError) as error:
            raise api.StoreError(f"cannot open the state store {path}: {error}") from error
        return cls(connection, path)

    def append_event(self, kind: str, data: dict[str, Any], *, time: str) -> int:
        with self._write() as connection:
            cursor = connection.execute(
                "INSERT INTO events (time, kind, data) VALUES (?, ?, ?)",
                (time, kind, json.dumps(data, sort_keys=True)),
            )
        return int(cursor.lastrowid or 0)

    def insert_events(self, recorded: Sequence[api.StoredEvent]) -> int:
        """Add events recorded elsewhere, under their own ids, those past this store's newest
        (a job taken over: what its earlier controllers recorded); returns how many."""
        with self._write() as connection:
            newest = connection.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]
            rows = [(event.id, event.time, event.kind, json.dumps(event.data, sort_keys=True))
                    for event in recorded if event.id > newest]
            connection.executemany(
                "INSERT INTO events (id, time, kind, data) VALUES (?, ?, ?, ?)", rows)
        return len(rows)

    def events(self, *, after_id: int = 0, kinds: Sequence[str] = ()) -> list[api.StoredEvent]:
        query = "SELECT id, time, kind, data FROM events WHERE id > ?"
        parameters: list[Any] = [after_id]
        if kinds:
            query += f" AND kind IN ({', '.join('?' for _ in kinds)})"
            parameters.extend(kinds)
        rows = self._read(query + " ORDER BY id", parameters)
        return [api.StoredEvent(row[0], row[1], row[2], json.loads(row[3])) for row in rows]

    def select_events(self, *, after_id: int = 0, kinds: Sequence[str] = (),
                      since: str | None = None, limit: int | None = None
                      ) -> list[api.StoredEvent]:
        """Like :meth:`events`, also only those recorded at or after ``since`` (ISO-8601 UTC,
        the format of ``time``, so text order is time order), and only the newest ``limit``."""
        query = "SELECT id, time, kind, data FROM events WHERE id > ?"
        parameters: list[Any] = [after_id]
        if kinds:
            query += f" AND kind IN ({', '.join('?' for _ in kinds)})"
            parameters.extend(kinds)
        if since is not None:
            query += " AND time >= ?"
            parameters.append(since)
        query += " ORDER BY id DESC"
        if limit is not None:
            query += " LIMIT ?"
            parameters.append(limit)
        rows = self._read(query, parameters)
        return [api.StoredEvent(row[0], row[1], row[2], json.loads(row[3]))
                for row in reversed(rows)]

    def put_document(self, name: str, data: dict[str, Any], *, time: str) -> int:
        with self._write() as connection:
            row = connection.execute(
                "SELECT revision FROM documents WHERE name = ?", (name,)
            ).fetchone()
            revision = 1 if row is None else int(row[0]) + 1
            connection.execute(
                "INSERT OR REPLACE INTO documents (name, data, revision, updated) "
                "VALUES (?, ?, ?, ?)",
                (name, json.dumps(data, sort_keys=True), revision, time),
            )
        return revision

    def get_document(self, name: str) -> api.Document | None:
        rows = self._read(
            "SELECT name, data, revision, updated FROM documents WHERE name = ?", [name]
        )
        if not rows:
            return None
        row = rows[0]
        return api.Document(row[0], json.loads(row[1]), int(row[2]), row[3])

    def documents(self, prefix: str) -> list[api.Document]:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._read(
            "SELECT name, data, revision, updated FROM documents WHERE name LIKE ? ESCAPE '\\' "
            "ORDER BY name", [escaped + "%"])
        return [api.Document(row[0], json.loads(row[1]), int(row[2]), row[3]) for row in rows]

    def close(self) -> None:
        self._connection.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed on success, rolled back on error."""
        try:
            with self._connection:
                yield self._connection
        except sqlite3.Error as error:
            raise api.StoreError(f"cannot write the state store {self.path}: {error}") from error

    def _read(self, query: str, parameters: Sequence[Any]) -> list[Any]:
        try:
            return self._connection.execute(query, parameters).fetchall()
        except sqlite3.Error as error:
            raise api.StoreError(f"cannot read the state store {self.path}: {error}") from error
