"""Relation faults: a link that is down and a collective that fails on it, together, say more
than either alone (NOTES §2.7).

Per job, at each evaluation, as the original's relation processor does:

* A *relation* fault (a code some rule lists in ``RelationFaults``) on one of the job's devices,
  or a switch fault of one of its nodes, is tracked from its time on, for its
  ``TimeOutInterval`` (0 s for a code faultDuration.json does not list).
* A rule matches when its *trigger* code is present on any of the job's devices and every one
  of its relation codes is tracked: the nodes of those relation faults get the rule's strategy,
  ``SubHealth`` or ``Separate`` (Separate dominates). A fault given Separate is done; one given
  SubHealth stays tracked and may still be given Separate.
* A tracked fault whose interval passed without a strategy: a switch fault gives its node
  SubHealth; a device fault gives Separate only when a *deferred* trigger came at or after it,
  within its interval, and nothing otherwise. A trigger is deferred when the job runs on a super
  pod (SuperPodID >= 0) and the trigger is a completion-queue error (``8C1F8608`` or
  ``4C1F8608``): there the original waits for the link's interval instead of acting at once.
  (NOTES §2.7 summarises this as "device fault -> Separate"; the condition is the original's.)
* A done fault is not tracked again while it stays present; once gone, it may start over.
* A node's strategy only rises while the job runs: a new one is reported when it differs from
  the node's last, and Separate stays. Faults of a node whose switch document says UnHealthy are
  left out (the node is separated anyway), as the original does.

Pure: faults and times come in, decisions go out; the state is exported as plain data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from trainguard.controller.fault_centre import plain_data
from trainguard.controller.fault_centre.relation_config import (
    RelationConfig,
    RelationKind,
    Strategy,
    code_identity,
)

__all__ = ["DEFERRED_TRIGGERS", "JobFault", "RelationDecision", "RelationFaults"]

DEFERRED_TRIGGERS = frozenset({"8C1F8608", "4C1F8608"})
"""Completion-queue errors: on a super pod they wait for the relation fault's interval."""

_RANK = {None: 0, Strategy.SUB_HEALTH: 1, Strategy.SEPARATE: 2}


@dataclasses.dataclass(frozen=True)
class JobFault:
    """A present fault of one of a job's devices, or of one of its nodes' switches."""

    node: str
    device: str | None  # the controller's device name; None for a switch fault
    code: str
    time: float  # seconds: when it was raised

    @property
    def uid(self) -> str:
        return f"{self.node}|{self.device or ''}|{code_identity(self.code)}"


@dataclasses.dataclass(frozen=True)
class RelationDecision:
    """A node of a job gets a strategy (the original labels the node's pod ``fault-type``)."""

    job: str
    node: str
    strategy: Strategy
    codes: tuple[str, ...]  # the relation codes that gave it


@dataclasses.dataclass
class _Tracked:
    fault: JobFault
    since: float
    given: Strategy | None = None


def _stronger(a: Strategy | None, b: Strategy | None) -> Strategy | None:
    return a if _RANK[a] >= _RANK[b] else b


