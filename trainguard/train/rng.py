"""Random number generator states, saved with every snapshot so a resumed run draws the same.

The states are kept compact: Python's and numpy's 624-word Mersenne Twister states go into the
snapshot as bytes rather than as a tuple of 625 ints or an array, which the snapshot's pickler
would visit one object at a time on every step. States saved in the older form (the tuples
``random.getstate()`` and ``numpy.random.get_state()`` return) still restore.

numpy's getter copies its 624 words one at a time (about 55 us, a tenth of a small snapshot),
and most training scripts never draw from numpy's global generator. So its raw state (the
words and position at ``get_bit_generator().ctypes.state_address``, 2.5 KB) is compared with
the last full read: unchanged, and with no normal deviate cached then, nothing was drawn since
(drawing a normal with none cached moves the words), and the state read then still holds. The
raw layout is checked against a full read before it is ever trusted.
"""

from __future__ import annotations

import array
import ctypes
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
        states["numpy"] = _numpy.capture(numpy)
    return states


class _NumpyState:
    """numpy's global generator state, read in full only when it may have changed."""

    _WORDS = 624  # MT19937's state: 624 uint32 words, then its position (a C int)

    def __init__(self) -> None:
        self._last: tuple[bytes, tuple[Any, ...]] | None = None  # raw state, the state read
        self._trusted: bool | None = None  # whether the raw layout matched a full read

    def capture(self, numpy: Any) -> tuple[Any, ...]:
        raw = self._raw(numpy)
        if raw is not None and self._last is not None and self._last[0] == raw:
            return self._last[1]
        name, keys, position, has_gauss, gauss = numpy.random.get_state()
        state = (name, keys.tobytes(), keys.dtype.str, position, has_gauss, gauss)
        if raw is not None and self._trusted is None:
            self._trusted = (name == "MT19937" and raw[:-4] == state[1]
                             and int.from_bytes(raw[-4:], sys.byteorder, signed=True) == position)
        self._last = (raw, state) if raw is not None and self._trusted and not has_gauss \
            else None
        return state

    def forget(self) -> None:
        """The state was set (a restore): it may have the same words as the last read but
        another cached normal deviate."""
        self._last = None

    def _raw(self, numpy: Any) -> bytes | None:
        getter = getattr(numpy.random, "get_bit_generator", None)  # numpy >= 1.25
        if self._trusted is False or getter is None:
            return None
        generator = getter()
        if type(generator).__name__ != "MT19937":
            return None
        return ctypes.string_at(generator.ctypes.state_address, self._WORDS * 4 + 4)


_numpy = _NumpyState()


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
        _numpy.forget()
