"""A device fault reported from outside the job's processes (a public fault) drives handling:
at an isolating level on a device a rank is on, that rank moves off it while its process was
healthy; at any other level, or on a device no rank is on, it is recorded only."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.test_controller_job_controller import bounded, run_scenario
from tests.controller.test_device_levels import _harness
from trainguard.controller import policy
from trainguard.faults import process
from trainguard.faults.device import customization, device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level
from trainguard.job import events
from trainguard.store import sqlite

CODE = "public:220001001"  # SeparateNPU in publicFaultConfiguration.json


@pytest.fixture
def store(tmp_path: Path) -> Iterator[sqlite.SqliteStore]:
    opened = sqlite.SqliteStore.open(tmp_path / "state.db")
    yield opened
    opened.close()


def _report(device: str, level: Level, *, code: str = CODE,
            assertion: Assertion = Assertion.OCCUR) -> DeviceFaultEvent:
    return DeviceFaultEvent(device, code, assertion, 1_700_000_000.0, level=level)


def test_a_separate_npu_report_moves_the_rank_on_the_device_to_a_spare(
        store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=1, per_host=2)
        run = asyncio.create_task(h.controller.run())
        first = await h.next_generation()
        first.completed_step = 10

        await h.controller.device_fault(_report("host-1/device-0", Level.SEPARATE_NPU),
                                        reported_by="public fault CCAE/fault-0001")
        second = await h.next_generation()
        assert second.workers[2].device == 4  # rank 2 (host-1's device 0) is on the spare
        assert not first.outcome.done()  # no worker failed: the report ended the generation
        second.succeed()
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.SUCCEEDED
        (record,) = result.faults
        assert (record.fault.rank, record.fault.kind, record.fault.level) == (
            2, process.ProcessFaultKind.DEVICE_REPORTED, Level.SEPARATE_NPU)
        assert record.decision.strategy is policy.Strategy.RECOVER
        assert ("recover", (1, [2], True)) in h.agent.calls
        (reported,) = [e.data for e in h.store.events(kinds=["device-fault-reported"])]
        assert reported == {
            "job": "demo", "generation": 0, "device": "host-1/device-0", "code": CODE,
            "assertion": "occur", "level": "SeparateNPU",
            "reported_by": "public fault CCAE/fault-0001", "rank": 2, "moves": True}
        # Graded once, by the report: the fault's own grading did not report the code again.
        assert not h.store.events(kinds=["device-fault-graded"])

    run_scenario(scenario)


def test_a_not_handle_report_and_a_report_of_an_unused_device_are_recorded_only(
        store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=1, per_host=2)
        run = asyncio.create_task(h.controller.run())
        first = await h.next_generation()
        await h.controller.device_fault(
            _report("host-0/device-1", Level.NOT_HANDLE_FAULT, code="public:200001006"),
            reported_by="public fault CCAE/x")
        await h.controller.device_fault(_report("host-0/device-7", Level.SEPARATE_NPU),
                                        reported_by="public fault CCAE/y")
        await asyncio.sleep(0)  # the watch would see a report now
        assert h.agent.generations.empty()
        first.succeed()
        result = await bounded(run)

        assert result.faults == ()
        assert [(e.data["device"], e.data["level"], e.data["rank"], e.data["moves"])
                for e in h.store.events(kinds=["device-fault-reported"])] == [
            ("host-0/device-1", "NotHandleFault", 1, False),
            ("host-0/device-7", "SeparateNPU", None, False)]

    run_scenario(scenario)


def test_a_report_keeps_its_senders_level_whatever_the_device_code_table_says(
        store: sqlite.SqliteStore) -> None:
    """"public:020001001" would read as hex 0x20001001 without its prefix; with the level
    given, the table is never asked, and a reconfiguration does not change it."""
    h = _harness(store)
    engine = h.controller.device_faults
    health = engine.report(_report("device-0", Level.NOT_HANDLE_FAULT, code="public:020001001"))
    assert health.level is Level.NOT_HANDLE_FAULT
    engine.reconfigure(table=engine.table, customization=customization.default_customization())
    assert engine.health("device-0", 1_700_000_001.0).level is Level.NOT_HANDLE_FAULT


def test_a_restart_business_report_restarts_the_rank_in_place_and_its_recovery_does_nothing(
        store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=1, per_host=2)
        run = asyncio.create_task(h.controller.run())
        first = await h.next_generation()
        first.completed_step = 10
        code = "8C204E00"  # RestartBusiness in faultCode.json, as a host's detector sends it
        await h.controller.device_fault(
            DeviceFaultEvent("host-0/device-1", code, Assertion.OCCUR, 1_700_000_000.0),
            reported_by="the devices of host-0")
        second = await h.next_generation()
        assert second.workers[1].device == 1, "the rank stays on its device"
        await h.controller.device_fault(
            DeviceFaultEvent("host-0/device-1", code, Assertion.RECOVER, 1_700_000_005.0),
            reported_by="the devices of host-0")
        await asyncio.sleep(0)
        assert h.agent.generations.empty(), "a recovery ends no generation"
        second.succeed()
        result = await bounded(run)

        (record,) = result.faults
        assert (record.fault.rank, record.fault.level) == (1, Level.RESTART_BUSINESS)
        assert record.decision.strategy is policy.Strategy.RECOVER_IN_PLACE

    run_scenario(scenario)


def test_a_link_down_outlasting_its_timeout_acts_when_time_alone_raises_it(
        store: sqlite.SqliteStore) -> None:
    """81078603 held past its FaultDuration timeout: with a customization that separates it,
    the rise seen by the level watch moves the rank; the change is recorded."""
    rules = customization.Customization.from_document({"FaultDuration": [
        {"EventId": ["81078603"], "FaultTimeout": 20, "RecoverTimeout": 60,
         "FaultHandling": "SeparateNPU"}]})[0]

    async def scenario() -> None:
        h = _harness(store, spares=1, per_host=2,
                     engine=device_health.FaultEngine(customization=rules))
        run = asyncio.create_task(h.controller.run())
        first = await h.next_generation()
        first.completed_step = 10
        start = h.clock.wall()
        await h.controller.device_fault(
            DeviceFaultEvent("host-0/device-0", "81078603", Assertion.OCCUR, start),
            reported_by="the devices of host-0")
        await asyncio.sleep(0)
        assert h.agent.generations.empty(), "within its timeout a link down only records"
        for health in h.controller.device_faults.sweep(start + 21.0):
            h.controller.device_level_changed(health)
        second = await h.next_generation()
        assert second.workers[0].device == 4  # moved to the spare
        second.succeed()
        await bounded(run)
        (changed,) = [e.data for e in h.store.events(kinds=["device-level-changed"])]
        assert (changed["device"], changed["level"]) == ("host-0/device-0", "SeparateNPU")

    run_scenario(scenario)
