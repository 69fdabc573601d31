"""The controller's key-value store: what it must not lose, with etcd's semantics.

Keys are strings, values bytes. Every write moves the store's revision on by one; each entry
keeps the revision that created it and the one that last changed it. A write may be made
conditional on the key's last change (``expect``: compare-and-set, 0 meaning "absent"), so two
controllers never both win the same decision. A watch replays every change to a key prefix
from a revision on, then follows new ones; history older than the store keeps is compacted,
and a watch that starts there is refused rather than shown a gap. A lease ends after its TTL
unless kept alive, and takes the keys written under it along (a controller's leadership, a
host's presence).

Backends: the embedded SQLite (:mod:`trainguard.store.sqlite_kv`, default, one host; with
``:memory:`` also the fake for unit tests) and etcd (:mod:`trainguard.store.etcd_kv`), opened
from a URL by :mod:`trainguard.store.urls`. One contract test suite
(``tests/store/test_kv_contract.py``) runs against each.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import AsyncIterator
from typing import Protocol

__all__ = ["Change", "ChangeKind", "CompactedError", "ConflictError", "Entry", "Fence",
           "FencedError", "KeyValueStore", "LeaseLostError", "Listing", "UnavailableError",
           "prefix_end"]


class ConflictError(RuntimeError):
    """A conditional write found the key changed since the revision it expected."""

    def __init__(self, key: str, expected: int, found: int) -> None:
        state = f"last changed at revision {found}" if found else "absent"
        wanted = f"revision {expected}" if expected else "absent"
        super().__init__(f"key {key!r} is {state}, the write expected it {wanted}")
        self.key, self.expected, self.found = key, expected, found


@dataclasses.dataclass(frozen=True)
class Fence:
    """A write's condition on another key: it holds only while ``key`` was last changed at
    ``revision`` (a leader's key: a deposed controller's writes are refused)."""

    key: str
    revision: int


class FencedError(RuntimeError):
    """A fenced write found its fence moved: whoever wrote has lost the right to."""

    def __init__(self, fence: Fence, found: int) -> None:
        state = f"last changed at revision {found}" if found else "absent"
        super().__init__(f"fence {fence.key!r} is {state}, not at revision {fence.revision}: "
                         "not written")
        self.fence, self.found = fence, found


class LeaseLostError(RuntimeError):
    """The lease has expired or was revoked (its keys are gone)."""


class CompactedError(RuntimeError):
    """A watch asked for changes older than the store still keeps."""


class UnavailableError(RuntimeError):
    """No member of the store answered in time: what was asked may or may not have been done
    (a write that timed out may have been applied), so the caller reads before it retries."""


@dataclasses.dataclass(frozen=True)
class Entry:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int  # writes since it was created, 1 for a new key
    lease: int = 0  # the lease it lives under; 0: none


class ChangeKind(enum.StrEnum):
    PUT = "put"
    DELETE = "delete"


@dataclasses.dataclass(frozen=True)
class Change:
    kind: ChangeKind
    entry: Entry  # after a put; the entry as it was, for a delete (mod_revision: the delete's)
    revision: int


@dataclasses.dataclass(frozen=True)
class Listing:
    """Entries under a prefix, and the store's revision they were read at (watch from the next
    one to miss nothing)."""

    revision: int
    entries: list[Entry]


class KeyValueStore(Protocol):
    async def get(self, key: str) -> Entry | None: ...

    async def list(self, prefix: str) -> Listing:
        """Every entry whose key starts with ``prefix``, by key."""
        ...

    async def put(self, key: str, value: bytes, *, expect: int | None = None,
                  lease: int = 0, fence: Fence | None = None) -> int:
        """Write ``key``; returns the revision of the write.

        ``expect``: write only if the key was last changed at that revision (0: only if it is
        absent). ``lease``: the key is deleted when the lease ends. ``fence``: write only while
        it holds.

        Raises:
            FencedError: ``fence`` does not hold (nothing written; checked first).
            ConflictError: ``expect`` does not hold (nothing written).
            LeaseLostError: the lease has ended (nothing written).
        """
        ...

    async def delete(self, key: str, *, expect: int | None = None,
                     fence: Fence | None = None) -> bool:
        """Delete ``key``; False if it was absent.

        Raises:
            FencedError: ``fence`` does not hold (nothing deleted; checked first).
            ConflictError: ``expect`` does not hold (nothing deleted).
        """
        ...

    async def grant(self, ttl: float) -> int:
        """A new lease of ``ttl`` seconds; returns its id (never 0)."""
        ...

    async def keep_alive(self, lease: int) -> None:
        """Start the lease's TTL again.

        Raises:
            LeaseLostError: it has ended.
        """
        ...

    async def revoke(self, lease: int) -> None:
        """End the lease now, deleting its keys (a lease already ended: nothing happens)."""
        ...

    def watch(self, prefix: str, *, start_revision: int) -> AsyncIterator[Change]:
        """Every change to keys under ``prefix`` from ``start_revision`` (>= 1) on, in order,
        then each new one as it comes, until the iteration is closed.

        Raises (from the iteration):
            CompactedError: changes from ``start_revision`` are no longer kept.
        """
        ...

    async def compact(self, revision: int) -> None:
        """Forget the history before ``revision``: watches may start there or later."""
        ...

    async def close(self) -> None: ...


def prefix_end(prefix: str) -> str | None:
    """The smallest key after every key starting with ``prefix`` (etcd's range end); None
    when there is none (an empty prefix: every key)."""
    stripped = prefix.rstrip(chr(0x10FFFF))
    if not stripped:
        return None
    return stripped[:-1] + chr(ord(stripped[-1]) + 1)
