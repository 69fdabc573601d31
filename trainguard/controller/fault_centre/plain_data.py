"""Reading plain data back (documents, exported state) with errors that name the field."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["mapping", "number", "objects", "strings", "text", "whole"]


def _get(data: Mapping[str, object], name: str, *, where: str, error: type[ValueError]
         ) -> object:
    if name not in data:
        raise error(f"{where}: field {name!r} is missing")
    return data[name]


def _wrong(name: str, value: object, expected: str, *, where: str,
           error: type[ValueError]) -> ValueError:
    return error(f"{where}: field {name!r} must be {expected}, got {type(value).__name__}")


def mapping(data: Mapping[str, object], name: str, *, where: str,
            error: type[ValueError] = ValueError) -> dict[str, object]:
    value = _get(data, name, where=where, error=error)
    if not isinstance(value, dict):
        raise _wrong(name, value, "a JSON object", where=where, error=error)
    return value


def objects(data: Mapping[str, object], name: str, *, where: str,
            error: type[ValueError] = ValueError) -> list[dict[str, object]]:
    value = _get(data, name, where=where, error=error)
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise _wrong(name, value, "a list of JSON objects", where=where, error=error)
    return value


def number(data: Mapping[str, object], name: str, *, where: str,
           error: type[ValueError] = ValueError) -> float:
    value = _get(data, name, where=where, error=error)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong(name, value, "a number", where=where, error=error)
    return float(value)


def whole(data: Mapping[str, object], name: str, *, where: str,
          error: type[ValueError] = ValueError) -> int:
    value = _get(data, name, where=where, error=error)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong(name, value, "an integer", where=where, error=error)
    return value


def text(data: Mapping[str, object], name: str, *, where: str,
         error: type[ValueError] = ValueError) -> str:
    value = _get(data, name, where=where, error=error)
    if not isinstance(value, str):
        raise _wrong(name, value, "a string", where=where, error=error)
    return value


def strings(data: Mapping[str, object], name: str, *, where: str,
            error: type[ValueError] = ValueError) -> list[str]:
    value = _get(data, name, where=where, error=error)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _wrong(name, value, "a list of strings", where=where, error=error)
    return value
