"""Random number generator states, saved with every snapshot so a resumed run draws the same.

The states are kept compact: Python's and numpy's 624-word Mersenne Twister states go into the
snapshot as bytes rather than as a tuple of 625 ints or an array, which the snapshot's pickler
would visit one object at a time on every step. States saved in the older form (the tuples
``random.getstate()`` and ``numpy.random.get_state()`` return) still restore.
"""

from __future__ import annotations

import array
import random
import sys
from typing import Any

import torch

__all__ = ["capture", "restore"]

_WORD = "Q"  # Python's state words (32-bit values and a position), as unsigned 64-bit


def capture() -> dict[str, Any]:
    """States of Python's, torch's (CPU and initialised CUDA) and numpy's global generators."""
    version, words, gauss = random.getstate()
    states: dict[str, Any] = {"python": (version, array.array(_WORD, words).tobytes(), gauss),
                              "torch": torch.get_rng_state()}
    # Only generators already in use: asking an uninitialised CUDA would initialise it.
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        states["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        name, keys, *rest = numpy.random.get_state()
        states["numpy"] = (name, keys.tobytes(), keys.dtype.str, *rest)
    return states


def restore(states: dict[str, Any]) -> None:
    version, words, gauss = states["python"]
    if isinstance(words, bytes):
        words = tuple(array.array(_WORD, words))
    random.setstate((version, words, gauss))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    numpy = sys.modules.get("numpy")
    if "numpy" in states and numpy is not None:
        saved = states["numpy"]
        if isinstance(saved[1], bytes):
            name, keys, dtype, *rest = saved
            saved = (name, numpy.frombuffer(keys, dtype=dtype).copy(), *rest)
        numpy.random.set_state(saved)
