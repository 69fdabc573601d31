"""Fault levels, their order and what each asks the job to do (SPEC D2, D3, D5, H8).

The names and the order are the original's (NOTES §2.2): operators know them from its documents,
its configuration files and its device-info ConfigMap, so they are kept verbatim.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = ["SEVERITY", "FaultType", "Level", "ResetPolicy", "health", "most_serious",
           "reset_policy"]


class Level(enum.StrEnum):
    """A chip's fault level, most serious first (``ManuallySeparateNPU`` > ... > ``NormalNPU``).

    ``NormalNetwork`` is what a chip's network is without a network fault; it ranks with
    ``NormalNPU`` below every fault.
    """

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
    NORMAL_NETWORK = "NormalNetwork"

    @property
    def severity(self) -> int:
        """Larger is more serious; both normal levels are 0."""
        return SEVERITY[self]

    @property
    def is_fault(self) -> bool:
        return self.severity > 0


SEVERITY = {level: rank for rank, level in enumerate(reversed(list(Level)[:-1]))}
"""Each level's severity (as :attr:`Level.severity`), for hot paths that compare many."""
SEVERITY[Level.NORMAL_NETWORK] = 0


def most_serious(levels: Iterable[Level]) -> Level:
    """The most serious of ``levels``; ``NormalNPU`` for none."""
    return max(levels, key=SEVERITY.__getitem__, default=Level.NORMAL_NPU)


class ResetPolicy(enum.StrEnum):
    """What reset.json's ``Policy`` asks of the job for a rank (NOTES §6.2), least first."""

    EMPTY = "empty"
    IGNORE = "ignore"
    RESTART_REQUEST = "restart_request"
    RESTART = "restart"
    FREE_RESET = "free_reset"
    RESET = "reset"
    ISOLATE = "isolate"

    @property
    def number(self) -> int:
        """The original's numeric policy level: empty 0 ... isolate 6."""
        return list(ResetPolicy).index(self)


_POLICY = {
    Level.NORMAL_NPU: ResetPolicy.EMPTY,
    Level.NORMAL_NETWORK: ResetPolicy.EMPTY,
    Level.NOT_HANDLE_FAULT: ResetPolicy.EMPTY,
    Level.SUB_HEALTH_FAULT: ResetPolicy.EMPTY,
    Level.RESTART_REQUEST: ResetPolicy.RESTART_REQUEST,
    Level.RESTART_BUSINESS: ResetPolicy.RESTART,
    Level.FREE_RESTART_NPU: ResetPolicy.FREE_RESET,
    Level.RESTART_NPU: ResetPolicy.RESET,
}


def reset_policy(level: Level) -> ResetPolicy:
    """The reset.json policy of a level; every separating level isolates the chip."""
    return _POLICY.get(level, ResetPolicy.ISOLATE)


_HEALTH = {
    ResetPolicy.EMPTY: "healthy",
    ResetPolicy.IGNORE: "healthy",
    ResetPolicy.RESTART_REQUEST: "needs restart",
    ResetPolicy.RESTART: "needs restart",
    ResetPolicy.FREE_RESET: "needs reset",
    ResetPolicy.RESET: "needs reset",
    ResetPolicy.ISOLATE: "isolated",
}


def health(level: Level | str) -> str:
    """A level in words that need no glossary (``isolated`` for SeparateNPU), from its reset
    policy; shown beside the original's name, which operators know."""
    return _HEALTH[reset_policy(Level(level))]


class FaultType(enum.StrEnum):
    """The device-info ConfigMap's ``fault_type``: which part of the node is unhealthy."""

    CARD_UNHEALTHY = "CardUnhealthy"
    CARD_NETWORK_UNHEALTHY = "CardNetworkUnhealthy"
    NODE_UNHEALTHY = "NodeUnhealthy"
