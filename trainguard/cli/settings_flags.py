"""Command-line options derived from settings dataclasses: one flag per field, one name each.

``HeartbeatSettings.floor`` with prefix ``heartbeat-`` becomes ``--heartbeat-floor`` with the
environment fallback ``TRAINGUARD_HEARTBEAT_FLOOR`` and the configuration file key
``heartbeat-floor``; its help is the field's attribute docstring and its default the dataclass
default, so defaults live in one place only. Precedence: default < file < environment < flag.
A float field whose docstring says "seconds" is a duration and takes units (``30s``, ``10m``;
:mod:`trainguard.cli.durations`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import itertools
import os
import re
import textwrap
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainguard.cli import durations

__all__ = ["SettingsError", "SettingsGroup", "Source", "attribute_docs", "file_text"]


class SettingsError(ValueError):
    """A value that breaks a settings rule; the message names the flag or variable."""


class Source(enum.StrEnum):
    """Where an effective value came from, weakest first."""

    DEFAULT = "default"
    FILE = "file"
    ENV = "env"
    FLAG = "flag"


def file_text(value: object) -> str:
    """A configuration file's value as the text a flag would carry: lists joined by commas."""
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


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

    def key_of(self, field: str) -> str:
        """The field's key in a configuration file: its flag without the dashes."""
        return self.flag(field)[2:]

    def file_keys(self) -> dict[str, str]:
        """Configuration file key -> field name."""
        return {self.key_of(field.name): field.name for field in self._fields()}

    def environment(self) -> set[str]:
        return {self.envvar(field.name) for field in self._fields()}

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        docs = attribute_docs(self.cls)
        for field in self._fields():
            shown = _shown(field.default)
            default = f"default: {shown}; " if shown not in (None, "") else ""
            kind = self._kind(field.name, docs)
            group.add_argument(
                self.flag(field.name), dest=f"{self.key}__{field.name}", default=None,
                type=_parser(kind, self.flag(field.name)), metavar=_metavar(kind),
                help=f"{docs.get(field.name, '')} [{default}env {self.envvar(field.name)}]")

    def _kind(self, field: str, docs: Mapping[str, str]) -> Any:
        """The field's type, with :data:`DURATION` for float seconds."""
        hint = _unwrap(typing.get_type_hints(self.cls)[field])
        if hint is float and re.search(r"\bseconds\b", docs.get(field, ""), re.IGNORECASE):
            return DURATION
        return hint

    def resolve(self, values: Mapping[str, Any], *, environ: Mapping[str, str] = os.environ,
                file: Mapping[str, Any] | None = None, file_name: str = "config"
                ) -> dict[str, tuple[Any, Source]]:
        """Each field's effective value and its source: flag, else environment, else the
        configuration file (keys as :meth:`key_of`), else the default.

        Raises:
            SettingsError: a value is malformed; the message names the variable or key.
        """
        docs = attribute_docs(self.cls)
        file = file or {}
        resolved: dict[str, tuple[Any, Source]] = {}
        for field in self._fields():
            value = values.get(f"{self.key}__{field.name}")
            variable, key = self.envvar(field.name), self.key_of(field.name)
            kind = self._kind(field.name, docs)
            try:
                if value is not None:
                    resolved[field.name] = (value, Source.FLAG)
                elif variable in environ:
                    resolved[field.name] = (_parser(kind, variable)(environ[variable]),
                                            Source.ENV)
                elif key in file:
                    resolved[field.name] = (_parser(kind, f"{file_name}: {key}")(
                        file_text(file[key])), Source.FILE)
                else:
                    resolved[field.name] = (_default(field), Source.DEFAULT)
            except argparse.ArgumentTypeError as error:
                raise SettingsError(str(error)) from error
        return resolved

    def build(self, values: Mapping[str, Any], *, environ: Mapping[str, str] = os.environ,
              file: Mapping[str, Any] | None = None, file_name: str = "config",
              **extra: Any) -> Any:
        """The settings object from :meth:`resolve`'s values (plus ``extra``).

        Raises:
            SettingsError: a value is malformed or breaks the field's rule.
        """
        kwargs = dict(extra)
        resolved = self.resolve(values, environ=environ, file=file, file_name=file_name)
        for name, (value, source) in resolved.items():
            if source is not Source.DEFAULT:
                kwargs[name] = value
        try:
            return self.cls(**kwargs)
        except ValueError as error:
            raise SettingsError(str(error)) from error


class _Duration:
    """Marks a float field that holds seconds (see the module docstring)."""


DURATION = _Duration()


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def _unwrap(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def _parser(hint: Any, name: str) -> Callable[[str], Any]:
    if typing.get_origin(hint) is tuple:
        return lambda text: tuple(item.strip() for item in text.split(",") if item.strip())
    if hint is DURATION:
        def duration(text: str) -> float:
            try:
                return durations.parse_duration(text)
            except ValueError as error:
                raise argparse.ArgumentTypeError(f"{name}: {error}") from None

        return duration
    convert: Callable[[str], Any] = {int: int, float: float, Path: Path}.get(hint, str)

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name}: {text!r} is not a valid {getattr(hint, '__name__', hint)}") from None

    return parse


def _metavar(hint: Any) -> str:
    if typing.get_origin(hint) is tuple:
        return "A,B,..."
    if hint is DURATION:
        return "DURATION"
    return {int: "N", float: "NUMBER", Path: "DIR"}.get(hint, "TEXT")


def _shown(default: Any) -> Any:
    if isinstance(default, tuple):
        return ",".join(str(item) for item in default)
    if default is dataclasses.MISSING:
        return None
    return default
