"""Which lightweight-profiling marks the training processes record (SPEC D10): the original's
``ProfilingSwitch``, the JSON of the ``data-trace-<job>`` document's ``profilingSwitch`` key,
each mark ``"on"`` or ``"off"``.

As in the original, Step, SaveCheckpoint, FP and DataLoader go together (its "light"
profiling): a switch with any mark on has those four on, and all off turns every mark off. The
communication operators are the "heavy" part, switched apart (the slow-node diagnosis turns
them on only while it confirms a slow rank).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import ClassVar

__all__ = ["PRESETS", "ProfilingSwitch", "SwitchError"]


class SwitchError(ValueError):
    """A profiling switch that cannot be read; the message names the field."""


@dataclasses.dataclass(frozen=True)
class ProfilingSwitch:
    communication_operator: bool = False
    step: bool = False
    save_checkpoint: bool = False
    fp: bool = False
    dataloader: bool = False

    NAMES: ClassVar[dict[str, str]] = {
        "CommunicationOperator": "communication_operator", "Step": "step",
        "SaveCheckpoint": "save_checkpoint", "FP": "fp", "DataLoader": "dataloader"}
    """The original's field names, each to ours."""

    @property
    def any(self) -> bool:
        return any(dataclasses.astuple(self))

    def to_json(self) -> str:
        """As the original writes it: every field, ``"on"`` or ``"off"``."""
        return json.dumps(self.fields())

    @classmethod
    def from_json(cls, text: str) -> ProfilingSwitch:
        """The original's JSON (:meth:`from_fields`).

        Raises:
            SwitchError: not a JSON object, or a field :meth:`from_fields` refuses.
        """
        try:
            fields = json.loads(text)
        except ValueError as error:
            raise SwitchError(f"the profiling switch is not JSON: {error}") from error
        if not isinstance(fields, dict):
            raise SwitchError("the profiling switch must be a JSON object, got "
                              f"{type(fields).__name__}")
        return cls.from_fields(fields)

    @classmethod
    def from_fields(cls, fields: Mapping[str, object]) -> ProfilingSwitch:
        """The switch the original's fields make: a field left out or empty is off; any mark
        on turns the four light ones on.

        Raises:
            SwitchError: an unknown field, or a value other than "on", "off" or empty (named).
        """
        on = set()
        for name, value in fields.items():
            if name not in cls.NAMES:
                raise SwitchError(f"the profiling switch has an unknown field {name!r}; known: "
                                  f"{', '.join(cls.NAMES)}")
            if value not in ("on", "off", ""):
                raise SwitchError(f"the profiling switch's {name} is {value!r}, expected "
                                  "\"on\" or \"off\"")
            if value == "on":
                on.add(cls.NAMES[name])
        if not on:
            return cls()
        return cls(communication_operator="communication_operator" in on, step=True,
                   save_checkpoint=True, fp=True, dataloader=True)

    def fields(self) -> dict[str, str]:
        """The original's fields, each "on" or "off"."""
        return {name: "on" if getattr(self, field) else "off"
                for name, field in self.NAMES.items()}

    @classmethod
    def parse(cls, text: str) -> ProfilingSwitch:
        """A preset's name (``light``, ``heavy``, ``off``) or the original's JSON.

        Raises:
            SwitchError: neither (the message names what is wrong).
        """
        preset = PRESETS.get(text.strip().lower())
        if preset is not None:
            return preset
        if not text.lstrip().startswith("{"):
            raise SwitchError(f"unknown profiling switch {text!r}: give one of "
                              f"{', '.join(PRESETS)}, or the JSON of a profilingSwitch")
        return cls.from_json(text)

    def describe(self) -> str:
        """The marks switched on, by the original's names (``off`` when none)."""
        on = [name for name, field in self.NAMES.items() if getattr(self, field)]
        return ", ".join(on) if on else "off"


PRESETS = {
    "off": ProfilingSwitch(),
    "light": ProfilingSwitch(step=True, save_checkpoint=True, fp=True, dataloader=True),
    "heavy": ProfilingSwitch(communication_operator=True, step=True, save_checkpoint=True,
                             fp=True, dataloader=True),
}
"""The original diagnosis's two levels (FD-OL's gRPC client), and all off."""
