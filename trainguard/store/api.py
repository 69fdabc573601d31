"""Interface and value types of the state store."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["Document", "StateStore", "StoreError", "StoredEvent"]


class StoreError(RuntimeError):
    """The store cannot be opened, read or written; the message names the location."""


@dataclasses.dataclass(frozen=True)
class StoredEvent:
    id: int
    time: str  # ISO-8601 UTC
    kind: str
    data: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Document:
    name: str
    data: dict[str, Any]
    revision: int
    updated: str  # ISO-8601 UTC


class StateStore(Protocol):
    def append_event(self, kind: str, data: dict[str, Any], *, time: str) -> int:
        """Record one event; returns its id (ids grow)."""
        ...

    def events(self, *, after_id: int = 0, kinds: Sequence[str] = ()) -> list[StoredEvent]:
        """Events with id > ``after_id``, oldest first, optionally only of ``kinds``."""
        ...

    def put_document(self, name: str, data: dict[str, Any], *, time: str) -> int:
        """Create or replace a document; returns its new revision (1 for a new document)."""
        ...

    def get_document(self, name: str) -> Document | None: ...

    def documents(self, prefix: str) -> list[Document]:
        """Every document whose name starts with ``prefix``, by name."""
        ...

    def close(self) -> None: ...
