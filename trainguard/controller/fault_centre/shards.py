"""Which ``cluster-info-<kind>-<m>`` document each node's entry goes in, each under a size limit.

The original fills its chunks by walking a Go map, whose order is random, so a node moves
between chunks from one write to the next. Here a node stays in its shard as long as the shard,
with the node's entry as it is now, stays within the limit; a node that no longer fits, or a
new one, goes to the lowest-numbered shard with room, and a new shard is opened only when none
has room. A node that leaves frees its room for the next new node; shards left empty at the end
are no longer written (their documents are deleted), one left empty in the middle is written
as ``{}`` so that the others keep their numbers. Where each node is can be exported and
imported as plain data, so a restarted controller writes the same shards.

A shard's text is the JSON map ``entry name -> entry``, keys sorted as Go writes a map.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["SHARD_LIMIT", "OversizedEntryError", "ShardAssignment"]

SHARD_LIMIT = 800 * 1024
"""Bytes a shard's text may have (NOTES §4.6: chunks of at most 800 KB), safely below the
1 MiB a Kubernetes ConfigMap may hold."""


class OversizedEntryError(ValueError):
    """One entry alone is larger than a shard may be."""

    def __init__(self, key: str, size: int, limit: int) -> None:
        super().__init__(f"{key}: its entry is {size} bytes, more than a cluster document may "
                         f"hold ({limit} bytes); it is left out")
        self.key, self.size, self.limit = key, size, limit


class _Shard:
    __slots__ = ("entries", "size")

    def __init__(self) -> None:
        self.entries: dict[str, str] = {}  # key -> '"key":value'
        self.size = 0  # bytes of the entries, without separators

    def text_size(self, extra: int = 0, extra_count: int = 0) -> int:
        count = len(self.entries) + extra_count
        return 2 + self.size + extra + max(count - 1, 0)


def _member(key: str, encoded: str) -> str:
    # Keys are document names: no character needs escaping.
    return f'"{key}":{encoded}'


class ShardAssignment:
    """Entries (each already encoded as JSON) placed in size-bounded shards, stably."""

    def __init__(self, *, limit: int = SHARD_LIMIT) -> None:
        if limit < 2:
            raise ValueError(f"limit must be at least 2 bytes, got {limit}")
        self.limit = limit
        self._shards: list[_Shard] = []
        self._where: dict[str, int] = {}
        self._preferred: dict[str, int] = {}

    def put(self, key: str, encoded: str) -> None:
        """Add or replace ``key``'s entry.

        Raises:
            OversizedEntryError: the entry alone does not fit in a shard (it is not added, and
                an older entry of ``key`` is removed).
        """
        member = _member(key, encoded)
        size = len(member.encode())
        index = self._where.get(key)
        if index is not None:
            shard = self._shards[index]
            old = len(shard.entries[key].encode())
            if shard.entries[key] == member:
                return
            if shard.text_size(size - old) <= self.limit:
                shard.entries[key] = member
                shard.size += size - old
                return
            self.remove(key)
        if 2 + size > self.limit:
            raise OversizedEntryError(key, 2 + size, self.limit)
        index = self._place(key, size)
        shard = self._shards[index]
        shard.entries[key] = member
        shard.size += size
        self._where[key] = index

    def _place(self, key: str, size: int) -> int:
        preferred = self._preferred.pop(key, None)
        candidates = list(range(len(self._shards)))
        if preferred is not None:
            candidates.insert(0, preferred)
        for index in candidates:
            while index >= len(self._shards):
                self._shards.append(_Shard())
            if self._shards[index].text_size(size, 1) <= self.limit:
                return index
        self._shards.append(_Shard())
        return len(self._shards) - 1

    def remove(self, key: str) -> None:
        """Remove ``key``'s entry, if it has one."""
        self._preferred.pop(key, None)
        index = self._where.pop(key, None)
        if index is None:
            return
        shard = self._shards[index]
        shard.size -= len(shard.entries.pop(key).encode())
        while self._shards and not self._shards[-1].entries:
            self._shards.pop()

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def shard_of(self, key: str) -> int | None:
        return self._where.get(key)

    def texts(self) -> list[str]:
        """Each shard's text, by number: ``{}`` for an empty shard in the middle."""
        return [self._text(shard) for shard in self._shards]

    def _text(self, shard: _Shard) -> str:
        return "{" + ",".join(shard.entries[key] for key in sorted(shard.entries)) + "}"

    def export(self) -> dict[str, int]:
        """Where each entry is: ``key -> shard number``."""
        return dict(sorted(self._where.items()))

    def prefer(self, placement: Mapping[str, object]) -> None:
        """Where entries were (:meth:`export`'s data): each goes back there when next put, if
        it fits.

        Raises:
            ValueError: a shard number is not a non-negative integer (names the key).
        """
        for key, index in placement.items():
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise ValueError(f"shard of {key!r}: expected a shard number >= 0, got "
                                 f"{index!r}")
            if key not in self._where:
                self._preferred[key] = index