class RelationFaults:
    """One job's relation-fault state."""

    def __init__(self, job: str, *, config: RelationConfig, super_pod: bool = False) -> None:
        self.job = job
        self.config = config
        self.super_pod = super_pod
        self._tracked: dict[str, _Tracked] = {}
        self._done: set[str] = set()
        self._deferred: dict[str, float] = {}  # deferred trigger uid -> its time
        self._labels: dict[str, Strategy] = {}

    @property
    def strategies(self) -> Mapping[str, Strategy]:
        """Each node's strategy so far."""
        return dict(self._labels)

    def evaluate(self, faults: Iterable[JobFault], now: float) -> list[RelationDecision]:
        """Judge the job's present faults at ``now`` (seconds): the nodes whose strategy
        changed."""
        relation_codes = {code_identity(code) for rule in self.config.rules
                          for code in rule.relations}
        trigger_codes = {code_identity(rule.trigger) for rule in self.config.rules}
        present: dict[str, JobFault] = {}
        triggers: set[str] = set()
        for fault in faults:
            code = code_identity(fault.code)
            if code in relation_codes:
                present[fault.uid] = fault
            if code in trigger_codes and fault.device is not None:
                if self.super_pod and code in DEFERRED_TRIGGERS:
                    self._deferred.setdefault(fault.uid, fault.time)
                else:
                    triggers.add(code)
        for uid in [uid for uid in self._tracked if uid not in present]:
            del self._tracked[uid]
        self._done &= present.keys()
        for uid, fault in present.items():
            if uid not in self._tracked and uid not in self._done:
                self._tracked[uid] = _Tracked(fault, fault.time)
        given: dict[str, tuple[Strategy, set[str]]] = {}
        self._match(triggers, given)
        self._time_out(now, given)
        return self._relabel(given)

    def _give(self, given: dict[str, tuple[Strategy, set[str]]], tracked: _Tracked,
              strategy: Strategy) -> None:
        node = tracked.fault.node
        old, codes = given.get(node, (strategy, set()))
        given[node] = (_stronger(old, strategy) or strategy, codes | {tracked.fault.code})

    def _match(self, triggers: set[str], given: dict[str, tuple[Strategy, set[str]]]) -> None:
        active = {code_identity(tracked.fault.code) for tracked in self._tracked.values()}
        for rule in self.config.rules:
            relations = {code_identity(code) for code in rule.relations}
            if code_identity(rule.trigger) not in triggers or not relations <= active:
                continue
            for tracked in self._tracked.values():
                if code_identity(tracked.fault.code) in relations:
                    tracked.given = _stronger(tracked.given, rule.strategy)
                    self._give(given, tracked, rule.strategy)

    def _time_out(self, now: float, given: dict[str, tuple[Strategy, set[str]]]) -> None:
        for uid, tracked in list(self._tracked.items()):
            if tracked.given is Strategy.SEPARATE:
                self._finish(uid)
                continue
            entry = self.config.timeout_of(tracked.fault.code)
            timeout = entry.timeout if entry is not None else 0.0
            if now - tracked.since < timeout:
                continue
            self._finish(uid)
            if tracked.given is not None:
                continue
            switch = (tracked.fault.device is None if entry is None
                      else entry.kind is RelationKind.SWITCH)
            if switch:
                self._give(given, tracked, Strategy.SUB_HEALTH)
            elif self._take_deferred(tracked.since, timeout):
                self._give(given, tracked, Strategy.SEPARATE)

    def _take_deferred(self, since: float, timeout: float) -> bool:
        met = [uid for uid, time in self._deferred.items() if since <= time <= since + timeout]
        for uid in met:
            del self._deferred[uid]
        return bool(met)

    def _finish(self, uid: str) -> None:
        del self._tracked[uid]
        self._done.add(uid)

    def _relabel(self, given: dict[str, tuple[Strategy, set[str]]]) -> list[RelationDecision]:
        decisions = []
        for node in sorted(given):
            strategy, codes = given[node]
            old = self._labels.get(node)
            if old is Strategy.SEPARATE or old is strategy:
                continue
            self._labels[node] = strategy
            decisions.append(RelationDecision(self.job, node, strategy, tuple(sorted(codes))))
        return decisions

    def export(self) -> dict[str, object]:
        """The state as plain data (:meth:`restore` takes it back)."""
        return {
            "tracked": [{"node": t.fault.node, "device": t.fault.device, "code": t.fault.code,
                         "time": t.fault.time, "since": t.since,
                         "given": None if t.given is None else str(t.given)}
                        for t in self._tracked.values()],
            "done": sorted(self._done),
            "deferred": dict(sorted(self._deferred.items())),
            "labels": {node: str(strategy) for node, strategy in sorted(self._labels.items())},
        }

    def restore(self, data: Mapping[str, object]) -> None:
        """Take back :meth:`export`'s data.

        Raises:
            ValueError: a field is missing or malformed (the message names it).
        """
        where = f"relation faults of job {self.job!r}"
        tracked = {}
        for index, item in enumerate(plain_data.objects(data, "tracked", where=where)):
            at = f"{where}: tracked[{index}]"
            device = item.get("device")
            given = item.get("given")
            fault = JobFault(plain_data.text(item, "node", where=at),
                             device if isinstance(device, str) else None,
                             plain_data.text(item, "code", where=at),
                             plain_data.number(item, "time", where=at))
            tracked[fault.uid] = _Tracked(fault, plain_data.number(item, "since", where=at),
                                          _strategy(given, where=f"{at}: given"))
        done = data.get("done", [])
        if not isinstance(done, list) or not all(isinstance(uid, str) for uid in done):
            raise ValueError(f"{where}: field 'done' must be a list of strings")
        deferred = plain_data.mapping(data, "deferred", where=where)
        labels = plain_data.mapping(data, "labels", where=where)
        self._tracked, self._done = tracked, set(done)
        self._deferred = {uid: plain_data.number(deferred, uid, where=f"{where}: deferred")
                          for uid in deferred}
        self._labels = {}
        for node, value in labels.items():
            label = _strategy(value, where=f"{where}: labels[{node!r}]")
            if label is None:
                raise ValueError(f"{where}: labels[{node!r}] must be a strategy, not null")
            self._labels[node] = label


def _strategy(value: object, *, where: str) -> Strategy | None:
    if value is None:
        return None
    if value not in set(Strategy):
        raise ValueError(f"{where}: {value!r} is not one of {', '.join(Strategy)}")
    return Strategy(str(value))
