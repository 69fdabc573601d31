"""Public fault messages: their checks, the per-sender rate limit, and the active faults (SPEC D8).

A sender reports by gRPC (``PubFault.SendPublicFault``) or by a document holding the same JSON
(NOTES §2.6, §3.6)::

    {"id": "8 to 128 of [A-Za-z0-9_.-]", "timestamp": <ms, 13 digits, from 2025>,
     "version": "1.0", "resource": <a sender of publicFaultResource>,
     "faults": [{"faultId": <as id>, "faultType": "NPU" | "Node" | "Network" | "Storage",
                 "faultCode": <9 digits, configured>, "faultTime": <as timestamp>,
                 "assertion": "occur" | "recover" | "once",
                 "faultLocation": {<key, <= 16 bytes>: <value, <= 128 bytes>}, <= 10 entries,
                 "influence": [{"nodeName": <DNS-like name>, "nodeSN": <serial number>,
                                "deviceIds": [<0..31>, 1 to 32 distinct]}], 1 to 1000,
                 "description": <<= 512 printable characters>}], 1 to 100}

A message whose header fails a check is rejected; a fault that fails one is dropped alone, and
the message is rejected when no fault is left. Where the original's rules were open we decided:

* an absent or null field is its zero value (``""``, ``0``, empty), as Go's and protobuf's
  parsers read it; keys we do not know are ignored, so that senders may add fields;
* a field of the wrong type drops its fault (the original's parser refuses the whole message);
* ``faultLocation`` lengths count UTF-8 bytes, as the original's do; ``description`` counts
  characters and must be printable (the original's pattern lets control characters through);
* ``nodeSN`` is looked at only when ``nodeName`` is empty, and must name a known node;
* a ``faultType`` that disagrees with digit 1 of the code is accepted, as in the original.

Use them in this order: :class:`RateLimiter` first (the original throttles before checking, so a
flood of invalid messages is throttled too), then :func:`validate_message`, then
:meth:`PublicFaultCache.apply`. Times are seconds on one clock chosen by the caller.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import heapq
import re
import types
from collections.abc import Iterable, Mapping
from typing import TypeGuard, TypeVar

from trainguard import names
from trainguard.faults.device.device_events import Assertion
from trainguard.faults.levels import Level
from trainguard.faults.public.public_faults import PublicFaultConfig

__all__ = [
    "CAPACITY",
    "KEEP_SECONDS",
    "MESSAGES_PER_SECOND",
    "Influence",
    "NodePublicFault",
    "PublicFault",
    "PublicFaultCache",
    "PublicFaultMessage",
    "PublicFaultType",
    "RateLimiter",
    "validate_message",
]

MESSAGES_PER_SECOND = 100
"""Messages accepted from one sender in any second."""
KEEP_SECONDS = 5.0
"""Seconds an occurred fault is kept at least, and a ``once`` fault is kept."""
CAPACITY = 50_000
"""Faults the cache holds at most (node by node), as the original's; so many pending removals."""

_IDENTIFIER = re.compile(r"[A-Za-z0-9_.-]{8,128}")
_EARLIEST_MS = int(datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC).timestamp() * 1000)
_Choice = TypeVar("_Choice", bound=enum.StrEnum)


class PublicFaultType(enum.StrEnum):
    """A message's ``faultType``."""

    NPU = "NPU"
    NODE = "Node"
    NETWORK = "Network"
    STORAGE = "Storage"


@dataclasses.dataclass(frozen=True)
class Influence:
    """The devices of one node a fault affects."""

    node_name: str
    """As sent, or the node whose serial number was sent."""
    node_sn: str
    """The serial number the node was given by; ``""`` when it was named."""
    device_ids: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class PublicFault:
    """One checked fault of a message, with the level its code is configured at."""

    fault_id: str
    fault_type: PublicFaultType
    fault_code: str
    fault_time_ms: int
    assertion: Assertion
    location: Mapping[str, str]
    influence: tuple[Influence, ...]
    description: str
    level: Level


@dataclasses.dataclass(frozen=True)
class PublicFaultMessage:
    """A checked message: only its valid faults are kept."""

    id: str
    timestamp_ms: int
    version: str
    resource: str
    faults: tuple[PublicFault, ...]


class _FieldError(Exception):
    """A field that fails its check; ``str()`` names the field."""


