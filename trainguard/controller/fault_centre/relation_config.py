"""The relation-fault configuration: ``relationFaultCustomization.json`` and
``faultDuration.json`` (NOTES §2.7), with the original's defaults built in.

``relationFaultCustomization.json`` is a list of rules::

    {"TriggerFault": "8C1F860B", "RelationFaults": ["81078603"], "FaultStrategy": "Separate"}

a trigger code, the codes it relates to (a device code, or a switch code such as
``[0x08520003,na,L2,na]``), and what a job's nodes with both get: ``SubHealth`` or
``Separate``. ``faultDuration.json`` gives each relation code its kind (``faultDevice`` or
``faultSwitch``) and how long, in seconds, it waits for a trigger (``TimeOutInterval``, >= 0).

A file with a problem is refused whole, with a problem naming the entry and the field, and
what was in force stays: the defaults at start, the last good file later (decided here; the
original drops a malformed rules file without defaults, and skips a bad duration entry).
Unknown fields are reported and ignored, as Go's decoder ignores them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools

from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.device import fault_codes
from trainguard.faults.node.switch_faults import SwitchCode

__all__ = [
    "DURATION_FILE",
    "RULES_FILE",
    "RelationConfig",
    "RelationKind",
    "RelationRule",
    "RelationTimeout",
    "Strategy",
    "code_identity",
    "rules_from_document",
    "timeouts_from_document",
]

RULES_FILE = "relationFaultCustomization.json"
DURATION_FILE = "faultDuration.json"


class Strategy(enum.StrEnum):
    """What a relation rule gives a job's node (the pod label ``fault-type`` in the original);
    Separate dominates."""

    SUB_HEALTH = "SubHealth"
    SEPARATE = "Separate"


class RelationKind(enum.StrEnum):
    DEVICE = "faultDevice"
    SWITCH = "faultSwitch"


@dataclasses.dataclass(frozen=True)
class RelationRule:
    trigger: str
    relations: tuple[str, ...]
    strategy: Strategy


@dataclasses.dataclass(frozen=True)
class RelationTimeout:
    code: str
    kind: RelationKind
    timeout: float  # seconds a relation fault waits for its trigger


_DEFAULT_RULES = (
    RelationRule("8C1F8609", ("81078603",), Strategy.SUB_HEALTH),
    RelationRule("8C1F860B", ("81078603",), Strategy.SEPARATE),
    RelationRule("8C1F860B", ("[0x08520003,na,L2,na]",), Strategy.SEPARATE),
    RelationRule("8C1F8608", ("81078603",), Strategy.SEPARATE),
    RelationRule("4C1F8608", ("81078603",), Strategy.SEPARATE),
)
_DEFAULT_TIMEOUTS = (
    RelationTimeout("81078603", RelationKind.DEVICE, 300.0),
    RelationTimeout("[0x08520003,na,L2,na]", RelationKind.SWITCH, 300.0),
)


def code_identity(code: str) -> str:
    """How codes are compared: a device code by its upper-case spelling, a switch code as
    exact text (as the original compares each)."""
    return code if code.startswith("[") else code.strip().upper()


def _code_problem(code: object) -> str | None:
    if not isinstance(code, str) or not code:
        return "not a fault code (a non-empty string)"
    if code.startswith("["):
        try:
            SwitchCode.parse(code)
        except ValueError as error:
            return f"not a switch fault code: {error}"
        return None
    if not fault_codes.is_code(code):
        return "not a device fault code (letters, digits, '-' or '_', at most 32)"
    return None


@dataclasses.dataclass(frozen=True)
class RelationConfig:
    rules: tuple[RelationRule, ...] = _DEFAULT_RULES
    timeouts: tuple[RelationTimeout, ...] = _DEFAULT_TIMEOUTS

    @functools.cached_property
    def _timeout_by_code(self) -> dict[str, RelationTimeout]:
        return {code_identity(entry.code): entry for entry in self.timeouts}

    def timeout_of(self, code: str) -> RelationTimeout | None:
        """The code's entry in faultDuration.json; None: a code without one waits 0 s."""
        return self._timeout_by_code.get(code_identity(code))


