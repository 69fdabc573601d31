"""JSON as Go's ``encoding/json`` writes it, and check codes over it.

The original's readers check a document by hashing what they decoded, re-encoded by Go, so a
document we write must be byte for byte what Go would write for the same value: no spaces,
map keys sorted (Go sorts them; struct fields keep their declared order, which the caller
gives as a dict's insertion order, so only maps, passed as :class:`GoMap`, are sorted),
non-ASCII characters as they are, and ``<``, ``>``, ``&``, U+2028 and U+2029 as ``\\u`` escapes.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["GoMap", "check_code", "encode"]

_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
               "\u2029": "\\u2029"}


class GoMap(dict[str, object]):
    """A Go map: written with its keys sorted, where a plain dict (a struct) keeps its order."""


def _sorted_maps(value: object) -> object:
    if isinstance(value, GoMap):
        return {key: _sorted_maps(value[key]) for key in sorted(value)}
    if isinstance(value, dict):
        return {key: _sorted_maps(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sorted_maps(item) for item in value]
    return value


def encode(value: object) -> str:
    """``value`` as Go writes it (``GoMap`` keys sorted, dict keys in their order)."""
    text = json.dumps(_sorted_maps(value), ensure_ascii=False, separators=(",", ":"))
    for character, escape in _GO_ESCAPES.items():
        text = text.replace(character, escape)
    return text


def check_code(text: str) -> str:
    """SHA-256, in hex, of ``text`` in UTF-8: the original's ``checkCode``."""
    return hashlib.sha256(text.encode()).hexdigest()