def validate_message(document: object, *, config: PublicFaultConfig,
                     node_names_by_sn: Mapping[str, str] | None = None
                     ) -> tuple[PublicFaultMessage | None, list[str]]:
    """Check a parsed message against the rules above.

    Args:
        document: the message as parsed JSON (any value: senders are not trusted).
        config: the known codes, their levels, and the allowed senders.
        node_names_by_sn: each known node's name by its serial number.

    Returns:
        The message with its valid faults, or ``None`` when it is rejected; and one reason per
        dropped fault or rejection, naming the field, e.g.
        ``"faults[2].influence[0].deviceIds: 32 is outside 0..31; fault dropped"``.
    """
    try:
        data = _object(document, "message")
        header = (_identifier(data, "id"), _time(data, "timestamp"), _version(data),
                  _resource(data, config))
        entries = _list(data, "faults")
        _check_count(entries, "faults", 1, 100)
    except _FieldError as error:
        return None, [f"{error}; message rejected"]
    faults: list[PublicFault] = []
    reasons: list[str] = []
    for index, entry in enumerate(entries):
        try:
            faults.append(_fault(entry, f"faults[{index}]", config, node_names_by_sn or {}))
        except _FieldError as error:
            reasons.append(f"{error}; fault dropped")
    if not faults:
        return None, [*reasons, "faults: no valid fault is left; message rejected"]
    return PublicFaultMessage(*header, faults=tuple(faults)), reasons


def _fault(entry: object, path: str, config: PublicFaultConfig,
           node_names_by_sn: Mapping[str, str]) -> PublicFault:
    data = _object(entry, path)
    fault_id = _identifier(data, "faultId", path)
    fault_type = _choice(data, "faultType", PublicFaultType, path)
    code = _text(data, "faultCode", path)
    if len(code) != 9:
        raise _FieldError(f"{path}.faultCode: {_show(code)} must have 9 characters")
    level = config.level_of(code)
    if level is None:
        raise _FieldError(f"{path}.faultCode: {code} is not a configured public fault code")
    fault_time = _time(data, "faultTime", path)
    assertion = _choice(data, "assertion", Assertion, path)
    location = _location(data, f"{path}.faultLocation")
    influences = _list(data, "influence", path)
    _check_count(influences, f"{path}.influence", 1, 1000)
    influence = tuple(_influence(item, f"{path}.influence[{index}]", node_names_by_sn)
                      for index, item in enumerate(influences))
    description = _text(data, "description", path)
    if len(description) > 512 or not description.isprintable():
        raise _FieldError(f"{path}.description: {_show(description)} must be at most 512 "
                          "printable characters")
    return PublicFault(fault_id, fault_type, code, fault_time, assertion, location, influence,
                       description, level)


def _influence(entry: object, path: str, node_names_by_sn: Mapping[str, str]) -> Influence:
    data = _object(entry, path)
    node_name = _text(data, "nodeName", path)
    node_sn = _text(data, "nodeSN", path)
    if node_name:
        try:
            names.node_name(node_name)
        except names.InvalidNameError:
            raise _FieldError(f"{path}.nodeName: {_show(node_name)} is not a node name "
                              "(lower-case letters, digits, '-' and '.', at most 253)") from None
        node_sn = ""
    elif node_sn and node_sn in node_names_by_sn:
        node_name = node_names_by_sn[node_sn]
    else:
        raise _FieldError(f"{path}.nodeSN: nodeName is empty and {_show(node_sn)} is not the "
                          "serial number of a known node")
    entries = _list(data, "deviceIds", path)
    _check_count(entries, f"{path}.deviceIds", 1, 32)
    devices: list[int] = []
    for device in entries:
        if not _is_integer(device) or not 0 <= device <= 31:
            raise _FieldError(f"{path}.deviceIds: {_show(device)} is outside 0..31")
        devices.append(device)
    if len(set(devices)) != len(devices):
        raise _FieldError(f"{path}.deviceIds: {devices} has duplicates")
    return Influence(node_name, node_sn, tuple(devices))


