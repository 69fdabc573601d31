"""Fixtures shared by the agent tests: snapshot slots in this process, and a writer for them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from trainguard.agent import snapshot_slots
from trainguard.train import snapshot


def write_slot(slots: snapshot_slots.SnapshotSlots, rank: int, slot: int, tree: Any, *,
               step: int, world_size: int = 2, generation: int = 0) -> int:
    """Grant ``slot`` of ``rank`` big enough for ``tree`` and write it as a worker would;
    returns the committed seq."""
    prepared = snapshot.prepare(tree)
    path, _ = slots.grant(rank, slot, prepared.nbytes)
    mapped = snapshot.MappedSlot(path)
    try:
        return mapped.write(prepared, step=step, generation=generation, rank=rank,
                            world_size=world_size)
    finally:
        mapped.close()


def state_tree(step: int, rank: int, *, numel: int = 256) -> dict[str, Any]:
    """A small training state whose values tell the step and rank apart."""
    return {
        "step": step,
        "state": {"model": {"weight": torch.full((numel,), float(step * 100 + rank)),
                            "bias": torch.arange(8, dtype=torch.int64) + step},
                  "epoch": step // 10},
        "rng": {},
    }


@pytest.fixture
def slots() -> Iterator[snapshot_slots.SnapshotSlots]:
    held = snapshot_slots.SnapshotSlots()
    yield held
    held.close()


@pytest.fixture
def writer() -> Callable[..., int]:
    """``writer(slots, rank, slot, tree, step=..., world_size=2)``: see :func:`write_slot`."""
    return write_slot


@pytest.fixture
def make_state() -> Callable[..., dict[str, Any]]:
    """``make_state(step, rank, numel=256)``: see :func:`state_tree`."""
    return state_tree
