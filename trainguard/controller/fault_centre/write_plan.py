"""When to write each cluster document: on change, at least every 5 s, at most 5 writes a second.

The original refreshes its ``cluster-info-*`` documents when they change and at least every
5 s, so that a reader can tell a live writer from a dead one by ``UpdateTime``, and never
writes more than 5 a second, so that a burst of node changes cannot flood the store (NOTES
§4.6). This is that rule as a pure planner: the caller says which documents should exist and
what they hold (:meth:`WritePlanner.want`), asks what to write now (:meth:`WritePlanner.plan`),
writes it, and reports a failed write (:meth:`WritePlanner.failed`) so that it is retried.
Changes and deletions go first, in name order; refreshes follow, the oldest first. The
controller is the only writer of these documents.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping

__all__ = ["MAX_WRITES_PER_SECOND", "REFRESH_INTERVAL", "DocumentWrite", "WritePlanner"]

REFRESH_INTERVAL = 5.0
"""Seconds after which an unchanged document is written again."""
MAX_WRITES_PER_SECOND = 5
"""Writes in any one second, at the most."""

Data = Mapping[str, str]
"""A document's keys and values (a ConfigMap's ``data``)."""


@dataclasses.dataclass(frozen=True)
class DocumentWrite:
    """Write ``data`` as document ``name``; ``data`` None: delete the document."""

    name: str
    data: Data | None


class WritePlanner:
    """Which documents to write, and when."""

    def __init__(self, *, refresh_interval: float = REFRESH_INTERVAL,
                 max_writes_per_second: int = MAX_WRITES_PER_SECOND) -> None:
        if refresh_interval <= 0:
            raise ValueError(f"refresh_interval must be > 0 seconds, got {refresh_interval}")
        if max_writes_per_second < 1:
            raise ValueError(f"max_writes_per_second must be >= 1, got {max_writes_per_second}")
        self.refresh_interval = refresh_interval
        self.max_writes_per_second = max_writes_per_second
        self._wanted: dict[str, Data] = {}
        self._written: dict[str, tuple[Data, float]] = {}  # name -> (data, when written)
        self._unsure: set[str] = set()  # a write or deletion that failed: do it again
        self._recent: collections.deque[float] = collections.deque()

    def want(self, documents: Mapping[str, Data]) -> None:
        """The documents that should exist now, and their data (every one of this writer's:
        a written document left out is deleted)."""
        self._wanted = dict(documents)

    def failed(self, name: str) -> None:
        """The write (or deletion) of ``name`` planned last did not happen: plan it again."""
        self._unsure.add(name)

    def _urgent(self) -> list[DocumentWrite]:
        """Changes and deletions, in name order."""
        urgent = []
        for name in sorted(self._wanted.keys() | self._written.keys() | self._unsure):
            data = self._wanted.get(name)
            written = self._written.get(name)
            if data is None:
                if written is not None or name in self._unsure:
                    urgent.append(DocumentWrite(name, None))
            elif written is None or written[0] != data or name in self._unsure:
                urgent.append(DocumentWrite(name, data))
        return urgent

    def _budget(self, now: float) -> int:
        recent = self._recent
        while recent and recent[0] <= now - 1.0:
            recent.popleft()
        return self.max_writes_per_second - len(recent)

    def plan(self, now: float) -> list[DocumentWrite]:
        """What to write at ``now`` (seconds), taken as done unless :meth:`failed` says not."""
        budget = self._budget(now)
        if budget <= 0:
            return []
        writes = self._urgent()[:budget]
        if len(writes) < budget:
            planned = {write.name for write in writes}
            stale = sorted((when, name) for name, (_, when) in self._written.items()
                           if name not in planned and now - when >= self.refresh_interval
                           and name in self._wanted)
            writes.extend(DocumentWrite(name, self._wanted[name])
                          for _, name in stale[:budget - len(writes)])
        for write in writes:
            self._unsure.discard(write.name)
            if write.data is None:
                self._written.pop(write.name, None)
            else:
                self._written[write.name] = (write.data, now)
            self._recent.append(now)
        return writes

    def next_due(self, now: float) -> float | None:
        """When :meth:`plan` has something to write next (``now`` or later); None: nothing,
        until the documents change."""
        if self._urgent():
            due = now
        elif self._written:
            due = max(now, min(when for _, when in self._written.values())
                      + self.refresh_interval)
        else:
            return None
        if self._budget(now) <= 0:
            due = max(due, self._recent[0] + 1.0)
        return due
