"""A device fault code's level, from the original's default ``faultCode.json`` (NOTES §2.2).

The handling of a device fault depends on its level: a retryable error (the uncorrectable
memory error ``80E01801`` and the HCCL error ``8C1F860B``, NOTES §4.6) is retried in the step;
``RestartRequest`` and ``RestartBusiness`` faults restart the process in place; anything more
serious takes the device out of use, so its ranks move to a spare. A code the table does not
know counts as ``SeparateNPU``, as the original does for a fault of unknown severity.
"""

from __future__ import annotations

import enum
import functools
import json
from importlib import resources

__all__ = ["RETRYABLE_CODES", "Level", "allows_in_place", "level_of"]

RETRYABLE_CODES = frozenset({"80E01801", "8C1F860B"})


class Level(enum.StrEnum):
    """The original's chip fault levels, most serious first."""

    MANUALLY_SEPARATE_NPU = "ManuallySeparateNPU"
    SEPARATE_NPU = "SeparateNPU"
    PRE_SEPARATE_NPU = "PreSeparateNPU"
    RESTART_NPU = "RestartNPU"
    FREE_RESTART_NPU = "FreeRestartNPU"
    RESTART_BUSINESS = "RestartBusiness"
    RESTART_REQUEST = "RestartRequest"
    SUB_HEALTH_FAULT = "SubHealthFault"
    NOT_HANDLE_FAULT = "NotHandleFault"
    NORMAL_NPU = "NormalNPU"


_IN_PLACE = frozenset({Level.RESTART_BUSINESS, Level.RESTART_REQUEST, Level.SUB_HEALTH_FAULT,
                       Level.NOT_HANDLE_FAULT, Level.NORMAL_NPU})


@functools.cache
def _table() -> dict[str, Level]:
    """Code -> level; a code listed twice gets the more serious level (checked first)."""
    text = resources.files("trainguard.faults").joinpath("data/faultCode.json").read_text()
    lists = json.loads(text)
    table: dict[str, Level] = {}
    for level in Level:
        for code in lists.get(f"{level}Codes", []):
            table.setdefault(code.upper(), level)
    return table


def level_of(code: str) -> Level:
    return _table().get(code.upper(), Level.SEPARATE_NPU)


def allows_in_place(code: str) -> bool:
    """Whether a process with this fault may simply be restarted on the same device."""
    return code.upper() in RETRYABLE_CODES or level_of(code) in _IN_PLACE
