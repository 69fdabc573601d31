"""Command-line options derived from settings dataclasses: one flag per field, one name each.

``HeartbeatSettings.floor`` with prefix ``heartbeat-`` becomes ``--heartbeat-floor`` with the
environment fallback ``TRAINGUARD_HEARTBEAT_FLOOR``; its help is the field's attribute docstring
and its default the dataclass default, so defaults live in one place only.
Precedence: default < environment < flag.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import os
import textwrap
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["SettingsError", "SettingsGroup", "attribute_docs"]


class SettingsError(ValueError):
    """A value that breaks a settings rule; the message names the flag or variable."""


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a class's fields (which Python itself does not keep)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


@dataclasses.dataclass(frozen=True)
class SettingsGroup:
    key: str  # keeps the groups' destinations apart
    cls: type
    prefix: str = ""
    exclude: frozenset[str] = frozenset()

    def _fields(self) -> list[dataclasses.Field[Any]]:
        return [f for f in dataclasses.fields(self.cls) if f.name not in self.exclude]

    def flag(self, field: str) -> str:
        return "--" + (self.prefix + field).replace("_", "-")

    def envvar(self, field: str) -> str:
        return "TRAINGUARD_" + (self.prefix + field).replace("-", "_").upper()

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        docs = attribute_docs(self.cls)
        hints = typing.get_type_hints(self.cls)
        for field in self._fields():
            shown = _shown(field.default)
            default = f"default: {shown}; " if shown not in (None, "") else ""
            group.add_argument(
                self.flag(field.name), dest=f"{self.key}__{field.name}", default=None,
                type=_parser(hints[field.name], self.flag(field.name)),
                metavar=_metavar(hints[field.name]),
                help=f"{docs.get(field.name, '')} [{default}env {self.envvar(field.name)}]")

    def build(self, values: Mapping[str, Any], *, environ: Mapping[str, str] = os.environ,
              **extra: Any) -> Any:
        """The settings object: flags, else environment, else defaults (plus ``extra``).

        Raises:
            SettingsError: a value is malformed or breaks the field's rule.
        """
        hints = typing.get_type_hints(self.cls)
        kwargs = dict(extra)
        for field in self._fields():
            value = values.get(f"{self.key}__{field.name}")
            variable = self.envvar(field.name)
            if value is None and variable in environ:
                try:
                    value = _parser(hints[field.name], variable)(environ[variable])
                except argparse.ArgumentTypeError as error:
                    raise SettingsError(str(error)) from error
            if value is not None:
                kwargs[field.name] = value
        try:
            return self.cls(**kwargs)
        except ValueError as error:
            raise SettingsError(str(error)) from error


def _unwrap(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def _parser(hint: Any, name: str) -> Callable[[str], Any]:
    hint = _unwrap(hint)
    if typing.get_origin(hint) is tuple:
        return lambda text: tuple(item.strip() for item in text.split(",") if item.strip())
    convert: Callable[[str], Any] = {int: int, float: float, Path: Path}.get(hint, str)

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name}: {text!r} is not a valid {getattr(hint, '__name__', hint)}") from None

    return parse


def _metavar(hint: Any) -> str:
    hint = _unwrap(hint)
    if typing.get_origin(hint) is tuple:
        return "A,B,..."
    return {int: "N", float: "NUMBER", Path: "DIR"}.get(hint, "TEXT")


def _shown(default: Any) -> Any:
    if isinstance(default, tuple):
        return ",".join(str(item) for item in default)
    if default is dataclasses.MISSING:
        return None
    return default
