"""Random number generator states, saved with every snapshot so a resumed run draws the same.

The states are kept compact: Python's and numpy's 624-word Mersenne Twister states go into the
snapshot as bytes rather than as a tuple of 625 ints or an array, which the snapshot's pickler
would visit one object at a time on every step. States saved in the older form (the tuples
``random.getstate()`` and ``numpy.random.get_state()`` return) still restore.

Both getters copy their 624 words one at a time (Python's builds 625 ints: about 25 us, most
of a capture; numpy's about 55 us), and most training scripts never draw from either global
generator between snapshots. So each generator's raw words and position (2.5 KB, read at the C
object's address) are compared with the last full read: unchanged, with the same cached normal
deviate, nothing was drawn since, and the state read then still holds. The raw layout is
checked against a full read before it is ever trusted.
"""

from __future__ import annotations

import _random
import abc
import array
import ctypes
import random
import struct
import sys
from typing import Any

import torch

__all__ = ["capture", "restore"]

_WORD = "Q"  # Python's state words (32-bit values and a position), as unsigned 64-bit


def capture() -> dict[str, Any]:
    """States of Python's, torch's (CPU and initialised CUDA) and numpy's global generators."""
    states: dict[str, Any] = {"python": _python.capture(), "torch": torch.get_rng_state()}
    # Only generators already in use: asking an uninitialised CUDA would initialise it. An
    # initialised CUDA is an available one, and asking whether it is available costs a tenth
    # of a small snapshot's capture.
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        states["cuda"] = torch.cuda.get_rng_state_all()
    if "numpy" in sys.modules:
        states["numpy"] = _numpy.capture()
    return states


_WORDS = 624  # a Mersenne Twister's state: 624 uint32 words, and its position (a C int)


class _Generator(abc.ABC):
    """A global generator's state, read in full only when it may have changed: when its raw
    words and position moved since the last full read, or a normal deviate was cached then
    (taking it leaves the words as they are; drawing one with none cached moves them)."""

    def __init__(self) -> None:
        self._last: tuple[bytes, tuple[Any, ...]] | None = None  # raw state, the state read
        self._trusted: bool | None = None  # whether the raw layout matched a full read

    def capture(self) -> tuple[Any, ...]:
        raw = self._raw() if self._trusted is not False else None
        if raw is not None and self._last is not None and self._last[0] == raw:
            return self._last[1]
        state, expected, normal_cached = self._read()
        if raw is not None and self._trusted is None:
            self._trusted = raw == expected
        self._last = (raw, state) if raw is not None and self._trusted and not normal_cached \
            else None
        return state

    def forget(self) -> None:
        """The state was set (a restore): it may have the same words as the last read but
        another cached normal deviate."""
        self._last = None

    @abc.abstractmethod
    def _raw(self) -> bytes | None:
        """The raw words and position as they lie in memory; None: not readable here."""

    @abc.abstractmethod
    def _read(self) -> tuple[tuple[Any, ...], bytes | None, bool]:
        """The state read in full (as saved), the raw bytes it implies (None: its layout is
        not the one :meth:`_raw` reads), and whether a normal deviate is cached."""


class _PythonGenerator(_Generator):
    """The instance behind the random module's functions: a ``_random.Random``, whose C object
    holds the position and then the words right after the object header."""

    _OFFSET = object.__basicsize__
    _LENGTH = 4 + _WORDS * 4

    def __init__(self) -> None:
        super().__init__()
        self._generator: random.Random = random.getstate.__self__  # type: ignore[attr-defined]
        if _random.Random.__basicsize__ < self._OFFSET + self._LENGTH:
            self._trusted = False  # another layout: never read past the object

    def _raw(self) -> bytes:
        return ctypes.string_at(id(self._generator) + self._OFFSET, self._LENGTH)

    def _read(self) -> tuple[tuple[Any, ...], bytes | None, bool]:
        version, words, gauss = self._generator.getstate()
        state = (version, array.array(_WORD, words).tobytes(), gauss)
        return state, struct.pack(f"=i{_WORDS}I", words[-1], *words[:-1]), gauss is not None


class _NumpyGenerator(_Generator):
    """numpy's global ``RandomState``; its raw state lies at its bit generator's
    ``ctypes.state_address`` (numpy >= 1.25), the words and then the position."""

    def _raw(self) -> bytes | None:
        getter = getattr(sys.modules["numpy"].random, "get_bit_generator", None)
        if getter is None:
            return None
        generator = getter()
        if type(generator).__name__ != "MT19937":
            return None
        return ctypes.string_at(generator.ctypes.state_address, _WORDS * 4 + 4)

    def _read(self) -> tuple[tuple[Any, ...], bytes | None, bool]:
        name, keys, position, has_gauss, gauss = sys.modules["numpy"].random.get_state()
        state = (name, keys.tobytes(), keys.dtype.str, position, has_gauss, gauss)
        expected = (state[1] + position.to_bytes(4, sys.byteorder, signed=True)
                    if name == "MT19937" else None)
        return state, expected, bool(has_gauss)


_python = _PythonGenerator()
_numpy = _NumpyGenerator()


def restore(states: dict[str, Any]) -> None:
    version, words, gauss = states["python"]
    if isinstance(words, bytes):
        words = tuple(array.array(_WORD, words))
    random.setstate((version, words, gauss))
    _python.forget()
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
