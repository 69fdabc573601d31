"""``faultCustomization.json``: grace periods, and the rules that raise a device's level when a
fault repeats (``FaultFrequency``) or lasts (``FaultDuration``) (NOTES §2.3).

The format is the original's, so operators keep their files. Loading never refuses a file; what
is wrong is returned as :class:`~trainguard.faults.config_problems.ConfigProblem` values:

* ``GraceTolerance``: a field missing, not a whole number, or out of range takes its default.
* ``FaultFrequency`` / ``FaultDuration``: a rule with a value out of range, or a missing or
  unknown ``FaultHandling``, is ignored. Data of the wrong type (the section not a list, a rule
  not an object, a number written as text or with a fraction) replaces the whole section by the
  default file's, as the original's documentation prescribes. A missing section has no rules.
* Each event id takes the first valid rule naming it; later rules for it are ignored.
* ``ReleaseTimeWindow`` 0 or absent means "never released automatically", which only a
  ``ManuallySeparateNPU`` rule may have: an operator releases it.
* ``FaultDuration`` cannot be ``ManuallySeparateNPU``; for link down (``81078603``) it can only
  be NotHandleFault, PreSeparateNPU or SeparateNPU, anything else becomes NotHandleFault. An
  absent ``FaultTimeout`` is 20 s for link down, 30 s for ``80E01801`` and 0 otherwise; an absent
  ``RecoverTimeout`` is 60 s for link down and 0 otherwise (the original's documented defaults).

Numbers in the file are whole seconds; rules hold them as float seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping
from importlib import resources
from typing import TypeGuard, TypeVar

from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.device.fault_codes import LINK_DOWN, CodeKey, code_key, is_code
from trainguard.faults.levels import Level

__all__ = ["Customization", "DurationRule", "FrequencyRule", "GraceTolerance",
           "default_customization"]

_UINT32_MAX = 2**32 - 1
_FREQUENCY_HANDLINGS = frozenset(Level) - {Level.NORMAL_NPU, Level.NORMAL_NETWORK}
_DURATION_HANDLINGS = _FREQUENCY_HANDLINGS - {Level.MANUALLY_SEPARATE_NPU}
_LINK_DOWN_HANDLINGS = frozenset({Level.NOT_HANDLE_FAULT, Level.PRE_SEPARATE_NPU,
                                  Level.SEPARATE_NPU})
_DEFAULT_FAULT_TIMEOUT: Mapping[CodeKey, float] = {LINK_DOWN: 20.0, 0x80E01801: 30.0}
_DEFAULT_RECOVER_TIMEOUT: Mapping[CodeKey, float] = {LINK_DOWN: 60.0}
_FREQUENCY_KEYS = ("EventId", "TimeWindow", "Times", "FaultHandling", "ReleaseTimeWindow")
_DURATION_KEYS = ("EventId", "FaultTimeout", "RecoverTimeout", "FaultHandling")


@dataclasses.dataclass(frozen=True)
class GraceTolerance:
    """How long the graceful path waits (seconds)."""

    wait_process_read_cm_time: float = 30.0
    """For the training job to read reset.json; 5..90; the original's default."""
    wait_device_reset_time: float = 150.0
    """For a chip reset to finish; 60..180; a reset takes up to about two minutes."""
    wait_fault_self_healing_time: float = 15.0
    """For a RestartBusiness fault to clear by itself; 1..30; the original's default."""


_GRACE_FIELDS = (("WaitProcessReadCMTime", "wait_process_read_cm_time", 5, 90),
                 ("WaitDeviceResetTime", "wait_device_reset_time", 60, 180),
                 ("WaitFaultSelfHealingTime", "wait_fault_self_healing_time", 1, 30))


@dataclasses.dataclass(frozen=True)
class FrequencyRule:
    """``Times`` occurrences of ``event_id`` within ``time_window`` seconds raise the device to
    ``handling``."""

    event_id: CodeKey
    spelling: str  # as configured; names the code in upgrade reasons
    time_window: float  # seconds
    times: int
    handling: Level
    release_window: float | None  # seconds after the last recovery; None = never automatically


@dataclasses.dataclass(frozen=True)
class DurationRule:
    """``event_id`` lasting more than ``fault_timeout`` seconds raises the device to ``handling``
    until it has been gone more than ``recover_timeout`` seconds."""

    event_id: CodeKey
    spelling: str
    fault_timeout: float
    recover_timeout: float
    handling: Level


@dataclasses.dataclass(frozen=True)
class Customization:
    """A loaded ``faultCustomization.json``; rules by event id."""

    grace: GraceTolerance = dataclasses.field(default_factory=GraceTolerance)
    frequency: Mapping[CodeKey, FrequencyRule] = dataclasses.field(default_factory=dict)
    duration: Mapping[CodeKey, DurationRule] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_document(cls, document: object, *, file: str = "faultCustomization.json"
                      ) -> tuple[Customization, list[ConfigProblem]]:
        """Read a parsed ``faultCustomization.json``; see the module docstring for the rules."""
        return _parse(document, file, default_customization())


