"""The controller's glue around its fault centre (fault_intake), on a fake clock: what reaches
a job and when, operator separations and their errors, and the state a successor restores."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import cast

import pytest

from tests.controller.test_controller_job_controller import FakeClock
from trainguard.controller import fault_intake, job_controller
from trainguard.controller.device_reports import NODE_INFO
from trainguard.controller.fault_centre.api import JobPlacement
from trainguard.controller.fault_centre.centre import FaultCentre
from trainguard.faults import process
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.node import node_faults
from trainguard.job import events
from trainguard.store import sqlite_kv, trailing

UCE = "80E01801"
COMPANION = "80C98009"  # held 5 s: dropped if a memory error (UCE) comes near it


class FakeJob:
    def __init__(self) -> None:
        self.graded: list[tuple[str, str, str, str]] = []

    def device_graded(self, event: DeviceFaultEvent, health: device_health.DeviceHealth, *,
                      reported_by: str) -> device_health.DeviceHealth:
        self.graded.append((event.device, event.code, str(health.level), reported_by))
        return health


class Cluster:
    """One job on host-a's devices 0 and 1 (ranks 0, 1); host-a reported devices 0..3."""

    def __init__(self, store: sqlite_kv.SqliteKeyValueStore, *,
                 centre: FaultCentre | None = None) -> None:
        self.clock = FakeClock()
        self.job = FakeJob()
        self.jobs: dict[str, tuple[JobPlacement, job_controller.JobController]] = {
            "train": (JobPlacement("train", {"host-a/device-0": 0, "host-a/device-1": 1}),
                      cast(job_controller.JobController, self.job))}
        self.writer = trailing.TrailingWriter(store, what="test documents")
        self.intake = fault_intake.FaultIntake(
            centre or FaultCentre(), device_health.FaultEngine(), self.writer,
            clock=self.clock, placements=lambda: self.jobs, job_on=lambda node: None,
            devices_of=lambda node: range(4) if node == "host-a" else None)

    async def event(self, device: int, code: str, assertion: Assertion = Assertion.OCCUR
                    ) -> None:
        await self.intake.device_fault(DeviceFaultEvent(
            f"host-a/device-{device}", code, assertion, self.clock.wall()), reported_by="test")


def _open(tmp_path: Path) -> sqlite_kv.SqliteKeyValueStore:
    return sqlite_kv.SqliteKeyValueStore.open(tmp_path / "kv.db")


def test_an_unheld_fault_reaches_the_job_at_once_and_a_companion_code_after_5_s(
        tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], list[str], list[str]]:
        store = _open(tmp_path)
        try:
            cluster = Cluster(store)
            await cluster.event(0, UCE)
            at_once = [code for _, code, _, _ in cluster.job.graded]
            await cluster.event(1, COMPANION)
            held = [code for _, code, _, _ in cluster.job.graded]
            cluster.clock.now += 5.5
            cluster.intake.evaluate()
            return at_once, held, [code for _, code, _, _ in cluster.job.graded]
        finally:
            await store.close()

    at_once, held, later = asyncio.run(scenario())
    assert at_once == [UCE], "no filter holds a memory error of a job that does not retry"
    assert held == [UCE], "the companion code is held 5 s"
    assert later == [UCE, COMPANION]


