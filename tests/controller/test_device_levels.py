"""The controller grades a fault's device code through the FaultEngine: the device's history
decides. A second memory error on one device separates it (ManuallySeparateNPU), so the fault is
no longer retried; a SeparateNPU code is never retried nor recovered in place.

Driven through the JobController with the fakes of test_controller_job_controller, and an agent
that can recover in process (its workers run under Session.run).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controller.test_controller_job_controller import (
    JOB,
    FakeAgent,
    FakeClock,
    FakeGeneration,
    FakeWorker,
    Harness,
    _exit_fault,
    bounded,
    run_scenario,
)
from trainguard.controller import api, job_controller, policy
from trainguard.faults import process
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level
from trainguard.job import events, replicas
from trainguard.store import recorder, sqlite

UCE = "80E01801"  # RestartBusiness, retryable; twice in 24 h -> ManuallySeparateNPU
SEPARATE = "80E3A201"  # SeparateNPU


class RecoveringAgent(FakeAgent):
    """Workers under Session.run, each on its own device (the device number outlives the
    generation); a rank moved to a spare gets the next spare device."""

    def __init__(self, world_size: int, *, spares: int, dp_size: int,
                 per_host: int | None = None) -> None:
        """``per_host``: ranks on each of several hosts, each host numbering its devices from
        0 (None: one host)."""
        super().__init__(world_size)
        self.spares_left = spares
        self.layout = replicas.ReplicaLayout(world_size, dp_size)
        self.devices = {rank: rank % (per_host or world_size) for rank in range(world_size)}
        self._per_host = per_host
        self._next_spare = world_size
        self.moved: list[list[int]] = []  # the ranks each start_generation moved to spares

    def _workers(self) -> dict[int, FakeWorker]:
        return {rank: FakeWorker(rank, in_process=True, device=self.devices[rank],
                                 host=f"host-{rank // self._per_host}" if self._per_host else "")
                for rank in range(self.world_size)}

    async def start_generation(self, number: int, *, restart_count: int,
                               move: Collection[int] = ()) -> FakeGeneration:
        self.moved.append(sorted(move))
        self._move_to_spares(move)
        generation = await super().start_generation(number, restart_count=restart_count)
        generation.workers = self._workers()
        return generation

    def _move_to_spares(self, ranks: Collection[int]) -> None:
        if len(ranks) > self.spares_left:
            raise process.RecoveryError(f"{self.spares_left} spares for {len(ranks)} ranks")
        for rank in sorted(ranks):
            self.devices[rank] = self._next_spare
            self._next_spare += 1
            self.spares_left -= 1

    async def recover(self, number: int, *, restart_count: int, replace: Collection[int],
                      to_spares: bool) -> FakeGeneration:
        self.calls.append(("recover", (number, sorted(replace), to_spares)))
        if to_spares:
            self._move_to_spares(replace)
        loop = asyncio.get_running_loop()
        generation = FakeGeneration(
            number=number, restart_count=restart_count, master_port=29500 + number,
            started_at=100.0 * (number + 1), outcome=loop.create_future(),
            all_stepping=loop.create_future(), workers=self._workers(),
            kept=self.world_size - len(replace))
        self.current = generation
        self.generations.put_nowait(generation)
        return generation


@pytest.fixture
def store(tmp_path: Path) -> Iterator[sqlite.SqliteStore]:
    opened = sqlite.SqliteStore.open(tmp_path / "state.db")
    yield opened
    opened.close()


def _harness(store: sqlite.SqliteStore, *, spares: int = 1, dp_size: int = 2,
             world_size: int = 4, engine: device_health.FaultEngine | None = None,
             per_host: int | None = None) -> Harness:
    clock = FakeClock()
    event_recorder = recorder.EventRecorder(store, clock)
    agent = RecoveringAgent(world_size, spares=spares, dp_size=dp_size, per_host=per_host)
    handle: api.AgentHandle = agent
    controller = job_controller.JobController(
        policy.RecoverySettings(max_restarts=5), job=JOB, world_size=world_size, agent=handle,
        recorder=event_recorder, clock=clock, device_faults=engine)
    harness = Harness(agent, controller, store, clock)
    event_recorder.subscribe(harness.listen)
    return harness


def _raise(generation: FakeGeneration, rank: int, code: str, *, at: float) -> None:
    """Rank ``rank`` raised in its step with a device fault ``code`` (its process lives)."""
    generation.completed_step = 10
    generation.fault(process.ProcessFault(
        rank=rank, pid=5000 + rank, kind=process.ProcessFaultKind.RAISED, detected_at=at,
        code=code, detail=f"device error {code}", alive=True))


async def _recovered(h: Harness, generation: FakeGeneration, *, count: int) -> None:
    generation.all_stepping.set_result(generation.started_at + 1.0)
    await h.wait_recorded("recovery-completed", count=count)


def _decisions(h: Harness) -> list[tuple[str, str]]:
    return [(d["strategy"], d["reason"]) for d in h.data("decision")]


def _moved(h: Harness) -> list[list[int]]:
    """The ranks each start_generation moved to spare devices."""
    assert isinstance(h.agent, RecoveringAgent)
    return h.agent.moved


def _graded(h: Harness) -> list[dict[str, Any]]:
    return h.data("device-fault-graded")


# --- the memory error, twice on one device ------------------------------------------------------


def test_a_second_memory_error_on_one_device_moves_the_rank_to_a_spare(
        store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=1)
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        h.clock.now += 100.0
        _raise(first, 1, UCE, at=150.0)
        second = await h.next_generation()
        assert second.number == 1
        await _recovered(h, second, count=1)

        h.clock.now += 3600.0  # an hour later, the same device again
        _raise(second, 1, UCE, at=250.0)
        third = await h.next_generation()
        assert third.workers[1].device == 4  # the first spare
        await _recovered(h, third, count=2)
        third.succeed()
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.SUCCEEDED
        assert [record.decision.strategy for record in result.faults] == [
            policy.Strategy.RETRY, policy.Strategy.RECOVER]
        assert [name for name, _ in h.agent.calls if name == "recover"] == ["recover"] * 2
        assert [args for name, args in h.agent.calls if name == "recover"] == [
            (1, [], False), (2, [1], True)]

        (retry, recover) = _decisions(h)
        assert retry[0] == "retry"
        assert recover == ("recover", (
            "raised process: move the failed ranks to spare devices (not retry step, restart "
            "failed ranks: device-1 is isolated (ManuallySeparateNPU) after code 80E01801)"))

        first_grade, second_grade = _graded(h)
        assert first_grade == {
            "job": JOB, "generation": 0, "rank": 1, "device": "device-1", "code": UCE,
            "level": "RestartBusiness", "reset_policy": "restart",
            "fault_type": "CardUnhealthy", "upgrade_reasons": []}
        assert {key: second_grade[key] for key in ("generation", "rank", "device", "level",
                                                   "reset_policy", "fault_type")} == {
            "generation": 1, "rank": 1, "device": "device-1", "level": "ManuallySeparateNPU",
            "reset_policy": "isolate", "fault_type": "CardUnhealthy"}
        (reason,) = second_grade["upgrade_reasons"]
        assert {key: reason[key] for key in ("fault_code", "fault_level", "upgrade_type")} == {
            "fault_code": UCE, "fault_level": "ManuallySeparateNPU",
            "upgrade_type": "FaultFrequency"}

        graded = [record.fault for record in result.faults]
        assert [(f.device, f.level) for f in graded] == [
            ("device-1", Level.RESTART_BUSINESS), ("device-1", Level.MANUALLY_SEPARATE_NPU)]
        assert h.controller.device_faults.health("device-1", h.clock.wall()).manually_separated

    run_scenario(scenario)


def test_a_second_memory_error_without_spares_fails_the_job(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=0)
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        _raise(first, 2, UCE, at=150.0)
        second = await h.next_generation()
        await _recovered(h, second, count=1)
        h.clock.now += 60.0
        _raise(second, 2, UCE, at=250.0)
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.FAILED
        assert [record.decision.strategy for record in result.faults] == [
            policy.Strategy.RETRY, policy.Strategy.FAIL]
        assert result.reason == (
            "rank 2 is on an isolated device and 0 spare devices are left (--spare-devices): "
            "no restart may place a rank on an isolated device, and the job does not shrink; "
            "not restarted")
        assert _moved(h) == [[]], "no generation was started after the separation"
        assert [g["level"] for g in _graded(h)] == ["RestartBusiness", "ManuallySeparateNPU"]

    run_scenario(scenario)


@pytest.mark.parametrize(("dp_size", "differ", "why"), [
    (1, "", "a failed rank has no healthy data-parallel replica"),
    (2, "replica groups [[0, 2], [1, 3]] at dp-size 2",
     "the ranks found their replicas different, so none stands in for another")],
    ids=["no replica", "replicas found to differ"])
def test_a_second_memory_error_without_replicas_restarts_the_job(
        store: sqlite.SqliteStore, dp_size: int, differ: str, why: str) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=2, dp_size=dp_size)
        h.agent.replicas_differ = differ
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        _raise(first, 0, UCE, at=150.0)
        second = await h.next_generation()
        await _recovered(h, second, count=1)
        _raise(second, 0, UCE, at=250.0)
        third = await h.next_generation()
        third.succeed()
        result = await bounded(run)

        assert [record.decision.strategy for record in result.faults] == [
            policy.Strategy.RETRY, policy.Strategy.EXIT]
        assert why in _decisions(h)[1][1]
        assert _moved(h) == [[], [0]], "the restart moves rank 0 off its separated device"
        assert [w.device for w in third.workers.values()] == [4, 1, 2, 3]

    run_scenario(scenario)


def test_memory_errors_on_two_devices_are_each_retried(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=1)
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        _raise(first, 1, UCE, at=150.0)
        second = await h.next_generation()
        await _recovered(h, second, count=1)
        _raise(second, 2, UCE, at=250.0)  # another rank, another device
        third = await h.next_generation()
        await _recovered(h, third, count=2)
        third.succeed()
        result = await bounded(run)

        assert [record.decision.strategy for record in result.faults] == [
            policy.Strategy.RETRY, policy.Strategy.RETRY]
        assert [(g["device"], g["level"]) for g in _graded(h)] == [
            ("device-1", "RestartBusiness"), ("device-2", "RestartBusiness")]

    run_scenario(scenario)


def test_the_history_belongs_to_the_device_not_the_rank(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=2)
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        _raise(first, 1, UCE, at=150.0)
        second = await h.next_generation()
        await _recovered(h, second, count=1)
        _raise(second, 1, UCE, at=250.0)  # device-1 separated: rank 1 moves to device-4
        third = await h.next_generation()
        await _recovered(h, third, count=2)
        _raise(third, 1, UCE, at=350.0)  # the first error of device-4
        fourth = await h.next_generation()
        await _recovered(h, fourth, count=3)
        fourth.succeed()
        result = await bounded(run)

        assert [record.decision.strategy for record in result.faults] == [
            policy.Strategy.RETRY, policy.Strategy.RECOVER, policy.Strategy.RETRY]
        assert [(g["device"], g["level"]) for g in _graded(h)] == [
            ("device-1", "RestartBusiness"), ("device-1", "ManuallySeparateNPU"),
            ("device-4", "RestartBusiness")]

    run_scenario(scenario)


def test_a_separated_device_stays_out_of_use_for_every_later_restart(
        store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=1, dp_size=1)  # no replica: recover cannot be used
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        _raise(first, 3, UCE, at=150.0)
        second = await h.next_generation()
        await _recovered(h, second, count=1)
        _raise(second, 3, UCE, at=250.0)  # separated: the job restarts, rank 3 on the spare
        third = await h.next_generation()
        await _recovered(h, third, count=2)
        assert third.workers[3].device == 4
        third.fault(_exit_fault(0, at=350.0))  # a plain crash: every rank starts again
        fourth = await h.next_generation()
        await _recovered(h, fourth, count=3)
        fourth.succeed()
        result = await bounded(run)

        assert [record.decision.strategy for record in result.faults] == [
            policy.Strategy.RETRY, policy.Strategy.EXIT, policy.Strategy.RECOVER_IN_PLACE]
        assert _moved(h) == [[], [3]]
        assert [w.device for w in fourth.workers.values()] == [0, 1, 2, 4]

    run_scenario(scenario)


def test_across_hosts_a_device_is_its_hosts_own(store: sqlite.SqliteStore) -> None:
    """Two hosts each number their devices from 0: separating device 0 of host 0 moves rank 0
    alone, not rank 2 on device 0 of host 1 (one spare would not do for both)."""
    async def scenario() -> None:
        h = _harness(store, spares=1, dp_size=1, per_host=2)
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        _raise(first, 0, SEPARATE, at=150.0)
        second = await h.next_generation()
        await _recovered(h, second, count=1)
        second.succeed()
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.SUCCEEDED
        assert _moved(h) == [[], [0]]
        (graded,) = _graded(h)
        assert graded["device"] == "host-0/device-0"
        assert [(w.host, w.device) for w in second.workers.values()] == [
            ("host-0", 4), ("host-0", 1), ("host-1", 0), ("host-1", 1)]

    run_scenario(scenario)


# --- a separated device ------------------------------------------------------------------------


@pytest.mark.parametrize(("spares", "dp_size", "strategy"), [
    (1, 2, policy.Strategy.RECOVER), (1, 1, policy.Strategy.EXIT)])
def test_a_separate_npu_code_is_never_retried_nor_recovered_in_place(
        store: sqlite.SqliteStore, spares: int, dp_size: int, strategy: policy.Strategy
) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=spares, dp_size=dp_size)
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        _raise(first, 0, SEPARATE, at=150.0)
        second = await h.next_generation()
        await _recovered(h, second, count=1)
        second.succeed()
        result = await bounded(run)

        (record,) = result.faults
        assert record.decision.strategy is strategy
        assert record.fault.level is Level.SEPARATE_NPU
        (_, reason), = _decisions(h)
        assert ("not retry step: not every fault is transient; not restart failed ranks: "
                "device-0 is isolated (SeparateNPU) after code 80E3A201") in reason
        (graded,) = _graded(h)
        assert (graded["device"], graded["level"], graded["reset_policy"],
                graded["upgrade_reasons"]) == ("device-0", "SeparateNPU", "isolate", [])
        assert not any(name == "recover" and args[2] is False for name, args in h.agent.calls)
        assert second.workers[0].device == 4, "rank 0 never runs on device-0 again"

    run_scenario(scenario)


def test_a_separate_npu_code_without_a_spare_fails_the_job(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = _harness(store, spares=0)
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        _raise(first, 0, SEPARATE, at=150.0)
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.FAILED
        assert result.reason.startswith("rank 0 is on an isolated device and 0 spare devices")
        assert [name for name, _ in h.agent.calls].count("start_generation") == 1

    run_scenario(scenario)


# --- the same decisions through policy.decide and the engine ----------------------------------


def _context(fault: process.ProcessFault, *, spares: int) -> policy.FaultContext:
    return policy.FaultContext(
        fault=fault, age=100.0, progressed=True, world_size=4, failed=[fault],
        restarts_left=3, in_process=True, alive=range(4), spares_left=spares,
        layout=replicas.ReplicaLayout(4, 2))


def _graded_fault(engine: device_health.FaultEngine, code: str, time: float
                  ) -> process.ProcessFault:
    health = engine.report(DeviceFaultEvent("device-1", code, Assertion.ONCE, time))
    return process.ProcessFault(rank=1, pid=1, kind=process.ProcessFaultKind.RAISED,
                                detected_at=time, code=code, alive=True,
                                device=health.device, level=health.level)


@pytest.mark.parametrize(("spares", "second"), [(1, policy.Strategy.RECOVER),
                                                (0, policy.Strategy.EXIT)])
def test_policy_with_the_engines_levels(spares: int, second: policy.Strategy) -> None:
    engine = device_health.FaultEngine()
    settings = policy.RecoverySettings(max_restarts=5)

    once = _graded_fault(engine, UCE, 1000.0)
    assert (once.retryable, once.in_place) == (True, True)
    assert policy.decide(settings, _context(once, spares=spares)).strategy \
        is policy.Strategy.RETRY

    twice = _graded_fault(engine, UCE, 2000.0)
    assert twice.level is Level.MANUALLY_SEPARATE_NPU
    assert (twice.retryable, twice.in_place, twice.retry_code) == (False, False, True)
    assert policy.decide(settings, _context(twice, spares=spares)).strategy is second
