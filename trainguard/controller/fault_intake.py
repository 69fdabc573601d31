"""The controller's glue around its fault centre (:mod:`.fault_centre`): what goes in, and what
the controller does with what comes out.

In: every device event the controller takes (a host's device report, a public fault), graded
first by the devices' fault engine (the history), as the original's device plugin grades
before its fault centre filters; the hosts' documents; the running jobs' placements, read from
the jobs at each evaluation; an operator's ``separate`` and ``release``.

Ordering (decided here): an event reaches its job only as one of the centre's deliveries, so
that what the centre holds (a memory error's companion code, a retry being judged) does not
reach it early. The centre is evaluated right after each event, not only on the 1 s tick, so
an event no filter holds reaches its job as fast as before; held ones come out on a tick. A
delivery is acted on with the health its event was graded at; a device no job uses goes to
the job on its host, if one runs there (it records it).

Out: deliveries to the jobs; a separated device is a ManuallySeparateNPU fault of the job on it
(its rank moves, and no later generation of that job uses it), and so is a separated device in
a job placed later; a relation rule's Separate isolates every device the job has on that node
(its ranks move); a node document that comes to say UnHealthy is told to the controller (which
takes the host out of its job); SubHealth is logged only; the cluster documents go to the store as
``documents/<name>`` (the document's data map, as JSON), and the centre's state as
``fault-centre`` (a successor controller restores it: manual separations survive).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Collection, Iterable, Mapping

from trainguard import clock as clocks
from trainguard.controller import device_reports, job_controller, policy
from trainguard.controller.fault_centre import node_documents
from trainguard.controller.fault_centre.api import Evaluation, JobPlacement, split_device
from trainguard.controller.fault_centre.centre import FaultCentre
from trainguard.controller.fault_centre.manual_separation import SeparationChange
from trainguard.controller.fault_centre.relation_config import Strategy
from trainguard.controller.fault_centre.relation_faults import RelationDecision
from trainguard.faults import levels
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level
from trainguard.faults.node import node_faults
from trainguard.faults.node.switch_faults import NodeStatus
from trainguard.job import events
from trainguard.proto import control_pb2 as pb
from trainguard.store import kv, trailing

__all__ = ["EVALUATE_INTERVAL", "RELATION_CODE", "SEPARATION_CODE", "STATE_KEY",
           "DeviceRequestError", "FaultIntake", "restored_centre"]

logger = logging.getLogger(__name__)

STATE_KEY = "fault-centre"
EVALUATE_INTERVAL = 1.0
"""Seconds between evaluations without input (the original's period)."""
SEPARATION_CODE = "manual-separation"
"""The code a manual separation is handed to a job with (its level ManuallySeparateNPU)."""
RELATION_CODE = "relation-separate"
"""The code a relation rule's Separate is handed to a job with (its level SeparateNPU)."""
PENDING_KEPT = 600.0
"""Seconds an event's grade waits for its delivery (held faults wait at most 40 s)."""

_CONFIG_KEYS = {node_documents.DEVICE_INFO_PREFIX: "DeviceInfoCfg",
                node_documents.SWITCH_INFO_PREFIX: "SwitchInfoCfg",
                node_documents.NODE_INFO_PREFIX: "NodeInfo"}
"""Each host document's ConfigMap key, whose text is the document the centre reads."""

Placements = Callable[[], Mapping[str, tuple[JobPlacement, job_controller.JobController]]]
"""The running jobs: each job's placement and controller."""


class DeviceRequestError(ValueError):
    """An operator's request names an unknown node or device, or releases a device that is not
    separated; the message says which."""


async def restored_centre(store: kv.KeyValueStore) -> FaultCentre:
    """A fault centre with the state a predecessor left in ``store`` (a state that cannot be
    read is logged and left: the centre starts empty)."""
    centre = FaultCentre()
    entry = await store.get(STATE_KEY)
    if entry is not None:
        try:
            state = json.loads(entry.value)
            if not isinstance(state, dict):
                raise ValueError("must be a JSON object")
            centre.restore(state)
        except ValueError as error:
            logger.warning("the fault centre's state in the store (%s) is not used: %s",
                           STATE_KEY, error)
            centre = FaultCentre()
    return centre


class FaultIntake:
    def __init__(self, centre: FaultCentre, engine: device_health.FaultEngine,
                 writer: trailing.TrailingWriter, *, clock: clocks.Clock,
                 placements: Placements,
                 job_on: Callable[[str], job_controller.JobController | None],
                 devices_of: Callable[[str], Collection[int] | None]) -> None:
        """``engine``: grades events (the devices' history); ``writer``: the controller's own,
        fenced; ``job_on``: the job on a node's host; ``devices_of``: a node's devices as its
        last report listed them (None: an unknown node)."""
        self.centre = centre
        self._engine = engine
        self._writer = writer
        self._clock = clock
        self._placements = placements
        self._job_on = job_on
        self._devices_of = devices_of
        self.levels: dict[str, Level] = {}
        """Each device's level as last graded here."""
        self._pending: dict[DeviceFaultEvent, tuple[device_health.DeviceHealth, str]] = {}
        self._placed: dict[str, JobPlacement] = {}
        self._relations_acted: set[tuple[str, str]] = set()
        self._state = b""
        self.on_node_unhealthy: Callable[[str, str], None] | None = None
        """Told ``(node, why)`` when a host's node document comes to say UnHealthy."""
        self._unhealthy: dict[str, str] = {}
        self._faulted: dict[str, int] = {}
        """Each job's rank of its last fault."""
        self._retrying: dict[tuple[str, str], float] = {}
        """(job, device) -> when its step retry began, until it completes."""

    # --- input ------------------------------------------------------------------------------

    async def device_fault(self, event: DeviceFaultEvent, *, reported_by: str
                           ) -> device_health.DeviceHealth:
        """Grade ``event``, hand it to the centre, and evaluate at once; its device's health."""
        health = self._engine.report(event)
        self.levels[event.device] = health.level
        self._pending[event] = (health, reported_by)
        self.centre.device_fault(event, level=health.level)
        self.evaluate()
        return health

    def level_changed(self, health: device_health.DeviceHealth) -> None:
        """A level time alone changed (the level watch): kept, and to the job on its host."""
        self.levels[health.device] = health.level
        job = self._job_on(health.device.partition("/")[0])
        if job is not None:
            job.device_level_changed(health)

    def host_documents(self, node: str, documents: Mapping[str, str]) -> None:
        """A host's documents as its agent sent them (name prefix -> the ConfigMap's data as
        JSON); one that cannot be read is logged, naming it, and left out."""
        parsed: dict[str, object] = {}
        for prefix, text in documents.items():
            try:
                parsed[prefix] = _document(text, _CONFIG_KEYS[prefix])
            except ValueError as error:
                logger.warning("%s%s is refused: %s", prefix, node, error)
        try:
            self.centre.node_documents(
                node, device_info=parsed.get(node_documents.DEVICE_INFO_PREFIX),
                switch_info=parsed.get(node_documents.SWITCH_INFO_PREFIX),
                node_info=parsed.get(node_documents.NODE_INFO_PREFIX))
        except node_documents.DocumentError as error:
            logger.warning("the documents of %s are refused: %s", node, error)
            return
        root = parsed.get(node_documents.NODE_INFO_PREFIX)
        if isinstance(root, dict):
            self._node_status(node, root)

    def job_event(self, job: str, placement: Mapping[str, int], event: events.Event) -> None:
        """What a running job records, for the step retries it reports (the original's job
        reports its recovery to the fault centre): a retry decided for a fault on a rank is
        that rank's device recovering, and the retry's completion completes it, so the centre
        keeps the retry codes on that device hidden (``placement``: device -> rank)."""
        if isinstance(event, events.FaultDetected):
            self._faulted[job] = event.rank
            return
        if not isinstance(event, (events.DecisionMade, events.RecoveryCompleted)):
            return
        rank = self._faulted.get(job)
        device = next((name for name, held in placement.items() if held == rank), None)
        if event.strategy != policy.Strategy.RETRY or device is None:
            return
        now = self._clock.wall()
        if isinstance(event, events.DecisionMade):
            self._retrying[(job, device)] = now
            self.centre.recovery_report(job=job, device=device, recover_time=now)
        elif (job, device) in self._retrying:
            self.centre.recovery_report(job=job, device=device, complete_time=now,
                                        recover_time=self._retrying.pop((job, device)))

    def unhealthy(self, node: str) -> str | None:
        """Why ``node`` is UnHealthy, as its last node document says; None while it is not."""
        return self._unhealthy.get(node)

    def _node_status(self, node: str, document: Mapping[str, object]) -> None:
        info = document.get("NodeInfo")
        try:
            status = node_faults.NodeInfo.from_data(info if isinstance(info, dict) else {})
        except ValueError as error:
            logger.warning("%s%s is refused: %s", node_documents.NODE_INFO_PREFIX, node, error)
            return
        if status.node_status is not NodeStatus.UNHEALTHY:
            if self._unhealthy.pop(node, None) is not None:
                logger.warning("node %s is %s again", node, status.node_status)
            return
        if node in self._unhealthy:
            return
        why = self._unhealthy[node] = status.describe(node)
        logger.warning("%s", why)
        if self.on_node_unhealthy is not None:
            self.on_node_unhealthy(node, why)

    # --- the operator -----------------------------------------------------------------------

    def separate(self, node: str, device: int, reason: str) -> str:
        """Take a device out of use until an operator releases it; what was done.

        Raises:
            DeviceRequestError: the node or the device is unknown.
        """
        name = self._known(node, device)
        if name in self.centre.manual.separated:
            return f"{name} is separated already"
        now = self._clock.wall()
        running = self._placements()
        self._place(running, now)
        self._separations(self.centre.separate(name, now), now, running)
        logger.warning("%s separated by an operator: %s", name, reason or "no reason given")
        self.evaluate()
        return f"{name} separated"

    def release(self, node: str, device: int, reason: str) -> str:
        """Put a separated device back in use (also a ManuallySeparateNPU its fault history
        gave it); what was done.

        Raises:
            DeviceRequestError: the node or the device is unknown, or it is not separated.
        """
        name = self._known(node, device)
        by_centre = name in self.centre.manual.separated
        if not by_centre and self.levels.get(name) is not Level.MANUALLY_SEPARATE_NPU:
            raise DeviceRequestError(f"device {device} of node {node} is not separated")
        now = self._clock.wall()
        if by_centre:
            self.centre.release(name, now)
        self.levels[name] = self._engine.release(name, now).level
        logger.warning("%s released by an operator: %s", name, reason or "no reason given")
        self.evaluate()
        return f"{name} released: a new job may use it"

    def _known(self, node: str, device: int) -> str:
        devices = self._devices_of(node)
        if devices is None:
            raise DeviceRequestError(f"node {node!r} is unknown: no host of that name reported "
                                     "its devices")
        if device not in devices:
            shown = ", ".join(str(number) for number in sorted(devices)) or "none"
            raise DeviceRequestError(f"device {device} is unknown on node {node} (its devices: "
                                     f"{shown})")
        return f"{node}/device-{device}"

    def node_status(self, node: str, devices: Collection[int],
                    held: Mapping[int, Collection[str]]) -> pb.NodeDevices:
        """A host's devices for ``trainguard status``: level, separation, codes, job."""
        jobs = {device: job for job, placement in self._placed.items()
                for device in placement.ranks}
        separated = self.centre.manual.separated
        answer = pb.NodeDevices(node=node, jobs=sorted(
            {job for device, job in jobs.items() if device.rpartition("/")[0] == node}))
        for number in sorted(devices):
            name = f"{node}/device-{number}"
            level = (Level.MANUALLY_SEPARATE_NPU if name in separated
                     else self.levels.get(name, Level.NORMAL_NPU))
            answer.devices.add(device=number, level=str(level), health=levels.health(level),
                               separated=name in separated, codes=sorted(held.get(number, ())),
                               job=jobs.get(name, ""))
        return answer

    # --- evaluation -------------------------------------------------------------------------

    async def run(self) -> None:
        """Evaluate every :data:`EVALUATE_INTERVAL` seconds, until cancelled."""
        while True:
            await asyncio.sleep(EVALUATE_INTERVAL)
            try:
                self.evaluate()
            except Exception:  # the next tick may succeed; the intake goes on
                logger.exception("the fault centre's evaluation failed")

    def evaluate(self) -> Evaluation:
        """Place and end jobs, evaluate the centre now, and act on what it decided."""
        now = self._clock.wall()
        running = self._placements()
        self._place(running, now)
        result = self.centre.evaluate(now)
        for delivery in result.deliveries:
            graded = self._pending.pop(delivery.event, None)
            placed = running.get(delivery.job) if delivery.job is not None else None
            job = (placed[1] if placed is not None
                   else self._job_on(delivery.event.device.partition("/")[0]))
            if graded is not None and job is not None:
                job.device_graded(delivery.event, graded[0], reported_by=graded[1])
        self._pending = {event: graded for event, graded in self._pending.items()
                         if event.assertion is not Assertion.RECOVER
                         and event.time >= now - PENDING_KEPT}
        self._separations(result.separations, now, running)
        for decision in result.relations:
            self._relate(decision, now, running)
        for write in result.writes:
            data = None if write.data is None else dict(write.data)
            self._writer.set(device_reports.DOCUMENTS + write.name,
                             None if data is None else json.dumps(data, sort_keys=True).encode())
        state = json.dumps(self.centre.export(), sort_keys=True).encode()
        if state != self._state:
            self._state = state
            self._writer.set(STATE_KEY, state)
        return result

    def _separations(self, changes: Iterable[SeparationChange], now: float,
                     running: Mapping[str, tuple[JobPlacement, job_controller.JobController]]
                     ) -> None:
        for change in changes:
            if change.separated:
                self._isolate(change.device, SEPARATION_CODE, Level.MANUALLY_SEPARATE_NPU, now,
                              running, why=change.reason)
            else:
                self.levels[change.device] = self._engine.release(change.device, now).level

    def _place(self, running: Mapping[str, tuple[JobPlacement, job_controller.JobController]],
               now: float) -> None:
        for job in set(self._placed) - set(running):
            del self._placed[job]
            self.centre.end_job(job)
            self._relations_acted = {acted for acted in self._relations_acted if acted[0] != job}
        for job, (placement, _) in running.items():
            if self._placed.get(job) == placement:
                continue
            self._placed[job] = placement
            self.centre.place_job(placement)
            for device in sorted(set(placement.ranks) & self.centre.manual.separated):
                self._isolate(device, SEPARATION_CODE, Level.MANUALLY_SEPARATE_NPU, now,
                              running, why="separated before the job was placed")

    def _relate(self, decision: RelationDecision, now: float,
                running: Mapping[str, tuple[JobPlacement, job_controller.JobController]]
                ) -> None:
        job, node, codes = decision.job, decision.node, decision.codes
        if decision.strategy is not Strategy.SEPARATE:
            logger.info("job %s: node %s is %s by the relation rules (%s)", job, node,
                        decision.strategy, ", ".join(codes))
            return
        if (job, node) in self._relations_acted or job not in running:
            return
        self._relations_acted.add((job, node))
        for device in sorted(running[job][0].ranks):
            if (split_device(device) or ("", 0))[0] == node:
                self._isolate(device, RELATION_CODE, Level.SEPARATE_NPU, now, running,
                              why=f"relation rule ({', '.join(codes)})")

    def _isolate(self, device: str, code: str, level: Level, now: float,
                 running: Mapping[str, tuple[JobPlacement, job_controller.JobController]], *,
                 why: str) -> None:
        """Hand the job on ``device`` a one-off fault at an isolating ``level``: it moves its
        rank and never uses the device again."""
        job = next((controller for placement, controller in running.values()
                    if device in placement.ranks), None)
        event = DeviceFaultEvent(device, code, Assertion.ONCE, now, level=level)
        health = self._engine.report(event)
        if job is not None:
            job.device_graded(event, health, reported_by=f"the fault centre: {why}")

    async def close(self) -> None:
        """Write the state as it is now (a successor restores it)."""
        self._writer.set(STATE_KEY, json.dumps(self.centre.export(), sort_keys=True).encode())
        with contextlib.suppress(kv.UnavailableError, kv.FencedError):
            await self._writer.flush()


def _document(text: str, key: str) -> object:
    """The document a host's ConfigMap data (JSON) holds under ``key``, parsed; the text may
    also be the document itself.

    Raises:
        ValueError: it is not JSON, or ``key``'s text is not (the message names it).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error})") from error
    if isinstance(data, dict) and isinstance(data.get(key), str):
        try:
            return json.loads(data[key])
        except json.JSONDecodeError as error:
            raise ValueError(f"{key} is not JSON ({error})") from error
    return data
