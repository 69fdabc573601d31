"""JSON as Go's ``encoding/json`` writes it, for the checksums of the original's documents.

The original's consumers check a document's ``CheckCode`` by encoding what they decoded and
hashing it, so ours must hash the very bytes Go would write: no spaces, keys in the order given
(Go writes struct fields in declaration order and sorts map keys: callers build dicts in that
order), non-ASCII characters as they are, and ``<``, ``>``, ``&``, U+2028 and U+2029 as ``\\u``
escapes.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["GoMap", "check_code", "dumps"]

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


def dumps(value: object) -> str:
    """``value`` as Go's ``json.Marshal`` writes it (:class:`GoMap` keys sorted, other dicts'
    order kept)."""
    text = json.dumps(_sorted_maps(value), ensure_ascii=False, separators=(",", ":"))
    for character, escape in _GO_ESCAPES.items():
        text = text.replace(character, escape)
    return text


def check_code(value: object) -> str:
    """SHA-256, in hex, of the UTF-8 of :func:`dumps` of ``value``: the original's CheckCode."""
    return hashlib.sha256(dumps(value).encode()).hexdigest()
