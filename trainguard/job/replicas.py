"""Which ranks hold the same state (SPEC R7): the job's data-parallel replica groups.

With ``dp_size`` replicas of a model that is split over ``world_size / dp_size`` ranks (tensor
and pipeline parallel, which are not interchangeable), rank ``r`` holds part ``r mod
(world_size / dp_size)``; the ranks holding the same part form its replica group, and any of
them can give a lost rank its state (R6) or save it for a dying checkpoint (R5). This is the
layout torchrun jobs get from ``DeviceMesh(("dp", "mp"))`` and Megatron's default rank order
(model parallel ranks adjacent).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

__all__ = ["ReplicaLayout"]


@dataclasses.dataclass(frozen=True)
class ReplicaLayout:
    world_size: int
    dp_size: int

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world size must be >= 1, got {self.world_size}")
        if self.dp_size < 1 or self.world_size % self.dp_size:
            raise ValueError(f"dp-size {self.dp_size} does not divide the world size "
                             f"{self.world_size}")

    @property
    def parts(self) -> int:
        """Ranks per replica: the model-parallel size."""
        return self.world_size // self.dp_size

    def group(self, rank: int) -> tuple[int, ...]:
        """Every rank holding the same state as ``rank``, ``rank`` included."""
        return tuple(range(rank % self.parts, self.world_size, self.parts))

    def donor(self, rank: int, usable: Collection[int]) -> int | None:
        """A rank in ``usable`` that can give ``rank`` its state (the lowest), if any."""
        return next((peer for peer in self.group(rank) if peer != rank and peer in usable), None)
