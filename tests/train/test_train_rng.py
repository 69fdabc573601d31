"""Random generator states: captured and restored, also through a snapshot."""

from __future__ import annotations

import random
from pathlib import Path

import numpy
import torch

from trainguard.train import rng, snapshot


def draw() -> tuple[float, list[float], list[float]]:
    return random.random(), torch.rand(4).tolist(), numpy.random.rand(3).tolist()


def test_capture_then_restore_draws_the_same() -> None:
    random.seed(1)
    torch.manual_seed(2)
    numpy.random.seed(3)
    states = rng.capture()
    assert set(states) >= {"python", "torch", "numpy"}
    first = draw()
    draw()
    rng.restore(states)
    assert draw() == first


def test_capture_is_a_copy() -> None:
    states = rng.capture()
    expected = draw()
    draw()  # the live generators move on; the captured states must not
    rng.restore(states)
    assert draw() == expected


def test_states_survive_a_snapshot(tmp_path: Path) -> None:
    torch.manual_seed(5)
    states = rng.capture()
    expected = draw()
    prepared = snapshot.prepare({"rng": states})
    path = tmp_path / "slot"
    with path.open("wb") as stream:
        stream.truncate(prepared.nbytes)
    slot = snapshot.MappedSlot(str(path))
    try:
        slot.write(prepared, step=1, generation=0, rank=0, world_size=1)
    finally:
        slot.close()
    draw()
    _, read = snapshot.read_snapshot(str(path))
    rng.restore(read["rng"])
    assert draw() == expected


def test_restore_without_numpy_state_leaves_numpy_alone() -> None:
    states = rng.capture()
    del states["numpy"]
    numpy.random.seed(9)
    expected = numpy.random.rand(2).tolist()
    numpy.random.seed(9)
    rng.restore(states)
    assert numpy.random.rand(2).tolist() == expected


def test_states_saved_in_the_older_tuple_form_still_restore() -> None:
    """Snapshots written before the states were kept compact hold what the generators return."""
    random.seed(11)
    numpy.random.seed(12)
    older = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": numpy.random.get_state()}
    expected = draw()
    rng.restore(older)
    assert draw() == expected


def test_states_are_compact_for_the_snapshot_pickler() -> None:
    """Python's and numpy's generator words are one bytes object each, not 624 objects."""
    states = rng.capture()
    assert isinstance(states["python"][1], bytes)
    assert isinstance(states["numpy"][1], bytes)
