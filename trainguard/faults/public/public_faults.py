"""Public fault codes and their configuration, in the original's formats (SPEC D8, NOTES §2.6).

Public faults are reported by senders that are not ours (a network manager, a storage client,
an online diagnosis). Each carries a 9-digit code::

    digit 1     fault type: 0 chip, 1 node, 2 network, 3 storage
    digit 2     default level: 0 NotHandleFault, 1 SubHealthFault, 2 SeparateNPU
    digits 3-4  reserved, "00" for now
    digit 5     0 defined by the release, 1 user-defined (so users' codes never clash with ours)
    digits 6-9  the fault's decimal number

The level a code is handled at comes from ``publicFaultConfiguration.json``: a code's list there
wins over its digit 2, which is only the level the code was released with (the shipped file puts
``110001022`` and ``110001023``, digit 2 SubHealthFault, in ``PreSeparateNPUCodes``), so a
disagreement is not reported. A code in several lists takes the most serious one, as the
original does. A code in no list is unknown, and faults carrying it are dropped.

``publicCustomization.json`` replaces the system file as a whole (reading the files, and
refusing a symbolic link, is :mod:`trainguard.controller.fault_config`'s). Its lists are checked as
the system file's are: an entry that is not a well-formed code is skipped and reported; a file
whose shape is wrong (not an object, a section missing or of the wrong type) is refused as a
whole, as the original's parser refuses it.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
from collections.abc import Mapping
from importlib import resources

from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.levels import Level

__all__ = [
    "BUILTIN_MEANINGS",
    "SYSTEM_FILE_NAME",
    "PublicCode",
    "PublicCodeType",
    "PublicFaultConfig",
]


SYSTEM_FILE_NAME = "publicFaultConfiguration.json"

_DECIMAL = frozenset("0123456789")
_DEFAULT_LEVELS = (Level.NOT_HANDLE_FAULT, Level.SUB_HEALTH_FAULT, Level.SEPARATE_NPU)
"""Digit 2 of a code, as an index."""


class PublicCodeType(enum.IntEnum):
    """Digit 1 of a public fault code: which part of the cluster is at fault."""

    CHIP = 0
    NODE = 1
    NETWORK = 2
    STORAGE = 3


@dataclasses.dataclass(frozen=True)
class PublicCode:
    """A public fault code's digits; ``str()`` gives the 9-digit code back."""

    fault_type: PublicCodeType
    default_level: Level
    """The level the code was released with; the configuration may move it to another."""
    reserved: str
    """Digits 3-4. Any two digits are accepted, so that codes of a later release that uses
    them are not dropped; they are kept so that the code reads back unchanged."""
    user_defined: bool
    number: int
    """0..9999."""

    def __post_init__(self) -> None:
        if self.default_level not in _DEFAULT_LEVELS:
            raise ValueError(f"default_level {self.default_level} is not a level digit 2 can "
                             f"give; it must be one of {', '.join(_DEFAULT_LEVELS)}")
        if len(self.reserved) != 2 or not set(self.reserved) <= _DECIMAL:
            raise ValueError(f"reserved {self.reserved!r} must be two decimal digits")
        if not 0 <= self.number <= 9999:
            raise ValueError(f"number {self.number} must be in 0..9999")

    @classmethod
    def parse(cls, text: str) -> PublicCode:
        """Read a 9-digit code.

        Raises:
            ValueError: the text is not 9 decimal digits, or digit 1, 2 or 5 has a value the
                layout does not define; the message names the digit.
        """
        if len(text) != 9:
            raise ValueError(f"public fault code {text!r} has {len(text)} characters; it must "
                             "have 9 digits")
        for position, character in enumerate(text, start=1):
            if character not in _DECIMAL:
                raise ValueError(f"public fault code {text!r}: digit {position} is "
                                 f"{character!r}, not a decimal digit")
        if text[0] not in "0123":
            raise ValueError(f"public fault code {text!r}: digit 1 (fault type) is {text[0]}; "
                             "it must be 0 chip, 1 node, 2 network or 3 storage")
        if text[1] not in "012":
            raise ValueError(f"public fault code {text!r}: digit 2 (default level) is "
                             f"{text[1]}; it must be 0 NotHandleFault, 1 SubHealthFault or "
                             "2 SeparateNPU")
        if text[4] not in "01":
            raise ValueError(f"public fault code {text!r}: digit 5 (user-defined) is "
                             f"{text[4]}; it must be 0 (defined by the release) or 1 "
                             "(user-defined)")
        return cls(fault_type=PublicCodeType(int(text[0])),
                   default_level=_DEFAULT_LEVELS[int(text[1])], reserved=text[2:4],
                   user_defined=text[4] == "1", number=int(text[5:]))

    def __str__(self) -> str:
        return (f"{self.fault_type.value}{_DEFAULT_LEVELS.index(self.default_level)}"
                f"{self.reserved}{int(self.user_defined)}{self.number:04d}")


