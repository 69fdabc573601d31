"""The fault configuration files an operator brings, read from a directory and re-read on change.

The files and their formats are the original's, unchanged (NOTES §2): ``faultCode.json``,
``faultCustomization.json``, ``SwitchFaultCode.json``, ``NodeDConfiguration.json``,
``publicFaultConfiguration.json`` (overridden by ``publicCustomization.json``), and the
controller's fault centre's ``relationFaultCustomization.json``, ``faultDuration.json`` and
``manually_separate_policy.conf`` (YAML, as ClusterD's ConfigMap holds it). A file that is
absent takes our shipped default, which is the original's. A bad entry is skipped or defaulted
as the original does, and reported. A file that cannot be used at all (unreadable, not JSON, a
symbolic link where one is refused) is reported too: at start it takes the default; later the
last good configuration stays in force, so a bad edit never stops a running job.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from trainguard.controller.fault_centre import relation_config
from trainguard.controller.fault_centre.separation_policy import SeparationPolicy
from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.device import customization, fault_codes
from trainguard.faults.node import node_faults, switch_faults
from trainguard.faults.public import public_faults

__all__ = ["ConfigKind", "FaultConfig", "FaultConfigDirectory", "kind_of", "parse_file"]


class ConfigKind(enum.StrEnum):
    """A configuration file, by its name in the original."""

    FAULT_CODE = "faultCode.json"
    FAULT_CUSTOMIZATION = "faultCustomization.json"
    SWITCH_FAULT_CODE = "SwitchFaultCode.json"
    NODED_CONFIGURATION = "NodeDConfiguration.json"
    PUBLIC_FAULT_CONFIGURATION = "publicFaultConfiguration.json"
    PUBLIC_CUSTOMIZATION = "publicCustomization.json"
    RELATION_FAULTS = relation_config.RULES_FILE
    FAULT_DURATION = relation_config.DURATION_FILE
    SEPARATION_POLICY = "manually_separate_policy.conf"


def kind_of(path: Path) -> ConfigKind | None:
    """The kind of a file from its name; None for a name the original does not use."""
    try:
        return ConfigKind(path.name)
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class FaultConfig:
    """Every fault table in force."""

    codes: fault_codes.CodeTable = dataclasses.field(default_factory=fault_codes.default_table)
    customization: customization.Customization = dataclasses.field(
        default_factory=customization.default_customization)
    switch: switch_faults.SwitchCodeTable = dataclasses.field(
        default_factory=switch_faults.default_switch_table)
    node: node_faults.NodeCodeTable = dataclasses.field(
        default_factory=node_faults.default_node_table)
    public: public_faults.PublicFaultConfig = dataclasses.field(
        default_factory=public_faults.PublicFaultConfig.default)
    relation_rules: tuple[relation_config.RelationRule, ...] = relation_config.RelationConfig(
        ).rules
    relation_timeouts: tuple[relation_config.RelationTimeout, ...] = (
        relation_config.RelationConfig().timeouts)
    separation: SeparationPolicy = dataclasses.field(default_factory=SeparationPolicy)

    @property
    def relation(self) -> relation_config.RelationConfig:
        """The fault centre's relation rules and their timeouts, from their two files."""
        return relation_config.RelationConfig(self.relation_rules, self.relation_timeouts)


def _public(document: object, file: str
            ) -> tuple[public_faults.PublicFaultConfig | None, list[ConfigProblem]]:
    """A public fault file whose shape is wrong is refused as a whole, as the original does."""
    try:
        return public_faults.PublicFaultConfig.from_document(document, file=file)
    except ValueError as error:
        message = str(error).removeprefix(f"{file}: ")
        return None, [ConfigProblem(file, "", "", message, Action.IGNORED)]


def _with_gpu_codes(loaded: tuple[fault_codes.CodeTable, list[ConfigProblem]]
                    ) -> tuple[fault_codes.CodeTable, list[ConfigProblem]]:
    """An operator's faultCode.json, with our GPU codes where it says nothing of them."""
    table, problems = loaded
    return table.merged(fault_codes.gpu_table()), problems


_Parser = Callable[[object, str], tuple[Any, list[ConfigProblem]]]
_PARSERS: dict[ConfigKind, _Parser] = {
    ConfigKind.FAULT_CODE: lambda document, file: _with_gpu_codes(
        fault_codes.CodeTable.from_document(document, file=file)),
    ConfigKind.FAULT_CUSTOMIZATION: lambda document, file: (
        customization.Customization.from_document(document, file=file)),
    ConfigKind.SWITCH_FAULT_CODE: lambda document, file: (
        switch_faults.SwitchCodeTable.from_document(document, file=file)),
    ConfigKind.NODED_CONFIGURATION: lambda document, file: (
        node_faults.NodeCodeTable.from_document(document, file=file)),
    ConfigKind.PUBLIC_FAULT_CONFIGURATION: _public,
    ConfigKind.PUBLIC_CUSTOMIZATION: _public,
    ConfigKind.RELATION_FAULTS: lambda document, file: relation_config.rules_from_document(
        document, file=file),
    ConfigKind.FAULT_DURATION: lambda document, file: relation_config.timeouts_from_document(
        document, file=file),
    ConfigKind.SEPARATION_POLICY: lambda document, file: SeparationPolicy.from_document(
        document, file=file),
}
_LISTS = frozenset({ConfigKind.RELATION_FAULTS, ConfigKind.FAULT_DURATION})
"""The kinds whose document is a list, not an object."""


