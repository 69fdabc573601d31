"""The lightweight-profiling records as written (the original's MSPTI marker records, NOTES
§6.1), in one place for the rank that writes them (:mod:`trainguard.train.profiling`) and what
reads them back (:mod:`trainguard.detect.slow_node`): a rank's folder of files named by the
second each was started, one JSON object a line; a mark is a start record and an end record
with the same ``Id``, the start naming it (a step's: ``step N``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

__all__ = ["END", "START", "Mark", "files", "marker", "parse", "step_name", "step_of"]

START = 2
"""``Flag`` of a mark's start, taken on the host."""
END = 4
"""``Flag`` of its end (empty name and domain)."""
_MARKER = 1  # Kind
_STEP = "step "


def marker(flag: int, mark_id: int, name: str, domain: str, *, timestamp: int, process: int,
           thread: int) -> str:
    """One record's line (``timestamp``: Unix nanoseconds). Formatted by hand: json.dumps of
    the whole record made a mark 3.7 times as slow, on the training thread; only the strings
    need JSON's escaping."""
    return (f'{{"Kind":{_MARKER},"Flag":{flag},"SourceKind":0,"Timestamp":{timestamp},'
            f'"Id":{mark_id},"MsptiObjectId":{{"Pt":{{"ProcessId":{process},'
            f'"ThreadId":{thread}}}}},"Name":{json.dumps(name)},"Domain":{json.dumps(domain)}}}')


@dataclasses.dataclass(frozen=True)
class Mark:
    """What a reader needs of one record."""

    flag: int
    id: int
    timestamp: int
    name: str


def parse(line: bytes) -> Mark | None:
    """A record's line; None for one that is not a marker record (or not whole)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("Kind") != _MARKER:
        return None
    flag, mark_id, time, name = (record.get(key) for key in ("Flag", "Id", "Timestamp", "Name"))
    if not (isinstance(flag, int) and isinstance(mark_id, int) and isinstance(time, int)
            and isinstance(name, str)):
        return None
    return Mark(flag, mark_id, time, name)


def step_name(step: int) -> str:
    return f"{_STEP}{step}"


def step_of(name: str) -> int | None:
    """The step a mark's name names; None: not a step's mark."""
    number = name.removeprefix(_STEP)
    return int(number) if number != name and number.isdigit() else None


def files(rank_dir: Path) -> list[Path]:
    """A rank's record files, oldest first (what is not named by a number is not one)."""
    try:
        found = [path for path in rank_dir.iterdir() if path.name.isdigit() and path.is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda path: int(path.name))
