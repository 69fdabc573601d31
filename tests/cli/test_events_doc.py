"""docs/events.md documents every event kind and every field the store can hold."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainguard.job import events

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"


def test_every_kind_and_field_is_in_the_table() -> None:
    rows = {line.split("|")[1].strip().strip("`"): line for line in DOC.read_text().splitlines()
            if line.startswith("| `")}
    pending: list[type[events.Event]] = [events.Event]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if not cls.KIND:
            continue
        assert cls.KIND in rows, f"{cls.KIND} is not in {DOC}"
        for field in dataclasses.fields(cls):
            assert field.name == "job" or f"`{field.name}`" in rows[cls.KIND], (
                f"{cls.KIND}.{field.name} is not in {DOC}")
    assert set(events.known_kinds()) <= set(rows)