def parse_file(path: Path, kind: ConfigKind) -> tuple[Any | None, list[ConfigProblem]]:
    """The loaded configuration of one file, or None when the file cannot be used at all."""
    file = str(path)
    if kind is ConfigKind.PUBLIC_CUSTOMIZATION and path.is_symlink():
        return None, [ConfigProblem(file, "", "", "a symbolic link is refused for "
                                    "publicCustomization.json", Action.IGNORED)]
    language = "YAML" if kind is ConfigKind.SEPARATION_POLICY else "JSON"
    try:
        text = path.read_text(encoding="utf-8")
        document = yaml.safe_load(text) if language == "YAML" else json.loads(text)
    except OSError as error:
        return None, [ConfigProblem(file, "", "", f"cannot be read ({error.strerror})",
                                    Action.IGNORED)]
    except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as error:
        return None, [ConfigProblem(file, "", "", f"not valid {language} ({_said(error)})",
                                    Action.IGNORED)]
    expected = (list, "a JSON list") if kind in _LISTS else (dict, f"a {language} mapping")
    if not isinstance(document, expected[0]):
        return None, [ConfigProblem(file, "", "", f"not {expected[1]}", Action.IGNORED)]
    return _PARSERS[kind](document, file)


def _said(error: Exception) -> str:
    """A parser's error on one line (YAML's span several, with the text quoted)."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"{error.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return str(error)


_FIELDS: dict[str, tuple[ConfigKind, ...]] = {
    "codes": (ConfigKind.FAULT_CODE,),
    "customization": (ConfigKind.FAULT_CUSTOMIZATION,),
    "switch": (ConfigKind.SWITCH_FAULT_CODE,),
    "node": (ConfigKind.NODED_CONFIGURATION,),
    "public": (ConfigKind.PUBLIC_CUSTOMIZATION, ConfigKind.PUBLIC_FAULT_CONFIGURATION),
    "relation_rules": (ConfigKind.RELATION_FAULTS,),
    "relation_timeouts": (ConfigKind.FAULT_DURATION,),
    "separation": (ConfigKind.SEPARATION_POLICY,),
}
"""Each configuration in force, and the files it comes from, the first present one winning."""


class FaultConfigDirectory:
    """The configuration files of one directory, re-read when one changes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.config = FaultConfig()
        self._seen: dict[ConfigKind, tuple[int, ...] | None] = {}

    def _signature(self, kind: ConfigKind) -> tuple[int, ...] | None:
        """The file and, for a symbolic link (a mounted ConfigMap's files are links, and an
        update swaps their target), the link too."""
        path = self.directory / kind
        try:
            link = os.lstat(path)
        except FileNotFoundError:
            return None
        try:
            target = os.stat(path)
        except OSError:  # a dangling link
            return link.st_mtime_ns, link.st_ino
        return (link.st_mtime_ns, link.st_ino, target.st_mtime_ns, target.st_size,
                target.st_ino)

    def poll(self) -> tuple[bool, list[ConfigProblem]]:
        """Re-read what changed since the last poll (everything, the first time): whether the
        configuration in force changed, and the problems found (the caller shows them)."""
        first = not self._seen
        touched = set()
        for kind in ConfigKind:
            signature = self._signature(kind)
            if first or self._seen.get(kind) != signature:
                self._seen[kind] = signature
                touched.add(kind)
        values: dict[str, Any] = {}
        problems: list[ConfigProblem] = []
        for field, kinds in _FIELDS.items():
            if touched.isdisjoint(kinds):
                continue
            value = self._load(kinds, first=first, problems=problems)
            if value is not None:
                values[field] = value
        self.config = dataclasses.replace(self.config, **values)
        return bool(values) and not first, problems

    def _load(self, kinds: tuple[ConfigKind, ...], *, first: bool,
              problems: list[ConfigProblem]) -> Any | None:
        """The first present file's configuration; the default when none is present; None to
        keep what is in force (a file that cannot be used, while running)."""
        for kind in kinds:
            if self._seen[kind] is None:
                continue
            loaded, found = parse_file(self.directory / kind, kind)
            if loaded is not None:
                problems.extend(found)
                return loaded
            action = Action.DEFAULT_USED if first else Action.KEPT_LAST_GOOD
            problems.extend(dataclasses.replace(problem, action=action) for problem in found)
            if not first:
                return None
        return getattr(FaultConfig(), _field_of(kinds[0]))


def _field_of(kind: ConfigKind) -> str:
    return next(field for field, kinds in _FIELDS.items() if kind in kinds)
