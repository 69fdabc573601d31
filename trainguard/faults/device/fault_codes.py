"""Device fault codes and their levels, in the original's ``faultCode.json`` format (NOTES §2.2).

A file maps level-named lists (``SeparateNPUCodes``, ...) to codes. Codes are hexadecimal event
ids: ``"80e01801"`` and ``"80E01801"`` are one code, and the spelling first configured is kept
for display, so ``"020001002"`` keeps its leading zero. Codes with a character that is not a hex
digit (our GPU codes, ``"XID-79"``) are compared case-insensitively as text.

The level of a set of codes follows the original exactly:

* network codes (link down of the parameter plane) are set apart and judged on their own;
* the chip level is the first list, in severity order, that shares any code with the set;
  unknown codes are ignored when another code matches;
* when none matches, a code whose reported severity is above Minor, or unknown, makes the chip
  ``SeparateNPU``; otherwise ``NotHandleFault``. No code at all is ``NormalNPU``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import string
from collections.abc import Iterable, Mapping
from importlib import resources

from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.levels import SEVERITY, Level

__all__ = [
    "LINK_DOWN",
    "NETWORK_CODES",
    "CodeKey",
    "CodeTable",
    "Severity",
    "code_key",
    "default_table",
    "gpu_table",
    "is_code",
    "spell",
]

CodeKey = int | str
"""A code's identity: its value for a hex code, its upper-cased text otherwise."""

_HEX = frozenset(string.hexdigits)
_CODE_CHARACTERS = frozenset(string.ascii_letters + string.digits + "-_")


def is_code(text: str) -> bool:
    return 0 < len(text) <= 32 and set(text) <= _CODE_CHARACTERS


@functools.lru_cache(maxsize=4096)
def code_key(text: str) -> CodeKey:
    """``"80e01801"`` -> ``0x80E01801``; ``"xid-79"`` -> ``"XID-79"``. Cached: devices report
    few distinct codes, and every event is keyed."""
    text = text.strip()
    if text and set(text) <= _HEX:
        return int(text, 16)
    return text.upper()


def spell(key: CodeKey) -> str:
    """How a code is shown when no spelling was configured: upper-case hex, 8 digits."""
    return f"{key:08X}" if isinstance(key, int) else key


class Severity(enum.IntEnum):
    """The severity a device reports with a fault (DCMI's enum)."""

    SUGGESTION = 0
    MINOR = 1
    MAJOR = 2
    CRITICAL = 3


_CHIP_LISTS = (
    (Level.SEPARATE_NPU, "SeparateNPUCodes"),
    (Level.PRE_SEPARATE_NPU, "PreSeparateNPUCodes"),
    (Level.RESTART_NPU, "RestartNPUCodes"),
    (Level.FREE_RESTART_NPU, "FreeRestartNPUCodes"),
    (Level.RESTART_BUSINESS, "RestartBusinessCodes"),
    (Level.RESTART_REQUEST, "RestartRequestCodes"),
    (Level.SUB_HEALTH_FAULT, "SubHealthFaultCodes"),
    (Level.NOT_HANDLE_FAULT, "NotHandleFaultCodes"),
)
"""The chip lists in the order a set of codes is matched against them."""
_NETWORK_LISTS = (
    (Level.SEPARATE_NPU, "SeparateNPUNetworkCodes"),
    (Level.PRE_SEPARATE_NPU, "PreSeparateNPUNetworkCodes"),
    (Level.SUB_HEALTH_FAULT, "SubHealthFaultNetworkCodes"),
    (Level.NOT_HANDLE_FAULT, "NotHandleFaultNetworkCodes"),
)
NETWORK_CODES = frozenset({0x81078603, 0x81078607, 0x110000002, 0x110001024})
"""Parameter-plane network codes: RoCE link down, UBOE port down, UBOE sub-health and
pre-separate. They are judged apart from the chip's codes."""
LINK_DOWN = 0x81078603
_NETWORK_KEEPS = frozenset({Level.NOT_HANDLE_FAULT, Level.PRE_SEPARATE_NPU, Level.SEPARATE_NPU,
                            Level.SUB_HEALTH_FAULT})
_LINK_DOWN_KEEPS = frozenset({Level.NOT_HANDLE_FAULT, Level.PRE_SEPARATE_NPU, Level.SEPARATE_NPU})


