"""What was wrong in a fault configuration file, and what was done instead.

The original's loaders never refuse a whole configuration for one bad entry: they skip the entry,
or use a default, and log it. Ours do the same, and return each problem as a value so that
``trainguard config check`` can list them and a running agent can log them.
"""

from __future__ import annotations

import dataclasses
import enum

__all__ = ["Action", "ConfigProblem"]


class Action(enum.StrEnum):
    """What the loader did about a problem."""

    IGNORED = "ignored"  # the entry (or the value) was skipped
    DEFAULT_USED = "default used"  # the field, or the whole file, took its default
    REPLACED = "replaced"  # the value was replaced by another one, named in the message
    KEPT_LAST_GOOD = "last good configuration kept"  # a running agent kept what it had


@dataclasses.dataclass(frozen=True)
class ConfigProblem:
    """One problem: where (file, entry, field), what is wrong, and what was done."""

    file: str
    entry: str  # e.g. "FaultFrequency[2]", "SeparateNPUCodes"; "" for the whole file
    field: str  # e.g. "TimeWindow"; "" for the whole entry
    message: str
    action: Action

    def describe(self) -> str:
        where = ": ".join(part for part in (self.file, self.entry, self.field) if part)
        return f"{where}: {self.message} [{self.action}]"
