"""Which lightweight-profiling marks the training processes record (SPEC D10): the original's
``ProfilingSwitch``, the JSON of the ``data-trace-<job>`` document's ``profilingSwitch`` key,
each mark ``"on"`` or ``"off"``.

Step, SaveCheckpoint, FP and DataLoader go together in the original's "light" profiling; the
communication operators are the "heavy" part, switched on apart (the slow-node diagnosis turns
them on only while it confirms a slow rank).
"""

from __future__ import annotations

import dataclasses
import json
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
        return json.dumps({name: "on" if getattr(self, field) else "off"
                           for name, field in self.NAMES.items()})

    @classmethod
    def from_json(cls, text: str) -> ProfilingSwitch:
        """The original's JSON; a field left out is off, as the original reads it.

        Raises:
            SwitchError: not a JSON object, an unknown field, or a value other than "on" or
                "off" (named).
        """
        try:
            fields = json.loads(text)
        except ValueError as error:
            raise SwitchError(f"the profiling switch is not JSON: {error}") from error
        if not isinstance(fields, dict):
            raise SwitchError("the profiling switch must be a JSON object, got "
                              f"{type(fields).__name__}")
        values = {}
        for name, value in fields.items():
            if name not in cls.NAMES:
                raise SwitchError(f"the profiling switch has an unknown field {name!r}; known: "
                                  f"{', '.join(cls.NAMES)}")
            if value not in ("on", "off"):
                raise SwitchError(f"the profiling switch's {name} is {value!r}, expected "
                                  "\"on\" or \"off\"")
            values[cls.NAMES[name]] = value == "on"
        return cls(**values)

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
