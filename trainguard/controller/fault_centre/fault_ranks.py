"""The job's fault ranks document ``fault-config-<job>`` (SPEC I1; seed: 任务信息).

Keys, as the original's: ``fault-npus``, the JSON ``{"FaultRankIds": ["3", "11"],
"CreatTime": <Unix seconds>}`` (rank ids as decimal strings, ascending; ``CreatTime`` with the
original's spelling), and ``checkCode``, the SHA-256 in hex of the ``fault-npus`` text. The
ranks are those on devices whose faults, as the job sees them, are above SubHealthFault, on
manually separated devices, and on nodes a relation rule separated. ``CreatTime`` is when the
set last changed, so that an unchanged set is written unchanged. The document exists while the
job runs, with an empty list when no rank is faulty (decided here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from trainguard.faults import go_json

__all__ = ["FAULT_CONFIG_PREFIX", "FaultRanks"]

FAULT_CONFIG_PREFIX = "fault-config-"


@dataclasses.dataclass(frozen=True)
class FaultRanks:
    job: str
    ranks: tuple[int, ...]  # ascending
    created: float  # seconds: when this set of ranks was first seen

    @property
    def name(self) -> str:
        return FAULT_CONFIG_PREFIX + self.job

    def data(self) -> dict[str, str]:
        """The document's keys and values."""
        npus = {"FaultRankIds": [str(rank) for rank in self.ranks],
                "CreatTime": int(self.created)}
        return {"fault-npus": go_json.dumps(npus), "checkCode": go_json.check_code(npus)}

    def updated(self, ranks: Iterable[int], now: float) -> FaultRanks:
        """This job's document with ``ranks`` at ``now`` (seconds): itself when unchanged."""
        ordered = tuple(sorted(set(ranks)))
        return self if ordered == self.ranks else FaultRanks(self.job, ordered, now)
