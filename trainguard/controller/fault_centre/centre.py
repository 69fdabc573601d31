"""The fault centre: what the controller makes of every node's faults before jobs see them, and
the cluster documents it writes (NOTES §4.6; SPEC I1, D8).

Inputs, each with its time: device fault events (graded, or graded here by their code's
level), the jobs' placements and their retry reports, the nodes' documents, and the operator's
``separate`` and ``release``. :meth:`FaultCentre.evaluate` is called at least once a second (the
original's period) and after input; it returns what reaches which job, the devices separated or
released, the relation strategies given, and the documents to write now.

A device fault reaches its job's view unless a filter holds it, in the original's order:

1. a memory error's companion code is held 5 s and dropped when a UCE is near
   (:mod:`.companion_filter`);
2. a retry fault of a job that retries steps is hidden while the retry runs
   (:mod:`.retry_hiding`).

What reached a job stays delivered until the device recovers it; a fault that recovers while
held is never shown, and its recovery is not either. Faults that reached a job at a level above
SubHealthFault are counted for manual separation (:mod:`.manual_separation`); the job's view,
with its nodes' switch faults, goes through the relation rules (:mod:`.relation_faults`); and
the job's fault ranks document follows (:mod:`.fault_ranks`).

One writer: the controller. The state a restart must keep (counts and separated devices,
relation state, shard placement, fault ranks, what was delivered) is :meth:`FaultCentre.export`,
plain data; :meth:`FaultCentre.restore` takes it back.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping

from trainguard.controller.fault_centre import node_documents, plain_data
from trainguard.controller.fault_centre.api import Delivery, Evaluation, JobPlacement, split_device
from trainguard.controller.fault_centre.companion_filter import (
    COMPANION_CODES,
    UCE_CODE,
    Verdict,
    companion_verdict,
)
from trainguard.controller.fault_centre.fault_ranks import FaultRanks
from trainguard.controller.fault_centre.manual_separation import (
    ManualSeparation,
    SeparationChange,
)
from trainguard.controller.fault_centre.relation_config import RelationConfig, Strategy
from trainguard.controller.fault_centre.relation_faults import (
    JobFault,
    RelationDecision,
    RelationFaults,
)
from trainguard.controller.fault_centre.retry_hiding import RecoveryReport, retry_hidden
from trainguard.controller.fault_centre.separation_policy import SeparationPolicy
from trainguard.controller.fault_centre.shards import SHARD_LIMIT, ShardAssignment
from trainguard.controller.fault_centre.write_plan import DocumentWrite, WritePlanner
from trainguard.faults import go_json
from trainguard.faults.device import fault_codes
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.device.device_health import RETRY_CODES
from trainguard.faults.levels import Level

__all__ = ["CLUSTER_DEVICE_PREFIX", "CLUSTER_NODE", "CLUSTER_SWITCH_PREFIX", "FaultCentre"]

CLUSTER_DEVICE_PREFIX = "cluster-info-device-"
CLUSTER_SWITCH_PREFIX = "cluster-info-switch-"
CLUSTER_NODE = "cluster-info-node-cm"
_UCES_KEPT = 4
"""A device's latest UCE times kept for the companion filter."""
_UNHEALTHY = "UnHealthy"


@dataclasses.dataclass
class _Present:
    event: DeviceFaultEvent
    level: Level
    delivered: bool = False
    dropped: bool = False


