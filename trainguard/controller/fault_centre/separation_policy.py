"""The cluster's manual-separation policy (the original's ``manually_separate_policy.conf``).

::

    enabled: true
    separate:
      fault_window_hours: 24    # 1..720
      fault_threshold: 3        # 1..50
    release:
      fault_free_hours: 48      # 1..240, or -1: never released by time

A device whose faults hit jobs ``fault_threshold`` times within ``fault_window_hours`` is taken
out of use (ManuallySeparateNPU) until ``fault_free_hours`` pass without a fault on it, or an
operator releases it. A value out of range is reported, naming the field, and its default is
used, as the original's loader does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from trainguard.faults.config_problems import Action, ConfigProblem

__all__ = ["NEVER", "SeparationPolicy"]

NEVER = -1
"""``fault_free_hours``: a separated device is released only by an operator."""
_FILE = "manually_separate_policy.conf"


@dataclasses.dataclass(frozen=True)
class SeparationPolicy:
    enabled: bool = True
    """Whether devices are separated at all."""
    fault_window_hours: int = 24
    """Hours (1..720) within which ``fault_threshold`` faults separate a device."""
    fault_threshold: int = 3
    """Faults (1..50) that separate a device within the window; 1 separates at the first."""
    fault_free_hours: int = 48
    """Hours (1..240) without a fault after which a separated device is released; -1: never."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"enabled: {self.enabled!r} is not true or false")
        for name, _ in _SECTIONS:
            value = getattr(self, name)
            if not _in_range(name, value):
                raise ValueError(f"{name}: {value!r} is out of range ({_range_text(name)})")

    @property
    def window(self) -> float:
        """The window in seconds."""
        return self.fault_window_hours * 3600.0

    @property
    def fault_free(self) -> float | None:
        """Seconds without a fault that release a device; None: never."""
        return None if self.fault_free_hours == NEVER else self.fault_free_hours * 3600.0

    @classmethod
    def from_document(cls, document: object, *, file: str = _FILE
                      ) -> tuple[SeparationPolicy, list[ConfigProblem]]:
        """The policy from the parsed file: each bad value is reported and takes its
        default."""
        problems: list[ConfigProblem] = []
        if not isinstance(document, dict):
            problems.append(ConfigProblem(file, "", "", "not a mapping; the defaults are used",
                                          Action.DEFAULT_USED))
            return cls(), problems
        default = cls()
        enabled = document.get("enabled", default.enabled)
        if not isinstance(enabled, bool):
            problems.append(ConfigProblem(file, "", "enabled", f"{enabled!r} is not true or "
                                          "false; the default (true) is used",
                                          Action.DEFAULT_USED))
            enabled = default.enabled
        numbers = {name: _number(document, section, name, getattr(default, name), file=file,
                                 problems=problems) for name, section in _SECTIONS}
        return cls(enabled, numbers["fault_window_hours"], numbers["fault_threshold"],
                   numbers["fault_free_hours"]), problems


def _number(document: Mapping[str, object], section: str, name: str, default: int, *,
            file: str, problems: list[ConfigProblem]) -> int:
    part = document.get(section, {})
    value = part.get(name, default) if isinstance(part, Mapping) else default
    if _in_range(name, value):
        assert isinstance(value, int)
        return value
    problems.append(ConfigProblem(file, section, name, f"{value!r} is out of range "
                                  f"({_range_text(name)}); the default ({default}) is used",
                                  Action.DEFAULT_USED))
    return default


_SECTIONS = (("fault_window_hours", "separate"), ("fault_threshold", "separate"),
             ("fault_free_hours", "release"))
_RANGES = {"fault_window_hours": (1, 720), "fault_threshold": (1, 50),
           "fault_free_hours": (1, 240)}


def _in_range(name: str, value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    low, high = _RANGES[name]
    return low <= value <= high or (name == "fault_free_hours" and value == NEVER)


def _range_text(name: str) -> str:
    low, high = _RANGES[name]
    never = " or -1 for never" if name == "fault_free_hours" else ""
    return f"a whole number of {low}..{high}{never}"
