"""Where a session keeps the training state: the interface its two backends share.

Under ``trainguard run`` the state goes into the node agent's shared memory
(:mod:`trainguard.train.agent_memory`); outside it, straight into a checkpoint directory in the
same on-disk format (:mod:`trainguard.train.local_directory`). :class:`~trainguard.train.Session`
builds the saved tree (:func:`saved_tree`) and loads it back; a backend only stores and finds
trees.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from trainguard.train import rng

__all__ = ["Loaded", "StateBackend", "StateError", "saved_tree"]


def saved_tree(state: Mapping[str, Any], *, step: int) -> dict[str, Any]:
    """The tree a checkpoint saves: each value's ``state_dict()`` (the value itself when it has
    none), the step to resume at and the random generators' states. Building it is the part of
    a snapshot that any checkpoint made of state dicts pays (benchmarks/snapshot_overhead.py
    measures it alone)."""
    return {
        "step": step,
        "state": {key: value.state_dict() if hasattr(value, "state_dict") else value
                  for key, value in state.items()},
        "rng": rng.capture(),
    }


class StateError(RuntimeError):
    """The state cannot be saved or loaded this way; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class Loaded:
    """What a restore found."""

    source: str
    """Where it came from: ``memory``, ``peer`` (sent by a replica), ``replica`` (a replica's
    snapshot, read from memory), ``disk``, or ``none`` on a fresh start."""
    step: int
    """The step training resumes at (0 when nothing was found)."""
    tree: Any
    """The saved tree (``{"step", "state", "rng"}``), or None when nothing was found."""
    note: str
    """Newer states that were skipped, and why; empty when none were."""


class StateBackend(Protocol):
    def due(self, step: int) -> bool:
        """Whether ``Session.checkpoint(..., step=step)`` saves (else it returns at once)."""

    def slow_save_expected(self) -> bool:
        """Whether the next save may be long enough to declare to the agent as busy work
        (:data:`trainguard.train.agent_memory.DECLARED_SNAPSHOT_SECONDS`)."""

    def save(self, tree: dict[str, Any], *, step: int, generation: int, started: float,
             optimizers: Sequence[torch.optim.Optimizer] = (), whole: bool = False) -> float:
        """Store ``tree``, saved to resume at ``step``; ``started`` is the
        ``time.perf_counter()`` at which the checkpoint began; ``optimizers``: those of the
        saved state, whose tensors may be copied while training goes on (their next
        ``step()`` waits for it); ``whole``: every tensor in this rank's snapshot, none left to
        its replicas' (a state received from a replica, saved while the others restore).
        Returns the seconds training was blocked.

        Raises:
            StateError: there is no room for the state, or the ranks cannot agree on where it goes.
        """

    def flush(self) -> None:
        """Until every save so far is complete (one may finish in the background).

        Raises:
            StateError: a save that finished in the background failed.
        """

    def load(self) -> Loaded:
        """The newest complete state this rank may resume from; every rank gets the same step.

        Raises:
            StateError: the state that should be loaded cannot be read.
        """

    def close(self) -> None:
        """Release what the backend holds (mappings); saving is over."""