def _location(data: Mapping[str, object], path: str) -> Mapping[str, str]:
    value = data.get("faultLocation")
    location = _object({} if value is None else value, path)
    if len(location) > 10:
        raise _FieldError(f"{path}: {len(location)} entries; at most 10")
    checked: dict[str, str] = {}
    for key, entry in location.items():
        if not isinstance(key, str) or not isinstance(entry, str):
            raise _FieldError(f"{path}: {_show(key)}: {_show(entry)} is not a string entry")
        if len(key.encode()) > 16 or len(entry.encode()) > 128:
            raise _FieldError(f"{path}: {_show(key)}: a key has at most 16 bytes and a value "
                              "at most 128")
        checked[key] = entry
    return types.MappingProxyType(checked)


def _object(value: object, path: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise _FieldError(f"{path}: {_show(value)} is not a JSON object")
    return value


def _text(data: Mapping[str, object], key: str, path: str = "") -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _FieldError(f"{_join(path, key)}: {_show(value)} is not a string")
    return value


def _list(data: Mapping[str, object], key: str, path: str = "") -> list[object]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _FieldError(f"{_join(path, key)}: {_show(value)} is not a list")
    return value


def _check_count(items: list[object], path: str, least: int, most: int) -> None:
    if not least <= len(items) <= most:
        raise _FieldError(f"{path}: {len(items)} entries; there must be {least} to {most}")


def _identifier(data: Mapping[str, object], key: str, path: str = "") -> str:
    value = _text(data, key, path)
    if not _IDENTIFIER.fullmatch(value):
        raise _FieldError(f"{_join(path, key)}: {_show(value)} must be 8 to 128 letters, "
                          "digits, '-', '_' or '.'")
    return value


def _time(data: Mapping[str, object], key: str, path: str = "") -> int:
    """Milliseconds since the epoch, 13 digits, not before 2025."""
    value = data.get(key, 0)
    if not _is_integer(value) or not 10**12 <= value < 10**13:
        raise _FieldError(f"{_join(path, key)}: {_show(value)} is not 13 digits of "
                          "milliseconds")
    if value < _EARLIEST_MS:
        raise _FieldError(f"{_join(path, key)}: {value} is before 2025-01-01T00:00:00Z")
    return value


def _version(data: Mapping[str, object]) -> str:
    value = _text(data, "version")
    if value != "1.0":
        raise _FieldError(f"version: {_show(value)} is not 1.0")
    return value


def _resource(data: Mapping[str, object], config: PublicFaultConfig) -> str:
    value = _text(data, "resource")
    if value not in config.resources:
        raise _FieldError(f"resource: {_show(value)} is not an allowed sender "
                          f"(publicFaultResource: {', '.join(sorted(config.resources))})")
    return value


def _choice(data: Mapping[str, object], key: str, choices: type[_Choice],
            path: str) -> _Choice:
    value = _text(data, key, path)
    try:
        return choices(value)
    except ValueError:
        allowed = ", ".join(choice.value for choice in choices)
        raise _FieldError(f"{path}.{key}: {_show(value)} is not one of {allowed}") from None


def _is_integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _show(value: object) -> str:
    """A value in a reason, cut short: reasons are logged, and senders are not trusted."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


class RateLimiter:
    """At most :data:`MESSAGES_PER_SECOND` messages per sender in any second.

    The original configures its limiter to refill one message a second after a burst of 100;
    we allow what its documents say, 100 in any second. Messages of a sender that is not
    allowed are refused.
    """

    def __init__(self, resources: Iterable[str]) -> None:
        self._accepted = {resource: collections.deque[float]() for resource in resources}

    def allow(self, resource: str, now: float) -> bool:
        """Whether a message from ``resource`` at ``now`` (seconds) is accepted; counts it if so."""
        accepted = self._accepted.get(resource)
        if accepted is None:
            return False
        while accepted and now - accepted[0] >= 1.0:
            accepted.popleft()
        if len(accepted) >= MESSAGES_PER_SECOND:
            return False
        accepted.append(now)
        return True


@dataclasses.dataclass(frozen=True)
class NodePublicFault:
    """A public fault active on one node, as the cluster documents show it."""

    resource: str
    fault_id: str
    fault_type: PublicFaultType
    fault_code: str
    level: Level
    fault_time_ms: int
    device_ids: tuple[int, ...]


_Key = tuple[str, str]
"""A fault's identity on its node: sender and faultId (the original concatenates them)."""


class PublicFaultCache:
    """The public faults active on each node, with the original's timing.

    * ``occur`` adds the fault unless it is active;
    * ``recover`` removes it, but no sooner than :data:`KEEP_SECONDS` after it was added, so
      that every fault is seen; a ``recover`` for an inactive fault removes it when it occurs
      within :data:`KEEP_SECONDS` (the ``recover`` overtook its ``occur``);
    * ``once`` adds the fault unless it is active, and removes it :data:`KEEP_SECONDS` later.

    A key has at most one pending removal, the earliest; as in the original, a removal takes
    whatever fault has the key when it is due, even one that occurred again in between.
    """

    def __init__(self, *, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._faults: dict[str, dict[_Key, tuple[NodePublicFault, float]]] = {}
        self._count = 0
        self._removals: list[tuple[float, str, _Key]] = []  # a heap, earliest first
        self._pending: set[tuple[str, _Key]] = set()

    def apply(self, message: PublicFaultMessage, now: float) -> list[str]:
        """Take in a checked message at ``now`` (seconds), after the removals due by then.

        Returns:
            One reason per fault and node that could not be kept: the cache is full, or too
            many removals are pending.
        """
        self.expire(now)
        refused: list[str] = []
        for fault in message.faults:
            key = (message.resource, fault.fault_id)
            for influence in fault.influence:
                node = influence.node_name
                entry = self._faults.get(node, {}).get(key)
                if fault.assertion is Assertion.RECOVER:
                    self._recover(node, key, entry, now, refused)
                elif entry is None:
                    stored = self._add(fault, message.resource, influence, now, refused)
                    if stored and fault.assertion is Assertion.ONCE:
                        self._schedule(now + KEEP_SECONDS, node, key)
        return refused

    def expire(self, now: float) -> bool:
        """Carry out the removals due by ``now`` (seconds); whether a fault was removed."""
        removed = False
        while self._removals and self._removals[0][0] <= now:
            _, node, key = heapq.heappop(self._removals)
            self._pending.discard((node, key))
            removed = self._remove(node, key) or removed
        return removed

    def next_expiry(self) -> float | None:
        """When the next removal is due (seconds), so that a caller need not poll."""
        return self._removals[0][0] if self._removals else None

    def current(self, node: str) -> list[NodePublicFault]:
        """The node's active faults, by sender and faultId."""
        faults = self._faults.get(node, {})
        return [faults[key][0] for key in sorted(faults)]

    def nodes(self) -> list[str]:
        """The nodes with an active fault."""
        return sorted(self._faults)

    def _add(self, fault: PublicFault, resource: str, influence: Influence, now: float,
             refused: list[str]) -> bool:
        if self._count >= self._capacity:
            refused.append(f"{resource} {fault.fault_id} on {influence.node_name}: the cache "
                           f"holds {self._capacity} faults; not stored")
            return False
        record = NodePublicFault(resource, fault.fault_id, fault.fault_type, fault.fault_code,
                                 fault.level, fault.fault_time_ms, influence.device_ids)
        faults = self._faults.setdefault(influence.node_name, {})
        faults[(resource, fault.fault_id)] = (record, now)
        self._count += 1
        return True

    def _recover(self, node: str, key: _Key, entry: tuple[NodePublicFault, float] | None,
                 now: float, refused: list[str]) -> None:
        if entry is not None:
            added = entry[1]
            if now - added >= KEEP_SECONDS:
                self._remove(node, key)
            else:
                self._schedule(added + KEEP_SECONDS, node, key)
        elif len(self._pending) < self._capacity:
            self._schedule(now + KEEP_SECONDS, node, key)
        else:
            # Only a recover for an inactive fault is refused: the other removals are of
            # stored faults, so the capacity bounds them already.
            refused.append(f"{key[0]} {key[1]} on {node}: {self._capacity} removals are "
                           "pending; this recover is not kept")

    def _remove(self, node: str, key: _Key) -> bool:
        faults = self._faults.get(node, {})
        if faults.pop(key, None) is None:
            return False
        self._count -= 1
        if not faults:
            del self._faults[node]
        return True

    def _schedule(self, due: float, node: str, key: _Key) -> None:
        if (node, key) in self._pending:
            return
        self._pending.add((node, key))
        heapq.heappush(self._removals, (due, node, key))