class _FormatError(Exception):
    """Data of the wrong type: the section it is in falls back to the default."""

    def __init__(self, entry: str, field: str, message: str) -> None:
        super().__init__(message)
        self.entry, self.field, self.message = entry, field, message


def _parse(document: object, file: str, fallback: Customization | None
           ) -> tuple[Customization, list[ConfigProblem]]:
    problems: list[ConfigProblem] = []
    default = fallback or Customization()
    if not isinstance(document, dict):
        problems.append(ConfigProblem(file, "", "", "the file is not a JSON object",
                                      Action.DEFAULT_USED))
        return default, problems
    _unknown_keys(document, ("GraceTolerance", "FaultFrequency", "FaultDuration"), file, "",
                  problems)
    frequency = _section(document.get("FaultFrequency"), "FaultFrequency", _frequency_rule,
                         default=default.frequency, file=file, problems=problems)
    duration = _section(document.get("FaultDuration"), "FaultDuration", _duration_rule,
                        default=default.duration, file=file, problems=problems)
    grace = _grace(document.get("GraceTolerance"), file, problems)
    return Customization(grace, frequency, duration), problems


def _grace(section: object, file: str, problems: list[ConfigProblem]) -> GraceTolerance:
    if section is None:
        problems.append(ConfigProblem(file, "GraceTolerance", "", "missing; defaults used",
                                      Action.DEFAULT_USED))
        return GraceTolerance()
    if not isinstance(section, dict):
        problems.append(ConfigProblem(file, "GraceTolerance", "", "not an object; defaults used",
                                      Action.DEFAULT_USED))
        return GraceTolerance()
    _unknown_keys(section, [name for name, *_ in _GRACE_FIELDS], file, "GraceTolerance", problems)
    values: dict[str, float] = {}
    for name, attribute, low, high in _GRACE_FIELDS:
        value = section.get(name)
        default = getattr(GraceTolerance, attribute)
        if _is_integer(value) and low <= value <= high:
            values[attribute] = float(value)
            continue
        wrong = "missing" if value is None else f"{value!r} is not a whole number of seconds " \
            f"in {low}..{high}"
        problems.append(ConfigProblem(file, "GraceTolerance", name,
                                      f"{wrong}; the default {default:g} is used",
                                      Action.DEFAULT_USED))
    return GraceTolerance(**values)


_Rule = TypeVar("_Rule", FrequencyRule, DurationRule)
_RuleReader = Callable[[dict[str, object], str, str, list[ConfigProblem]],
                       Callable[[CodeKey, str], _Rule] | None]
"""Checks one rule's values; returns how to make the rule for one event id, None if invalid."""


def _section(entries: object, name: str, read: _RuleReader[_Rule], *,
             default: Mapping[CodeKey, _Rule], file: str, problems: list[ConfigProblem]
             ) -> dict[CodeKey, _Rule]:
    """One rule section; a format error anywhere in it gives the default section."""
    found: list[ConfigProblem] = []
    try:
        rules = _rules(entries, name, read, file, found)
    except _FormatError as error:
        problems.append(ConfigProblem(file, error.entry, error.field, f"{error.message}; the "
                                      f"default {name} section is used", Action.DEFAULT_USED))
        return dict(default)
    problems.extend(found)
    return rules


def _rules(entries: object, name: str, read: _RuleReader[_Rule], file: str,
           problems: list[ConfigProblem]) -> dict[CodeKey, _Rule]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise _FormatError(name, "", "not a list of rules")
    rules: dict[CodeKey, _Rule] = {}
    owners: dict[CodeKey, str] = {}
    for index, entry in enumerate(entries):
        where = f"{name}[{index}]"
        if not isinstance(entry, dict):
            raise _FormatError(where, "", "not an object")
        ids = entry.get("EventId")
        if ids is not None and not (isinstance(ids, list)
                                    and all(isinstance(text, str) for text in ids)):
            raise _FormatError(where, "EventId", "not a list of strings")
        make = read(entry, where, file, problems)
        if not ids:
            problems.append(ConfigProblem(file, where, "EventId", "no event id; the rule is "
                                          "ignored", Action.IGNORED))
            continue
        if make is None:
            continue
        for written in ids:
            text = written.strip()
            if not is_code(text):
                problems.append(ConfigProblem(file, where, "EventId", f"{written!r} is not a "
                                              "fault code", Action.IGNORED))
                continue
            key = code_key(text)
            if key in owners:
                problems.append(ConfigProblem(file, where, "EventId", f"{text} already has a "
                                              f"rule in {owners[key]}", Action.IGNORED))
                continue
            owners[key] = where
            rules[key] = make(key, text)
    return rules


