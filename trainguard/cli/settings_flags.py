"""Command-line options derived from settings dataclasses: one flag per field, one name each.

``HeartbeatSettings.floor`` with prefix ``heartbeat-`` becomes ``--heartbeat-floor`` with the
environment fallback ``TRAINGUARD_HEARTBEAT_FLOOR``; its help is the field's attribute docstring
and its default the dataclass default, so defaults live in one place only.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

__all__ = ["SettingsGroup", "attribute_docs"]


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
    key: str  # the parameter-name prefix that keeps groups apart
    cls: type
    prefix: str = ""
    exclude: frozenset[str] = frozenset()

    def _fields(self) -> list[dataclasses.Field[Any]]:
        return [f for f in dataclasses.fields(self.cls) if f.name not in self.exclude]

    def flag(self, field: str) -> str:
        return "--" + (self.prefix + field).replace("_", "-")

    def options(self) -> list[click.Option]:
        docs = attribute_docs(self.cls)
        hints = typing.get_type_hints(self.cls)
        options = []
        for field in self._fields():
            flag = self.flag(field.name)
            envvar = "TRAINGUARD_" + flag[2:].replace("-", "_").upper()
            default = field.default
            kind = _click_type(hints[field.name])
            options.append(click.Option(
                [flag, f"{self.key}__{field.name}"], type=kind, envvar=envvar,
                default=None if default is None else _shown(default), show_default=True,
                show_envvar=True, help=docs.get(field.name, "")))
        return options

    def build(self, values: Mapping[str, Any], **extra: Any) -> Any:
        """The settings object from parsed values (plus fields the caller sets itself).

        Raises:
            click.BadParameter: a value breaks the field's rule; the message names the flag.
        """
        hints = typing.get_type_hints(self.cls)
        kwargs = dict(extra)
        for field in self._fields():
            value = values.get(f"{self.key}__{field.name}")
            if value is not None:
                kwargs[field.name] = _convert(hints[field.name], value)
        try:
            return self.cls(**kwargs)
        except ValueError as error:
            raise click.UsageError(str(error)) from error


def _unwrap(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def _click_type(hint: Any) -> click.ParamType[Any, Any]:
    hint = _unwrap(hint)
    if hint is Path:
        return click.Path(path_type=Path)
    if hint is int:
        return click.INT
    if hint is float:
        return click.FLOAT
    return click.BOOL if hint is bool else click.STRING


def _shown(default: Any) -> Any:
    if isinstance(default, tuple):
        return ",".join(str(item) for item in default)
    return default


def _convert(hint: Any, value: Any) -> Any:
    hint = _unwrap(hint)
    if typing.get_origin(hint) is tuple:
        return tuple(item.strip() for item in str(value).split(",") if item.strip())
    return value