@dataclasses.dataclass(frozen=True)
class CodeTable:
    """A loaded ``faultCode.json``: chip codes and network codes by level."""

    chip: Mapping[CodeKey, Level]
    """Each chip code's level; a code in two lists has the more serious one."""
    network: Mapping[CodeKey, Level]
    spellings: Mapping[CodeKey, str]
    sources: Mapping[CodeKey, str]
    """The list each code was taken from, e.g. ``"faultCode.json SeparateNPUCodes"``."""

    @classmethod
    def from_document(cls, document: object, *, file: str = "faultCode.json"
                      ) -> tuple[CodeTable, list[ConfigProblem]]:
        """Read a parsed ``faultCode.json``; bad entries are skipped and reported."""
        problems: list[ConfigProblem] = []
        if not isinstance(document, dict):
            problems.append(ConfigProblem(file, "", "", "the file is not a JSON object",
                                          Action.IGNORED))
            return cls({}, {}, {}, {}), problems
        known = {name for _, name in _CHIP_LISTS + _NETWORK_LISTS}
        for name in document:
            if name not in known:
                problems.append(ConfigProblem(file, str(name), "", "not a list of fault codes "
                                              f"(known: {', '.join(sorted(known))})",
                                              Action.IGNORED))
        chip: dict[CodeKey, Level] = {}
        network: dict[CodeKey, Level] = {}
        spellings: dict[CodeKey, str] = {}
        sources: dict[CodeKey, str] = {}
        for listed, name in _NETWORK_LISTS:
            for key, text in _codes(document, name, file, problems):
                spellings.setdefault(key, text)
                level = _allowed(key, text, listed, name, file=file, problems=problems)
                if key not in network:
                    network[key] = level
                    sources[key] = f"{file} {name}"
                elif network[key] is not level:
                    problems.append(ConfigProblem(
                        file, name, text, f"also listed as {network[key]}; the more serious "
                        "level is kept", Action.IGNORED))
        for level, name in _CHIP_LISTS:
            for key, text in _codes(document, name, file, problems):
                spellings.setdefault(key, text)
                if key in NETWORK_CODES or key in network:
                    _add_network(key, text, level, name, network=network, sources=sources,
                                 file=file, problems=problems)
                elif key in chip:
                    if chip[key] is not level:
                        problems.append(ConfigProblem(
                            file, name, text, f"also listed as {chip[key]}; the more serious "
                            "level is kept", Action.IGNORED))
                else:
                    chip[key] = level
                    sources[key] = f"{file} {name}"
        return cls(chip, network, spellings, sources), problems

    def merged(self, other: CodeTable) -> CodeTable:
        """This table with ``other``'s codes added where this one has none."""
        return CodeTable({**other.chip, **self.chip}, {**other.network, **self.network},
                         {**other.spellings, **self.spellings}, {**other.sources, **self.sources})

    def is_network(self, key: CodeKey) -> bool:
        return key in NETWORK_CODES or key in self.network

    def spelling(self, key: CodeKey) -> str:
        return self.spellings.get(key) or spell(key)

    def chip_level(self, codes: Iterable[CodeKey],
                   severities: Mapping[CodeKey, Severity] | None = None) -> Level:
        """The level of a chip's current codes (network codes are left out)."""
        codes = [code for code in codes if not self.is_network(code)]
        if not codes:
            return Level.NORMAL_NPU
        matched = [self.chip[code] for code in codes if code in self.chip]
        if matched:
            return max(matched, key=lambda level: level.severity)
        severities = severities or {}
        for code in codes:
            severity = severities.get(code)
            if severity is None or severity > Severity.MINOR:
                return Level.SEPARATE_NPU
        return Level.NOT_HANDLE_FAULT

    def level_of(self, code: CodeKey) -> Level:
        """One code's level, as a chip code or as a network code."""
        return self.network_level([code]) if self.is_network(code) else self.chip_level([code])

    def network_level(self, codes: Iterable[CodeKey]) -> Level:
        """The level of a chip's current network codes; an unlisted one is PreSeparateNPU."""
        codes = [code for code in codes if self.is_network(code)]
        if not codes:
            return Level.NORMAL_NETWORK
        return max((self.network.get(code, Level.PRE_SEPARATE_NPU) for code in codes),
                   key=lambda level: level.severity)


def _codes(document: dict[str, object], name: str, file: str,
           problems: list[ConfigProblem]) -> Iterable[tuple[CodeKey, str]]:
    entries = document.get(name, [])
    if not isinstance(entries, list):
        problems.append(ConfigProblem(file, name, "", "not a list", Action.IGNORED))
        return
    for entry in entries:
        if not isinstance(entry, str) or not is_code(entry.strip()):
            problems.append(ConfigProblem(file, name, repr(entry), "not a fault code (hex "
                                          "digits, or letters, digits, '-' and '_')",
                                          Action.IGNORED))
            continue
        yield code_key(entry), entry.strip()


def _add_network(key: CodeKey, text: str, level: Level, name: str, *,
                 network: dict[CodeKey, Level], sources: dict[CodeKey, str], file: str,
                 problems: list[ConfigProblem]) -> None:
    """A network code in a chip list keeps its level only where a network level exists."""
    level = _allowed(key, text, level, name, file=file, problems=problems)
    current = network.get(key)
    if current is not None and current is not level:
        kept = max(current, level, key=SEVERITY.__getitem__)
        problems.append(ConfigProblem(
            file, name, text, f"also listed as {current}; the more serious level ({kept}) is "
            "kept", Action.IGNORED))
    if current is None or level.severity > current.severity:
        network[key] = level
        sources[key] = f"{file} {name}"


def _allowed(key: CodeKey, text: str, level: Level, name: str, *, file: str,
             problems: list[ConfigProblem]) -> Level:
    """The level a network code may have: NotHandleFault instead of a restart level, and link
    down only NotHandleFault, PreSeparateNPU or SeparateNPU (the seed)."""
    keeps = _LINK_DOWN_KEEPS if key == LINK_DOWN else _NETWORK_KEEPS
    if level in keeps:
        return level
    problems.append(ConfigProblem(
        file, name, text, f"a network code cannot be {level}; it is NotHandleFault",
        Action.REPLACED))
    return Level.NOT_HANDLE_FAULT


def _shipped(name: str) -> CodeTable:
    text = resources.files("trainguard.faults").joinpath("data", name).read_text()
    return CodeTable.from_document(json.loads(text), file=name)[0]


@functools.cache
def gpu_table() -> CodeTable:
    """Our NVIDIA GPU codes (``gpuFaultCode.json``), which the original's table lacks."""
    return _shipped("gpuFaultCode.json")


@functools.cache
def default_table() -> CodeTable:
    """The original's default ``faultCode.json`` with our GPU codes."""
    return _shipped("faultCode.json").merged(gpu_table())