BUILTIN_MEANINGS: Mapping[str, str] = {
    "010001001": "Dirty optical link (chip fault)",
    "210001007": "Dirty optical link (network fault)",
    "220001001": "HCCS network fault of an NPU card",
    "010001004": "Loose optical link (chip fault)",
    "210001008": "Loose optical link (network fault)",
    "310001005": "DPC storage client failed",
    "200001006": "Optical link suspected sub-healthy",
    "210001009": "Optical module sub-healthy",
    "220001002": "Backup super node: a backup chassis resource that does not exist was "
                 "scheduled",
    "220001003": "Port fault on a backup chassis resource",
    "220001004": "Task ID conflict on a backup chassis",
    "220001005": "NetMind failed",
    "220001006": "Backup chassis link ports suspected partly failed",
    "220001007": "Optical link adjustment failed",
}
"""The 14 public faults the release supports (seed table 5), by code."""

_CODE_LISTS = (
    (Level.SEPARATE_NPU, "SeparateNPUCodes"),
    (Level.PRE_SEPARATE_NPU, "PreSeparateNPUCodes"),
    (Level.SUB_HEALTH_FAULT, "SubHealthFaultCodes"),
    (Level.NOT_HANDLE_FAULT, "NotHandleFaultCodes"),
)
"""The lists of ``publicFaultCode``, most serious first."""
_CODES_KEY = "publicFaultCode"
_RESOURCES_KEY = "publicFaultResource"


@dataclasses.dataclass(frozen=True)
class PublicFaultConfig:
    """A loaded public fault configuration: each known code's level, and the allowed senders."""

    levels: Mapping[str, Level]
    """Each known code's level; a code in several lists has the most serious of them."""
    resources: frozenset[str]
    """The senders (a message's ``resource``) whose messages are accepted."""
    sources: Mapping[str, str]
    """The list each code's level was taken from, e.g.
    ``"publicFaultConfiguration.json SeparateNPUCodes"``."""

    def level_of(self, code: str) -> Level | None:
        """The level faults with this code are handled at; ``None`` for an unknown code."""
        return self.levels.get(code)

    @classmethod
    def from_document(cls, document: object, *, file: str
                      ) -> tuple[PublicFaultConfig, list[ConfigProblem]]:
        """Read a parsed configuration file; entries that are not codes are skipped and reported.

        Raises:
            ValueError: the document is not the file's shape (not an object, or
                ``publicFaultCode`` / ``publicFaultResource`` or one of the lists missing where
                required or of the wrong type); the message names the key.
        """
        if not isinstance(document, dict):
            raise ValueError(f"{file}: the file is not a JSON object")
        for key in (_CODES_KEY, _RESOURCES_KEY):
            if key not in document:
                raise ValueError(f"{file}: {key} is missing")
        code_lists = document[_CODES_KEY]
        if not isinstance(code_lists, dict):
            raise ValueError(f"{file}: {_CODES_KEY} is not an object")
        senders = document[_RESOURCES_KEY]
        if not isinstance(senders, list):
            raise ValueError(f"{file}: {_RESOURCES_KEY} is not a list")
        problems = [ConfigProblem(file, str(key), "", f"not a key of the file (known: "
                                  f"{_CODES_KEY}, {_RESOURCES_KEY})", Action.IGNORED)
                    for key in document if key not in (_CODES_KEY, _RESOURCES_KEY)]
        known = [name for _, name in _CODE_LISTS]
        problems += [ConfigProblem(file, f"{_CODES_KEY}.{key}", "", f"not a list of public "
                                   f"fault codes (known: {', '.join(known)})", Action.IGNORED)
                     for key in code_lists if key not in known]
        levels: dict[str, Level] = {}
        sources: dict[str, str] = {}
        for level, name in _CODE_LISTS:
            entries = code_lists.get(name, [])
            if not isinstance(entries, list):
                raise ValueError(f"{file}: {_CODES_KEY}.{name} is not a list")
            for entry in entries:
                problem = _code_problem(entry)
                if problem:
                    problems.append(ConfigProblem(file, f"{_CODES_KEY}.{name}", repr(entry),
                                                  problem, Action.IGNORED))
                    continue
                code = str(entry)
                if code not in levels:
                    levels[code] = level
                    sources[code] = f"{file} {name}"
                elif levels[code] is not level:
                    problems.append(ConfigProblem(
                        file, f"{_CODES_KEY}.{name}", code, f"also listed as {levels[code]}; "
                        "the more serious level is kept", Action.IGNORED))
        allowed: set[str] = set()
        for sender in senders:
            if isinstance(sender, str) and sender:
                allowed.add(sender)
            else:
                problems.append(ConfigProblem(file, _RESOURCES_KEY, repr(sender),
                                              "a sender must be a non-empty string",
                                              Action.IGNORED))
        return cls(types.MappingProxyType(levels), frozenset(allowed),
                   types.MappingProxyType(sources)), problems

    @classmethod
    def default(cls) -> PublicFaultConfig:
        """The configuration shipped with trainguard: the original's system file, unchanged."""
        return _default()


def _code_problem(entry: object) -> str:
    """Why a list entry is not a public fault code; ``""`` when it is one."""
    if not isinstance(entry, str):
        return "a code must be a string of 9 digits"
    try:
        PublicCode.parse(entry)
    except ValueError as error:
        return str(error)
    return ""


@functools.cache
def _default() -> PublicFaultConfig:
    data = resources.files("trainguard.faults").joinpath("data")
    text = data.joinpath(SYSTEM_FILE_NAME).read_text(encoding="utf-8")
    return PublicFaultConfig.from_document(json.loads(text), file=SYSTEM_FILE_NAME)[0]