def rules_from_document(document: object, *, file: str = RULES_FILE
                        ) -> tuple[tuple[RelationRule, ...] | None, list[ConfigProblem]]:
    """The rules of a parsed ``relationFaultCustomization.json``; None when it is refused
    whole (a problem says why). Every problem found."""
    problems: list[ConfigProblem] = []
    return _rules(document, file, problems), problems


def timeouts_from_document(document: object, *, file: str = DURATION_FILE
                           ) -> tuple[tuple[RelationTimeout, ...] | None, list[ConfigProblem]]:
    """The entries of a parsed ``faultDuration.json``; None when it is refused whole."""
    problems: list[ConfigProblem] = []
    return _timeouts(document, file, problems), problems


def _entries(document: object, file: str, fields: tuple[str, ...],
             problems: list[ConfigProblem]) -> list[dict[str, object]] | None:
    """The file's entries, or None (a problem said why) when it is not a list of objects."""
    if not isinstance(document, list):
        problems.append(ConfigProblem(file, "", "", "not a JSON list; the file is refused",
                                      Action.DEFAULT_USED))
        return None
    entries = []
    for index, entry in enumerate(document):
        if not isinstance(entry, dict):
            problems.append(ConfigProblem(file, f"[{index}]", "", "not a JSON object; the "
                                          "file is refused", Action.DEFAULT_USED))
            return None
        for name in entry:
            if name not in fields:
                problems.append(ConfigProblem(file, f"[{index}]", str(name), "unknown field "
                                              f"(known: {', '.join(fields)})", Action.IGNORED))
        entries.append(entry)
    return entries


def _refused(problems: list[ConfigProblem], file: str, index: int,
             checks: tuple[tuple[str, str | None], ...]) -> bool:
    """Whether an entry has a bad field: the first is reported, and the file is refused."""
    for field, problem in checks:
        if problem is not None:
            problems.append(ConfigProblem(file, f"[{index}]", field, f"{problem}; the file is "
                                          "refused", Action.DEFAULT_USED))
            return True
    return False


def _code(code: object) -> str | None:
    problem = _code_problem(code)
    return None if problem is None else f"{code!r} is {problem}"


def _choice(value: object, choices: type[enum.StrEnum]) -> str | None:
    if value in set(choices):
        return None
    return f"{value!r} is not one of {', '.join(choices)}"


def _codes(value: object) -> str | None:
    if not isinstance(value, list) or not value:
        return "must be a non-empty list of fault codes"
    return next((problem for code in value if (problem := _code(code)) is not None), None)


def _rules(document: object, file: str, problems: list[ConfigProblem]
           ) -> tuple[RelationRule, ...] | None:
    entries = _entries(document, file, ("TriggerFault", "RelationFaults", "FaultStrategy"),
                       problems)
    if entries is None:
        return None
    rules = []
    for index, entry in enumerate(entries):
        trigger, relations = entry.get("TriggerFault"), entry.get("RelationFaults")
        strategy = entry.get("FaultStrategy")
        if _refused(problems, file, index, (
                ("TriggerFault", _code(trigger)), ("RelationFaults", _codes(relations)),
                ("FaultStrategy", _choice(strategy, Strategy)))):
            return None
        assert isinstance(relations, list)
        rules.append(RelationRule(str(trigger), tuple(str(code) for code in relations),
                                  Strategy(str(strategy))))
    return tuple(rules)


def _timeouts(document: object, file: str, problems: list[ConfigProblem]
              ) -> tuple[RelationTimeout, ...] | None:
    entries = _entries(document, file, ("FaultCode", "FaultType", "TimeOutInterval"), problems)
    if entries is None:
        return None
    timeouts = []
    for index, entry in enumerate(entries):
        code, kind = entry.get("FaultCode"), entry.get("FaultType")
        interval = entry.get("TimeOutInterval")
        seconds = (None if isinstance(interval, int) and not isinstance(interval, bool)
                   and interval >= 0 else f"{interval!r} is not a whole number of seconds >= 0")
        if _refused(problems, file, index, (
                ("FaultCode", _code(code)), ("FaultType", _choice(kind, RelationKind)),
                ("TimeOutInterval", seconds))):
            return None
        assert isinstance(interval, int)
        timeouts.append(RelationTimeout(str(code), RelationKind(str(kind)), float(interval)))
    return tuple(timeouts)