def _frequency_rule(entry: dict[str, object], where: str, file: str,
                    problems: list[ConfigProblem]
                    ) -> Callable[[CodeKey, str], FrequencyRule] | None:
    _unknown_keys(entry, _FREQUENCY_KEYS, file, where, problems)
    bad: list[tuple[str, str]] = []
    window = _whole_number(entry, "TimeWindow", where, (60, 864000), bad)
    times = _whole_number(entry, "Times", where, (1, 100), bad)
    raw_release = entry.get("ReleaseTimeWindow")
    never = raw_release is None or (_is_integer(raw_release) and raw_release == 0)
    release = None if never else _whole_number(entry, "ReleaseTimeWindow", where,
                                               (60, _UINT32_MAX), bad)
    handling = _handling(entry, where, _FREQUENCY_HANDLINGS, bad)
    if never and handling not in (None, Level.MANUALLY_SEPARATE_NPU):
        bad.append(("ReleaseTimeWindow", f"required unless FaultHandling is "
                    f"{Level.MANUALLY_SEPARATE_NPU}: the device would never be released"))
    if _report(bad, file, where, problems) or window is None or times is None \
            or handling is None:
        return None
    return lambda key, text: FrequencyRule(key, text, window, int(times), handling, release)


def _duration_rule(entry: dict[str, object], where: str, file: str,
                   problems: list[ConfigProblem]) -> Callable[[CodeKey, str], DurationRule] | None:
    _unknown_keys(entry, _DURATION_KEYS, file, where, problems)
    bad: list[tuple[str, str]] = []
    fault_timeout = _whole_number(entry, "FaultTimeout", where, (0, 600), bad, required=False)
    recover_timeout = _whole_number(entry, "RecoverTimeout", where, (0, 86400), bad,
                                    required=False)
    handling = _handling(entry, where, _DURATION_HANDLINGS, bad)
    if _report(bad, file, where, problems) or handling is None:
        return None

    def make(key: CodeKey, text: str) -> DurationRule:
        level = handling
        if key == LINK_DOWN and level not in _LINK_DOWN_HANDLINGS:
            problems.append(ConfigProblem(file, where, "FaultHandling", f"link down {text} can "
                                          f"only be {', '.join(sorted(_LINK_DOWN_HANDLINGS))}, "
                                          f"not {level}; {Level.NOT_HANDLE_FAULT} is used",
                                          Action.REPLACED))
            level = Level.NOT_HANDLE_FAULT
        return DurationRule(
            key, text,
            _DEFAULT_FAULT_TIMEOUT.get(key, 0.0) if fault_timeout is None else fault_timeout,
            _DEFAULT_RECOVER_TIMEOUT.get(key, 0.0) if recover_timeout is None else
            recover_timeout, level)
    return make


def _whole_number(entry: dict[str, object], name: str, where: str, bounds: tuple[int, int],
                  bad: list[tuple[str, str]], *, required: bool = True) -> float | None:
    low, high = bounds
    value = entry.get(name)
    if value is None:
        if required:
            bad.append((name, "missing"))
        return None
    if not _is_integer(value):
        raise _FormatError(where, name, f"{value!r} is not a whole number")
    if not low <= value <= high:
        bad.append((name, f"{value} is out of range {low}..{high}"))
        return None
    return float(value)


def _handling(entry: dict[str, object], where: str, allowed: frozenset[Level],
              bad: list[tuple[str, str]]) -> Level | None:
    value = entry.get("FaultHandling")
    if value is None:
        bad.append(("FaultHandling", "missing"))
        return None
    if not isinstance(value, str):
        raise _FormatError(where, "FaultHandling", f"{value!r} is not a string")
    if value not in allowed:
        bad.append(("FaultHandling", f"{value!r} is not one of "
                    f"{', '.join(sorted(allowed))}"))
        return None
    return Level(value)


def _report(bad: list[tuple[str, str]], file: str, where: str,
            problems: list[ConfigProblem]) -> bool:
    for field, message in bad:
        problems.append(ConfigProblem(file, where, field, f"{message}; the rule is ignored",
                                      Action.IGNORED))
    return bool(bad)


def _unknown_keys(mapping: dict[str, object], known: tuple[str, ...] | list[str], file: str,
                  entry: str, problems: list[ConfigProblem]) -> None:
    for name in mapping:
        if name not in known:
            problems.append(ConfigProblem(file, entry, str(name), f"unknown key (known: "
                                          f"{', '.join(known)})", Action.IGNORED))


def _is_integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@functools.cache
def default_customization() -> Customization:
    """The original's default ``faultCustomization.json``, shipped with trainguard."""
    text = resources.files("trainguard.faults").joinpath("data", "faultCustomization.json")
    return _parse(json.loads(text.read_text()), "faultCustomization.json", None)[0]