class FaultCentre:
    """The controller's fault centre over every node and job."""

    def __init__(self, *, relation: RelationConfig | None = None,
                 policy: SeparationPolicy | None = None,
                 codes: fault_codes.CodeTable | None = None,
                 shard_limit: int = SHARD_LIMIT, planner: WritePlanner | None = None) -> None:
        """``codes``: grades an event given without a level (the code's own level)."""
        self.relation = relation or RelationConfig()
        self.codes = codes or fault_codes.default_table()
        self.manual = ManualSeparation(policy)
        self.planner = planner or WritePlanner()
        self._present: dict[str, dict[fault_codes.CodeKey, _Present]] = {}
        self._outbox: list[Delivery] = []  # recoveries of delivered faults, in order
        self._restored: dict[str, set[str]] = {}  # device -> codes delivered before a restart
        self._uces: dict[str, deque[float]] = {}
        self._jobs: dict[str, JobPlacement] = {}
        self._job_of: dict[str, str] = {}  # device -> job
        self._reports: dict[tuple[str, str], RecoveryReport] = {}
        self._relations: dict[str, RelationFaults] = {}
        self._ranks: dict[str, FaultRanks] = {}
        self._devices = ShardAssignment(limit=shard_limit)
        self._switches = ShardAssignment(limit=shard_limit)
        self._device_documents: dict[str, object] = {}
        self._device_shown: dict[str, tuple[object, ...]] = {}  # node -> what its entry shows
        self._switch_faults: dict[str, tuple[str, list[JobFault]]] = {}  # node -> status, faults
        self._node_entries: dict[str, str] = {}  # node -> encoded entry

    # --- jobs -------------------------------------------------------------------------------

    def place_job(self, placement: JobPlacement) -> None:
        """A job runs on these devices (again: its placement is replaced)."""
        self.end_job(placement.job, keep_state=True)
        self._jobs[placement.job] = placement
        for device in placement.ranks:
            self._job_of[device] = placement.job
        relation = self._relations.get(placement.job)
        if relation is None:
            self._relations[placement.job] = RelationFaults(
                placement.job, config=self.relation, super_pod=placement.super_pod)
        else:
            relation.super_pod = placement.super_pod

    def end_job(self, job: str, *, keep_state: bool = False) -> None:
        """The job ended: its fault ranks document goes (``keep_state``: a new placement
        follows)."""
        placement = self._jobs.pop(job, None)
        if placement is not None:
            for device in placement.ranks:
                if self._job_of.get(device) == job:
                    del self._job_of[device]
        if not keep_state:
            self._relations.pop(job, None)
            self._ranks.pop(job, None)
            self._reports = {key: report for key, report in self._reports.items()
                             if key[0] != job}

    def recovery_report(self, *, job: str, device: str, recover_time: float,
                        complete_time: float | None = None) -> None:
        """The job began retrying (and, with ``complete_time``, completed the retry) on
        ``device`` (seconds)."""
        self._reports[(job, device)] = RecoveryReport(recover_time, complete_time)

    # --- faults -----------------------------------------------------------------------------

    def device_fault(self, event: DeviceFaultEvent, *, level: Level | None = None) -> None:
        """A device's fault event; ``level``: as graded (None: the event's given level, else
        its code's own level)."""
        key = fault_codes.code_key(event.code)
        present = self._present.setdefault(event.device, {})
        if event.assertion is Assertion.RECOVER:
            gone = present.pop(key, None)
            if gone is not None and gone.delivered:
                self._outbox.append(Delivery(self._job_of.get(event.device), event))
            self._restored.get(event.device, set()).discard(fault_codes.spell(key))
            if not present:
                del self._present[event.device]
            return
        if key == UCE_CODE:
            self._uces.setdefault(event.device, deque(maxlen=_UCES_KEPT)).append(event.time)
        if key in present:
            return
        graded = level or event.level or self.codes.level_of(key)
        delivered = fault_codes.spell(key) in self._restored.get(event.device, ())
        present[key] = _Present(event, graded, delivered=delivered)

    def separate(self, device: str, now: float) -> list[SeparationChange]:
        """An operator takes ``device`` out of use (ManuallySeparateNPU)."""
        return self.manual.separate(device, now)

    def release(self, device: str, now: float) -> list[SeparationChange]:
        """An operator puts ``device`` back in use."""
        return self.manual.release(device, now)

    def reconfigure(self, *, relation: RelationConfig | None = None,
                    policy: SeparationPolicy | None = None) -> None:
        """New configuration; the state so far stays."""
        if relation is not None:
            self.relation = relation
            for faults in self._relations.values():
                faults.config = relation
        if policy is not None:
            self.manual.policy = policy

    # --- node documents ---------------------------------------------------------------------

    def node_documents(self, node: str, *, device_info: object | None = None,
                       switch_info: object | None = None, node_info: object | None = None
                       ) -> None:
        """A node's documents, parsed (those not given are unchanged).

        Raises:
            node_documents.DocumentError: a document is malformed or fails its check code;
                nothing of this call is taken.
        """
        if device_info is not None:
            node_documents.device_entry(node, device_info)  # checked now, shown at evaluation
        switch = None if switch_info is None else node_documents.switch_entry(node, switch_info)
        entry = None if node_info is None else node_documents.node_entry(node, node_info)
        if device_info is not None:
            self._device_documents[node] = device_info
            self._device_shown.pop(node, None)
        if switch is not None:
            self._switches.put(node_documents.SWITCH_INFO_PREFIX + node, go_json.dumps(switch))
            self._switch_faults[node] = (str(switch["NodeStatus"]), _switch_faults(node, switch))
        if entry is not None:
            self._node_entries[node] = go_json.dumps(entry)

    def forget_node(self, node: str) -> None:
        """The node left the cluster: its entries go from the cluster documents."""
        self._device_documents.pop(node, None)
        self._device_shown.pop(node, None)
        self._devices.remove(node_documents.DEVICE_INFO_PREFIX + node)
        self._switches.remove(node_documents.SWITCH_INFO_PREFIX + node)
        self._switch_faults.pop(node, None)
        self._node_entries.pop(node, None)

    # --- evaluation -------------------------------------------------------------------------

    def evaluate(self, now: float) -> Evaluation:
        """Everything time and input decided by ``now`` (seconds)."""
        deliveries, self._outbox = self._outbox, []
        separations: list[SeparationChange] = []
        for device in sorted(self._present):
            deliveries.extend(self._deliver(device, now, separations))
        separations.extend(self.manual.advance(now))
        relations = self._relate(now)
        self.planner.want(self._documents(now))
        return Evaluation(tuple(deliveries), tuple(separations), tuple(relations),
                          tuple(self.planner.plan(now)))

    def write_failed(self, write: DocumentWrite) -> None:
        """A planned write did not happen: it is planned again."""
        self.planner.failed(write.name)

    def _visible(self, device: str, key: fault_codes.CodeKey, present: _Present,
                 now: float) -> bool:
        if present.delivered:
            return True
        if present.dropped:
            return False
        if key in COMPANION_CODES:
            verdict = companion_verdict(present.event.time, self._uces.get(device, ()), now)
            present.dropped = verdict is Verdict.DROP
            if verdict is not Verdict.PASS:
                return False
        job = self._job_of.get(device)
        if key in RETRY_CODES and job is not None and self._jobs[job].retries_steps:
            return not retry_hidden(present.event.time, now, self._reports.get((job, device)))
        return True

    def _deliver(self, device: str, now: float,
                 separations: list[SeparationChange]) -> list[Delivery]:
        present = self._present[device]
        job = self._job_of.get(device)
        deliveries = []
        for key, fault in list(present.items()):
            if fault.delivered or not self._visible(device, key, fault, now):
                if fault.dropped and fault.event.assertion is Assertion.ONCE:
                    del present[key]
                continue
            fault.delivered = True
            deliveries.append(Delivery(job, fault.event))
            separations.extend(self.manual.observe(
                device=device, code=fault_codes.spell(key), level=fault.level,
                time=fault.event.time, job=job))
            if fault.event.assertion is Assertion.ONCE:
                del present[key]
        if not present:
            del self._present[device]
        return deliveries

    def _job_view(self, placement: JobPlacement) -> list[JobFault]:
        """The job's delivered faults and its nodes' switch faults, without the nodes whose
        switch document says UnHealthy."""
        unhealthy = {node for node in placement.nodes
                     if self._switch_faults.get(node, ("", []))[0] == _UNHEALTHY}
        faults = [fault for node in sorted(placement.nodes - unhealthy)
                  for fault in self._switch_faults.get(node, ("", []))[1]]
        for device in placement.ranks:
            where = split_device(device)
            if where is None or where[0] in unhealthy:
                continue
            faults.extend(JobFault(where[0], device, present.event.code, present.event.time)
                          for present in self._present.get(device, {}).values()
                          if present.delivered)
        return faults

    def _relate(self, now: float) -> list[RelationDecision]:
        decisions = []
        for job, placement in sorted(self._jobs.items()):
            decisions.extend(self._relations[job].evaluate(self._job_view(placement), now))
        return decisions

    # --- documents --------------------------------------------------------------------------

    def _hidden(self) -> dict[str, dict[int, set[str]]]:
        """Node -> device number -> the codes the fault centre holds back."""
        hidden: dict[str, dict[int, set[str]]] = defaultdict(dict)
        for device, present in self._present.items():
            where = split_device(device)
            if where is None:
                continue
            codes = {fault_codes.spell(key) for key, fault in present.items()
                     if not fault.delivered}
            if codes:
                hidden[where[0]][where[1]] = codes
        return hidden

    def _documents(self, now: float) -> dict[str, Mapping[str, str]]:
        hidden = self._hidden()
        separated: dict[str, set[int]] = defaultdict(set)
        for device in self.manual.separated:
            where = split_device(device)
            if where is not None:
                separated[where[0]].add(where[1])
        for node, document in self._device_documents.items():
            shown = (tuple(sorted((n, tuple(sorted(c))) for n, c in hidden[node].items())),
                     tuple(sorted(separated[node])))
            if self._device_shown.get(node) == shown:
                continue
            self._device_shown[node] = shown
            entry = node_documents.device_entry(node, document, hidden=hidden[node],
                                                separated=separated[node])
            self._devices.put(node_documents.DEVICE_INFO_PREFIX + node, go_json.dumps(entry))
        documents: dict[str, Mapping[str, str]] = {}
        for prefix, shards in ((CLUSTER_DEVICE_PREFIX, self._devices),
                               (CLUSTER_SWITCH_PREFIX, self._switches)):
            for index, text in enumerate(shards.texts()):
                documents[f"{prefix}{index}"] = {f"{prefix}{index}": text}
        documents[CLUSTER_NODE] = {CLUSTER_NODE: "{" + ",".join(
            f'"{node_documents.NODE_INFO_PREFIX}{node}":{self._node_entries[node]}'
            for node in sorted(self._node_entries)) + "}"}
        for job, placement in self._jobs.items():
            ranks = self._ranks.get(job) or FaultRanks(job, (), now)
            self._ranks[job] = ranks = ranks.updated(self._fault_ranks(placement), now)
            documents[ranks.name] = ranks.data()
        return documents

    def _fault_ranks(self, placement: JobPlacement) -> set[int]:
        separate_nodes = {node for node, strategy in
                          self._relations[placement.job].strategies.items()
                          if strategy is Strategy.SEPARATE}
        separated = self.manual.separated
        ranks = set()
        for device, rank in placement.ranks.items():
            faults = self._present.get(device, {}).values()
            if (device in separated or device.rpartition("/")[0] in separate_nodes
                    or any(fault.delivered and fault.level.severity
                           > Level.SUB_HEALTH_FAULT.severity for fault in faults)):
                ranks.add(rank)
        return ranks

    # --- state over a restart ---------------------------------------------------------------

    def export(self) -> dict[str, object]:
        """What a restarted controller must not lose, as plain data."""
        delivered = {device: sorted(fault_codes.spell(key) for key, fault in present.items()
                                    if fault.delivered)
                     for device, present in sorted(self._present.items())}
        return {
            "manual_separation": self.manual.export(),
            "relations": {job: faults.export()
                          for job, faults in sorted(self._relations.items())},
            "fault_ranks": {job: {"ranks": list(ranks.ranks), "created": ranks.created}
                            for job, ranks in sorted(self._ranks.items())},
            "shards": {"device": self._devices.export(), "switch": self._switches.export()},
            "delivered": {device: codes for device, codes in delivered.items() if codes},
        }

    def restore(self, data: Mapping[str, object]) -> None:
        """Take back :meth:`export`'s data, before any input.

        Raises:
            ValueError: a field is missing or malformed (the message names it).
        """
        where = "fault centre"
        self.manual.restore(plain_data.mapping(data, "manual_separation", where=where))
        for job, state in plain_data.mapping(data, "relations", where=where).items():
            if not isinstance(state, dict):
                raise ValueError(f"{where}: relations[{job!r}] must be a JSON object")
            faults = self._relations.setdefault(job, RelationFaults(job, config=self.relation))
            faults.restore(state)
        for job, state in plain_data.mapping(data, "fault_ranks", where=where).items():
            at = f"{where}: fault_ranks[{job!r}]"
            if not isinstance(state, dict):
                raise ValueError(f"{at}: must be a JSON object")
            self._ranks[job] = FaultRanks(job, tuple(_ranks(state.get("ranks"), where=at)),
                                          plain_data.number(state, "created", where=at))
        shards = plain_data.mapping(data, "shards", where=where)
        for name, assignment in (("device", self._devices), ("switch", self._switches)):
            assignment.prefer(plain_data.mapping(shards, name, where=f"{where}: shards"))
        restored = {}
        for device, codes in plain_data.mapping(data, "delivered", where=where).items():
            if not isinstance(codes, list) or not all(isinstance(code, str) for code in codes):
                raise ValueError(f"{where}: delivered[{device!r}] must be a list of codes")
            restored[device] = set(codes)
        self._restored = restored


def _switch_faults(node: str, entry: Mapping[str, object]) -> list[JobFault]:
    """The switch faults of a node's switch entry, for the relation rules."""
    faults = []
    codes = entry["FaultCode"]
    assert isinstance(codes, list)
    for text in codes:
        try:
            fault = json.loads(text)
        except json.JSONDecodeError:
            continue  # the original skips a fault it cannot read
        if isinstance(fault, dict) and isinstance(fault.get("AssembledFaultCode"), str):
            raised = fault.get("AlarmRaisedTime")
            time = raised / 1000 if isinstance(raised, (int, float)) else 0.0
            faults.append(JobFault(node, None, fault["AssembledFaultCode"], time))
    return faults


def _ranks(value: object, *, where: str) -> Iterable[int]:
    if not isinstance(value, list) or not all(
            isinstance(rank, int) and not isinstance(rank, bool) for rank in value):
        raise ValueError(f"{where}: field 'ranks' must be a list of integers")
    return value
