"""Durations as people write them: ``500ms``, ``30s``, ``10m``, ``2h``, ``1d``; else seconds.

Which options are durations: every settings field typed ``float`` whose attribute docstring says
"seconds" (STYLE.md: durations are float seconds, and the docstring says so), and torchrun's
``--monitor-interval`` and ``--shutdown-timeout``. The value is always float seconds.
"""

from __future__ import annotations

import re

__all__ = ["UNITS", "parse_duration"]

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
"""Seconds per unit."""

_DURATION = re.compile(r"\s*(?P<number>[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)\s*"
                       r"(?P<unit>ms|s|m|h|d)?\s*")


def parse_duration(text: str) -> float:
    """Seconds in ``text``.

    Raises:
        ValueError: not a number with an optional unit; the message names the text.
    """
    match = _DURATION.fullmatch(text)
    if match is None:
        try:
            return float(text)  # nan and inf: refused where they are checked, by the field's rule
        except ValueError:
            raise ValueError(f"{text!r} is not a duration (seconds, or a number with a unit: "
                             "500ms, 30s, 10m, 2h, 1d)") from None
    return float(match["number"]) * UNITS[match["unit"] or "s"]