def test_a_companion_code_near_a_memory_error_never_reaches_the_job(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        store = _open(tmp_path)
        try:
            cluster = Cluster(store)
            await cluster.event(1, COMPANION)
            cluster.clock.now += 2
            await cluster.event(1, UCE)
            cluster.clock.now += 10
            cluster.intake.evaluate()
            return [code for _, code, _, _ in cluster.job.graded]
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [UCE]


def test_separation_moves_the_rank_survives_a_successor_and_release_checks_its_device(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        store = _open(tmp_path)
        try:
            cluster = Cluster(store)
            with pytest.raises(fault_intake.DeviceRequestError, match="node 'host-b' is unknown"):
                cluster.intake.separate("host-b", 0, "")
            with pytest.raises(fault_intake.DeviceRequestError,
                               match=r"device 7 is unknown on node host-a \(its devices: 0, 1"):
                cluster.intake.separate("host-a", 7, "")
            with pytest.raises(fault_intake.DeviceRequestError, match="is not separated"):
                cluster.intake.release("host-a", 1, "")
            assert cluster.intake.separate("host-a", 1, "bad HBM") == "host-a/device-1 separated"
            assert cluster.job.graded == [
                ("host-a/device-1", fault_intake.SEPARATION_CODE, "ManuallySeparateNPU",
                 "the fault centre: separated by an operator")]
            status = cluster.intake.node_status("host-a", range(4), {})
            assert [(d.device, d.level, d.health, d.separated, d.job) for d in status.devices][
                :2] == [(0, "NormalNPU", "healthy", False, "train"),
                        (1, "ManuallySeparateNPU", "isolated", True, "train")]
            await cluster.writer.flush()
            stored = await store.get("documents/fault-config-train")
            assert stored is not None
            assert json.loads(json.loads(stored.value)["fault-npus"])["FaultRankIds"] == ["1"]

            successor = Cluster(store, centre=await fault_intake.restored_centre(store))
            successor.intake.evaluate()
            assert successor.job.graded[0][:3] == (
                "host-a/device-1", fault_intake.SEPARATION_CODE, "ManuallySeparateNPU"), (
                "a successor keeps the separation and hands it to the job placed on it")
            assert successor.intake.release("host-a", 1, "fixed").endswith("a new job may use it")
            assert "host-a/device-1" not in successor.intake.centre.manual.separated
        finally:
            await store.close()

    asyncio.run(scenario())


def _node_document(*alarms: node_faults.NodeFaultDevice) -> str:
    """host-a's node document as its agent sends it (the ConfigMap's data, as JSON)."""
    info = node_faults.node_info(alarms, table=node_faults.NodeCodeTable.from_document(
        {"FaultTypeCode": {"NotHandleFaultCodes": ["00000001"], "PreSeparateFaultCodes": [],
                           "SeparateFaultCodes": ["08000001"]}})[0] or pytest.fail("table"))
    return json.dumps({"NodeInfo": json.dumps(info.to_data())})


def test_a_node_that_comes_to_say_unhealthy_is_told_once_until_it_is_healthy_again(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        cluster = Cluster(_open(tmp_path))
        told: list[tuple[str, str]] = []
        cluster.intake.on_node_unhealthy = lambda node, why: told.append((node, why))
        power = node_faults.NodeFaultDevice("Power Supply", 81, ("08000001",))
        minor = node_faults.NodeFaultDevice("CPU", 1, ("00000001",))
        for alarms in ((minor,), (minor, power), (power,), (), (power,)):
            cluster.intake.host_documents("host-a", {NODE_INFO: _node_document(*alarms)})
            if alarms == (power,) and len(told) == 1:
                assert cluster.intake.unhealthy("host-a") == told[0][1]
        why = "node host-a is UnHealthy: Power Supply 81 08000001 (SeparateFault)"
        assert told == [("host-a", "node host-a is UnHealthy: CPU 1 00000001 (NotHandleFault); "
                                   "Power Supply 81 08000001 (SeparateFault)"), ("host-a", why)]
        assert cluster.intake.unhealthy("host-a") == why
        assert cluster.intake.unhealthy("host-b") is None

    asyncio.run(scenario())


def test_a_node_document_that_cannot_be_read_tells_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        cluster = Cluster(_open(tmp_path))
        told: list[str] = []
        cluster.intake.on_node_unhealthy = lambda node, why: told.append(why)
        cluster.intake.host_documents("host-a", {NODE_INFO: '{"NodeInfo": "{not json"}'})
        document = json.loads(json.loads(_node_document(
            node_faults.NodeFaultDevice("Power Supply", 81, ("08000001",))))["NodeInfo"])
        document["CheckCode"] = "0" * 64  # edited after it was signed
        cluster.intake.host_documents("host-a", {NODE_INFO: json.dumps(document)})
        assert told == []
        assert cluster.intake.unhealthy("host-a") is None

    asyncio.run(scenario())


def _step_retry(job: str, *, completed: bool) -> list[events.Event]:
    """What a job records when a fault on rank 0 is retried (and, ``completed``, recovers)."""
    fault = events.FaultDetected(
        job=job, generation=0, rank=0, pid=7, fault_kind=process.ProcessFaultKind.RAISED,
        returncode=None, last_step=4, detect_seconds=0.01, detected_at=0.0, injected=None,
        detail="", error_excerpt="", description="memory error", code="")
    decided = events.DecisionMade(job=job, generation=0, strategy="retry", reason="",
                                  restarts_left=2)
    done = events.RecoveryCompleted(job=job, generation=0, fault_rank=0, strategy="retry",
                                    detect_seconds=0.01, recover_seconds=0.5, steps_lost=0,
                                    restore_source="memory", restore_step=4)
    return [fault, decided, *([done] if completed else [])]


@pytest.mark.parametrize("completed", [True, False], ids=["retry-completed", "retry-stuck"])
def test_a_jobs_step_retry_keeps_the_memory_error_on_its_device_hidden_if_it_completes(
        tmp_path: Path, completed: bool) -> None:
    """The job retries steps: the memory error on device 0 is held 10 s; the job's records (a
    retry decided, then completed) reach the centre as its recovery report, so the fault stays
    hidden for good; a retry never completed shows it 30 s after the report."""
    async def scenario() -> list[str]:
        store = _open(tmp_path)
        try:
            cluster = Cluster(store)
            placement, job = cluster.jobs["train"]
            cluster.jobs["train"] = (dataclasses.replace(placement, retries_steps=True), job)
            await cluster.event(0, UCE)
            for event in _step_retry("train", completed=completed):
                cluster.clock.now += 1
                cluster.intake.job_event("train", placement.ranks, event)
            for _ in range(60):
                cluster.clock.now += 1
                cluster.intake.evaluate()
            return [code for _, code, _, _ in cluster.job.graded]
        finally:
            await store.close()

    assert asyncio.run(scenario()) == ([] if completed else [UCE])
