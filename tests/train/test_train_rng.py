"""Random generator states: captured and restored, also through a snapshot."""

from __future__ import annotations

import array
import random
from pathlib import Path
from typing import Any

import numpy
import pytest
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


def test_cuda_states_only_once_cuda_is_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    # Asking an uninitialised CUDA for its states would initialise it (a CUDA context in every
    # rank of a CPU job); an initialised one is asked, whatever else torch.cuda says.
    device_states = [torch.zeros(16, dtype=torch.uint8)]
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: device_states)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert "cuda" not in rng.capture()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert rng.capture()["cuda"] is device_states


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


def _numpy_state() -> tuple[object, ...]:
    name, keys, position, has_gauss, gauss = numpy.random.get_state(legacy=True)
    words = numpy.asarray(keys)
    return (name, words.tobytes(), words.dtype.str, position, has_gauss, gauss)


def test_numpy_state_is_exact_whatever_was_drawn_between_captures() -> None:
    """numpy's state is read in full only when its words moved: a capture after no draw, a
    uniform draw, one normal (computed in pairs: the second is cached, the words move) and
    the cached normal taken (the words stay) each equals numpy's own reading."""
    numpy.random.seed(21)
    for drawn in ((), (numpy.random.rand,), (numpy.random.randn,), (numpy.random.randn,), (),
                  (numpy.random.randn,)):
        for draw_one in drawn:
            draw_one()
        assert rng.capture()["numpy"] == _numpy_state()


def test_a_restore_is_never_taken_for_the_state_read_last() -> None:
    """The state before the cached normal was taken has the same words as the state after:
    restored, it must be captured with its normal, not as last read."""
    numpy.random.seed(22)
    numpy.random.randn()  # one normal drawn, its pair cached
    with_cached = rng.capture()
    numpy.random.randn()  # the cached one taken: the same words
    rng.capture()
    rng.restore(with_cached)
    assert rng.capture()["numpy"] == with_cached["numpy"] == _numpy_state()
    expected = numpy.random.randn()
    rng.restore(with_cached)
    assert numpy.random.randn() == expected


def test_numpy_is_read_in_full_only_once_its_words_move(monkeypatch: pytest.MonkeyPatch) -> None:
    numpy.random.seed(23)
    reads = []
    full = numpy.random.get_state

    def counted() -> Any:
        reads.append(1)
        return full()

    monkeypatch.setattr(numpy.random, "get_state", counted)
    for _ in range(3):
        rng.capture()
    numpy.random.rand()
    rng.capture()
    assert len(reads) == 2, "read at the first capture and after the draw only"


def test_python_state_is_exact_whatever_was_drawn_between_captures() -> None:
    """Python's state is read in full only when its words moved: after no draw, a uniform
    draw, a normal (computed in pairs: the second is cached, the words move), the cached one
    taken (the words stay, the cache empties) and a reseed, each capture equals Python's own
    reading."""
    random.seed(31)
    for drawn in ((), (random.random,), (lambda: random.gauss(0, 1),),
                  (lambda: random.gauss(0, 1),), (), (lambda: random.seed(31),)):
        for draw_one in drawn:
            draw_one()
        version, words, gauss = random.getstate()
        assert rng.capture()["python"] == (version, array.array("Q", words).tobytes(), gauss)


def test_python_is_read_in_full_only_once_its_words_move(monkeypatch: pytest.MonkeyPatch) -> None:
    random.seed(32)
    reads = []
    full = random.Random.getstate

    def counted(generator: random.Random) -> Any:
        reads.append(1)
        return full(generator)

    monkeypatch.setattr(random.Random, "getstate", counted)
    for _ in range(3):
        rng.capture()
    random.random()
    rng.capture()
    assert len(reads) == 2, "read at the first capture and after the draw only"


def test_a_restored_python_state_with_a_cached_normal_is_captured_with_it() -> None:
    random.seed(33)
    random.gauss(0, 1)  # one normal drawn, its pair cached
    with_cached = rng.capture()
    random.gauss(0, 1)  # the cached one taken: the same words
    rng.capture()
    rng.capture()
    rng.restore(with_cached)
    assert rng.capture()["python"] == with_cached["python"]
    expected = random.gauss(0, 1)
    rng.restore(with_cached)
    assert random.gauss(0, 1) == expected
