"""Random number generator states, saved with every snapshot so a resumed run draws the same."""

from __future__ import annotations

import random
import sys
from typing import Any

import torch

__all__ = ["capture", "restore"]


def capture() -> dict[str, Any]:
    """States of Python's, torch's (CPU and initialised CUDA) and numpy's global generators."""
    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    # Only generators already in use: asking an uninitialised CUDA would initialise it.
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        states["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    return states


def restore(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    numpy = sys.modules.get("numpy")
    if "numpy" in states and numpy is not None:
        numpy.random.set_state(states["numpy"])
