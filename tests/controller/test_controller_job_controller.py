"""JobController driven through its generations by a fake agent resolved from the test."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from trainguard import clock as clocks
from trainguard.controller import api, job_controller, policy
from trainguard.faults import process
from trainguard.ipc import messages
from trainguard.job import events, replicas
from trainguard.store import recorder, sqlite

JOB = "demo"
TIMEOUT = 10.0
T = TypeVar("T")


# --- fakes --------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now


@dataclasses.dataclass
class FakeWorker:
    rank: int
    returncode: int | None = None
    stopping: bool = False
    exited_at: float | None = None
    error: str = ""
    in_process: bool = False
    left: messages.LeftGeneration | None = None
    device: int = 0
    host: str = ""
    begun_step: int | None = None
    snapshot_step: int | None = None

    @property
    def alive(self) -> bool:
        return self.returncode is None

    def excerpt(self) -> str:
        return self.error

    def fail(self, returncode: int, *, at: float, error: str = "") -> None:
        self.returncode, self.exited_at, self.error = returncode, at, error


@dataclasses.dataclass
class FakeRestore:
    source: messages.RestoreSource = messages.RestoreSource.NONE
    step: int = 0
    note: str = ""

    @property
    def label(self) -> str:
        return str(self.source)


@dataclasses.dataclass
class FakeGeneration:
    number: int
    restart_count: int
    master_port: int
    started_at: float
    outcome: asyncio.Future[process.GenerationOutcome]
    all_stepping: asyncio.Future[float]
    workers: dict[int, FakeWorker]
    restore: FakeRestore = dataclasses.field(default_factory=FakeRestore)
    completed_step: int | None = None
    plan_seconds: float = 0.0
    kept: int = 0

    def succeed(self) -> None:
        for worker in self.workers.values():
            worker.returncode = 0
        self.outcome.set_result(process.GenerationOutcome(process.OutcomeKind.SUCCEEDED))

    def fault(self, fault: process.ProcessFault) -> None:
        self.outcome.set_result(process.GenerationOutcome(process.OutcomeKind.FAULT, fault=fault))


class FakeAgent:
    """Implements api.AgentHandle; every call is logged, generations are handed to the test."""

    def __init__(self, world_size: int, *, restores: Mapping[int, FakeRestore] = {}) -> None:
        self.world_size = world_size
        self.calls: list[tuple[str, Any]] = []
        self.generations: asyncio.Queue[FakeGeneration] = asyncio.Queue()
        self.current: FakeGeneration | None = None
        self._restores = restores
        self.spares_left = 0
        self.layout = replicas.ReplicaLayout(world_size, world_size)
        self.replicas_differ = ""

    @property
    def trusted_layout(self) -> replicas.ReplicaLayout | None:
        return None if self.replicas_differ else self.layout

    async def recover(self, number: int, *, restart_count: int, replace: Collection[int],
                      to_spares: bool) -> FakeGeneration:
        raise AssertionError("these jobs do not run under Session.run")

    async def dump(self, *, failed: Collection[int]) -> int | None:
        self.calls.append(("dump", sorted(failed)))
        return None

    async def start_generation(self, number: int, *, restart_count: int,
                               move: Collection[int] = ()) -> FakeGeneration:
        self.calls.append(("start_generation", (number, restart_count)))
        assert not move, "these jobs have no device faults"
        loop = asyncio.get_running_loop()
        generation = FakeGeneration(
            number=number, restart_count=restart_count, master_port=29500 + number,
            started_at=100.0 * (number + 1), outcome=loop.create_future(),
            all_stepping=loop.create_future(),
            workers={rank: FakeWorker(rank) for rank in range(self.world_size)},
            restore=self._restores.get(number, FakeRestore()))
        self.current = generation
        self.generations.put_nowait(generation)
        return generation

    async def complete_snapshots(self, *, failed_rank: int, step: int | None,
                                 timeout: float) -> None:
        self.calls.append(("complete_snapshots", (failed_rank, step, timeout)))

    async def stop_workers(self) -> None:
        self.calls.append(("stop_workers", None))
        assert self.current is not None
        for worker in self.current.workers.values():
            if worker.returncode is None:  # what the real agent does: SIGTERM, then reap
                worker.stopping, worker.returncode, worker.exited_at = True, -15, 999.0

    async def describe(self) -> FakeGeneration:
        self.calls.append(("describe", None))
        assert self.current is not None
        return self.current

    async def stop_at(self, step: int | None) -> None:
        self.calls.append(("stop_at", step))

    async def settle(self, *, timeout: float) -> None:
        self.calls.append(("settle", timeout))

    async def flush_checkpoints(self) -> None:
        self.calls.append(("flush_checkpoints", None))

    def called(self) -> list[str]:
        return [name for name, _ in self.calls]


@dataclasses.dataclass
class Harness:
    agent: FakeAgent
    controller: job_controller.JobController
    store: sqlite.SqliteStore
    clock: FakeClock
    recorded: list[events.Event] = dataclasses.field(default_factory=list)
    _changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def kinds(self) -> list[str]:
        return [event.kind for event in self.store.events()]

    def data(self, kind: str) -> list[dict[str, Any]]:
        return [event.data for event in self.store.events(kinds=[kind])]

    async def next_generation(self) -> FakeGeneration:
        return await bounded(self.agent.generations.get())

    async def wait_recorded(self, kind: str, *, count: int = 1) -> None:
        """Wait until ``count`` events of ``kind`` have been recorded."""
        while sum(kind == event.KIND for event in self.recorded) < count:
            self._changed.clear()
            await bounded(self._changed.wait())

    def listen(self, event: events.Event) -> None:
        self.recorded.append(event)
        self._changed.set()


async def bounded(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, timeout=TIMEOUT)


def make_harness(store: sqlite.SqliteStore, settings: policy.RecoverySettings, *,
                 world_size: int = 2, restores: Mapping[int, FakeRestore] = {}) -> Harness:
    clock = FakeClock()
    event_recorder = recorder.EventRecorder(store, clock)
    agent = FakeAgent(world_size, restores=restores)
    handle: api.AgentHandle = agent  # the fake implements the real interface
    controller = job_controller.JobController(settings, job=JOB, world_size=world_size,
                                              agent=handle, recorder=event_recorder, clock=clock)
    harness = Harness(agent, controller, store, clock)
    event_recorder.subscribe(harness.listen)
    return harness


def run_scenario(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), timeout=2 * TIMEOUT))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[sqlite.SqliteStore]:
    opened = sqlite.SqliteStore.open(tmp_path / "state.db")
    yield opened
    opened.close()


def _exit_fault(rank: int, *, at: float, pid: int = 4000, last_step: int | None = None,
                occurred_at: float | None = None) -> process.ProcessFault:
    return process.ProcessFault(rank=rank, pid=pid, kind=process.ProcessFaultKind.EXITED,
                                detected_at=at, returncode=1, last_step=last_step,
                                occurred_at=occurred_at)


# --- scenarios ----------------------------------------------------------------------------------


def test_success_on_the_first_generation(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=2))
        run = asyncio.create_task(h.controller.run())

        generation = await h.next_generation()
        assert (generation.number, generation.restart_count) == (0, 0)
        await h.wait_recorded("generation-started")
        status = h.store.get_document(f"job-status-{JOB}")
        assert status is not None
        assert status.data == {"job": JOB, "state": "running", "generation": 0,
                               "restarts_used": 0, "restarts_left": 2}
        generation.completed_step = 99
        h.clock.now += 12.5
        generation.succeed()
        result = await bounded(run)

        assert result == job_controller.JobResult(
            outcome=events.JobOutcome.SUCCEEDED, reason="every rank finished", exit_code=0,
            faults=(), generations=1, restarts_used=0, wall_seconds=12.5, resume_step=100)
        assert h.agent.called() == ["start_generation", "stop_workers", "flush_checkpoints"]
        assert h.kinds() == ["generation-started", "job-finished"]
        assert h.data("generation-started") == [{
            "job": JOB, "generation": 0, "world_size": 2, "master_port": 29500,
            "restart_count": 0, "restore_source": "none", "restore_step": 0,
            "plan_seconds": 0.0, "kept_processes": 0}]
        assert h.data("job-finished") == [{
            "job": JOB, "outcome": "succeeded", "reason": "every rank finished",
            "generations": 1, "restarts_used": 0, "exit_code": 0, "wall_seconds": 12.5}]
        status = h.store.get_document(f"job-status-{JOB}")
        assert status is not None
        assert status.data == {"job": JOB, "state": "succeeded", "reason": "every rank finished",
                               "restarts_used": 0, "exit_code": 0}
        assert status.updated == "2023-11-14T22:30:12.500Z"

    run_scenario(scenario)


def test_a_fault_then_success(store: sqlite.SqliteStore) -> None:
    restores = {1: FakeRestore(messages.RestoreSource.MEMORY, step=40, note="memory of rank 0")}

    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=2, snapshot_grace=1.5),
                         restores=restores)
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        first.completed_step = 41  # steps 0..41 done: a restart at 40 redoes 40 and 41
        first.workers[0].snapshot_step, first.workers[1].snapshot_step = 40, 41
        first.workers[1].fail(1, at=150.0, error="Traceback\nValueError: bad batch\n")
        fault = _exit_fault(1, at=150.25, pid=4001, last_step=42, occurred_at=150.0)
        first.fault(fault)

        second = await h.next_generation()
        assert (second.number, second.restart_count) == (1, 1)
        await h.wait_recorded("generation-started", count=2)
        assert h.kinds() == ["generation-started", "fault-detected", "decision",
                             "generation-started"]
        status = h.store.get_document(f"job-status-{JOB}")
        assert status is not None
        assert (status.data["state"], status.data["restarts_left"]) == ("recovering", 1)

        second.all_stepping.set_result(153.5)
        await h.wait_recorded("recovery-completed")
        status = h.store.get_document(f"job-status-{JOB}")
        assert status is not None
        assert status.data["state"] == "running"

        second.completed_step = 60
        second.succeed()
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.SUCCEEDED
        assert (result.exit_code, result.restarts_used, result.generations) == (0, 1, 2)
        assert result.resume_step == 61
        assert h.agent.calls == [
            ("start_generation", (0, 0)),
            ("describe", None),
            # The newest snapshot any rank holds: rank 0 is given the time to hold it too.
            ("complete_snapshots", (1, 41, 1.5)),
            ("stop_workers", None),
            ("start_generation", (1, 1)),
            ("stop_workers", None),
            ("flush_checkpoints", None),
        ]
        assert h.kinds() == ["generation-started", "fault-detected", "decision",
                             "generation-started", "recovery-completed", "job-finished"]

        (detected,) = h.data("fault-detected")
        assert detected["generation"] == 0
        assert detected["rank"] == 1
        assert detected["pid"] == 4001
        assert detected["fault_kind"] == "exited"
        assert detected["detect_seconds"] == 0.25
        assert detected["error_excerpt"] == "Traceback\nValueError: bad batch\n"
        assert detected["description"] == "rank 1 (pid 4001) failed with exit code 1 at step 42"
        (decision,) = h.data("decision")
        assert decision == {"job": JOB, "generation": 0, "strategy": "exit",
                            "reason": "exited process: restart every process (not retry "
                            "step, restart failed ranks, move to spare: the script does not use "
                            "session.run; not dump: not in --recover-strategy)",
                            "restarts_left": 1}
        started = h.data("generation-started")
        assert [(s["generation"], s["restart_count"], s["master_port"]) for s in started] == [
            (0, 0, 29500), (1, 1, 29501)]
        (recovery,) = h.data("recovery-completed")
        assert recovery == {
            "job": JOB, "generation": 1, "fault_rank": 1, "strategy": "exit",
            "detect_seconds": 0.25, "recover_seconds": 3.5, "steps_lost": 2,
            "restore_source": "memory", "restore_step": 40}

        (record,) = result.faults
        assert record.generation == 0
        assert record.decision.strategy is policy.Strategy.EXIT
        assert record.fault.error_excerpt == "Traceback\nValueError: bad batch\n"
        assert record.recovery is not None
        assert record.recovery.steps_lost == 2
        assert record.recovery.recover_seconds == 3.5

    run_scenario(scenario)


def test_recovery_time_counts_from_detection_when_the_fault_time_is_unknown(
    store: sqlite.SqliteStore,
) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=1))
        run = asyncio.create_task(h.controller.run())
        first = await h.next_generation()
        first.completed_step = 5
        first.workers[0].fail(-9, at=150.0)
        first.fault(process.ProcessFault(rank=0, pid=7, kind=process.ProcessFaultKind.SIGNALED,
                                         detected_at=150.5, returncode=-9))
        second = await h.next_generation()
        second.all_stepping.set_result(152.0)
        await h.wait_recorded("recovery-completed")
        second.succeed()
        await bounded(run)

        (recovery,) = h.data("recovery-completed")
        assert recovery["recover_seconds"] == 1.5
        assert recovery["detect_seconds"] is None
        assert recovery["steps_lost"] == 6  # steps 0..5 redone: nothing restored
        assert recovery["restore_source"] == "none"

    run_scenario(scenario)


def test_budget_exhausted_fails_with_root_cause_first(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=0), world_size=3)
        run = asyncio.create_task(h.controller.run())

        generation = await h.next_generation()
        generation.completed_step = 7
        # Rank 1 failed first (the root cause); rank 0 followed, once its collective broke.
        generation.workers[1].fail(1, at=150.0, error="Traceback\nRuntimeError: NaN loss\n")
        generation.workers[0].fail(
            -6, at=150.8, error="terminate called\nNCCL watchdog: collective timed out\n")
        generation.fault(_exit_fault(1, at=150.1, pid=4001, last_step=8))
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.FAILED
        assert result.exit_code == 1
        assert result.generations == 1
        assert result.restarts_used == 0
        assert result.reason == ("retry budget exhausted (max-restarts 0); last fault: "
                                 "rank 1 (pid 4001) failed with exit code 1 at step 8")
        assert result.errors == (
            "[root cause] rank 1: exit code 1\n"
            "    Traceback\n"
            "    RuntimeError: NaN loss\n"
            "[also failed] rank 0: SIGABRT\n"
            "    terminate called\n"
            "    NCCL watchdog: collective timed out")
        assert "rank 2" not in result.errors  # stopped by the agent, not failed by itself
        assert h.agent.called() == ["start_generation", "describe", "complete_snapshots",
                                    "stop_workers",
                                    "flush_checkpoints"]
        (decision,) = h.data("decision")
        assert (decision["strategy"], decision["restarts_left"]) == ("fail", 0)
        (finished,) = h.data("job-finished")
        assert (finished["outcome"], finished["exit_code"]) == ("failed", 1)
        assert finished["reason"] == result.reason
        status = h.store.get_document(f"job-status-{JOB}")
        assert status is not None
        assert status.data["state"] == "failed"
        (record,) = result.faults
        assert record.recovery is None

    run_scenario(scenario)


def test_reported_fault_is_the_root_cause_even_if_it_exited_last(
    store: sqlite.SqliteStore,
) -> None:
    # A rank that raised reports its exception before the slow interpreter teardown, so its
    # neighbours, aborted by the broken collective, may exit before it does.
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=0), world_size=4)
        run = asyncio.create_task(h.controller.run())

        generation = await h.next_generation()
        generation.completed_step = 3
        generation.workers[2].fail(1, at=151.0, error="ValueError: shape mismatch")
        generation.workers[0].fail(-6, at=150.6, error="NCCL abort (rank 0)")
        generation.workers[3].fail(-6, at=150.3, error="NCCL abort (rank 3)")
        generation.fault(process.ProcessFault(
            rank=2, pid=4002, kind=process.ProcessFaultKind.RAISED, detected_at=150.1,
            detail="ValueError: shape mismatch"))
        result = await bounded(run)

        titles = [line for line in result.errors.splitlines() if line.startswith("[")]
        assert titles == ["[root cause] rank 2: exit code 1",
                          "[also failed] rank 3: SIGABRT",
                          "[also failed] rank 0: SIGABRT"]
        assert result.reason.endswith("rank 2 (pid 4002) raised ValueError: shape mismatch")

    run_scenario(scenario)


def test_error_without_output_says_so(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=0), world_size=1)
        run = asyncio.create_task(h.controller.run())
        generation = await h.next_generation()
        generation.completed_step = 1
        generation.workers[0].fail(-9, at=150.0, error="  \n")
        generation.fault(process.ProcessFault(rank=0, pid=9, kind=process.ProcessFaultKind.
                                              SIGNALED, detected_at=150.2, returncode=-9))
        result = await bounded(run)

        assert result.errors == "[root cause] rank 0: SIGKILL\n    (no error output)"

    run_scenario(scenario)


def test_request_stop_while_a_generation_runs(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=3))
        run = asyncio.create_task(h.controller.run())

        generation = await h.next_generation()
        generation.completed_step = 30
        generation.workers[0].begun_step = 31
        generation.workers[1].begun_step = 30
        h.controller.request_stop("interrupted (SIGINT)", exit_code=130)
        h.controller.request_stop("terminated (SIGTERM)", exit_code=143)  # the first one wins
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.STOPPED
        assert result.reason == "interrupted (SIGINT)"
        assert result.exit_code == 130
        assert result.generations == 1
        assert result.resume_step == 31
        # One past the furthest rank: every rank finishes step 32, none has passed it.
        assert h.agent.calls[1:] == [("describe", None), ("stop_at", 32),
                                     ("flush_checkpoints", None)]
        assert not generation.outcome.done()
        (finished,) = h.data("job-finished")
        assert (finished["outcome"], finished["reason"], finished["exit_code"]) == (
            "stopped", "interrupted (SIGINT)", 130)

    run_scenario(scenario)


def test_request_stop_before_run_starts_nothing(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings())
        h.controller.request_stop("terminated (SIGTERM)", exit_code=143)

        result = await bounded(h.controller.run())

        assert (result.outcome, result.exit_code, result.generations) == (
            events.JobOutcome.STOPPED, 143, 0)
        assert h.agent.calls == []
        assert h.kinds() == ["job-finished"]

    run_scenario(scenario)


def test_stop_requested_by_a_worker(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=3))
        run = asyncio.create_task(h.controller.run())

        generation = await h.next_generation()
        generation.outcome.set_result(process.GenerationOutcome(
            process.OutcomeKind.STOP_REQUESTED, detail="rank 0 got SIGTERM"))
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.STOPPED
        assert (result.reason, result.exit_code) == ("rank 0 got SIGTERM", 143)
        # No rank began a step: no agreed step, each is ended as torchrun would.
        assert h.agent.calls[1:] == [("describe", None), ("stop_at", None),
                                     ("flush_checkpoints", None)]

    run_scenario(scenario)


def test_fatal_outcome_fails_with_its_detail(store: sqlite.SqliteStore) -> None:
    detail = "not enough shared memory for two snapshots of rank 0: need 8 GiB, have 2 GiB"

    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=5))
        run = asyncio.create_task(h.controller.run())

        generation = await h.next_generation()
        generation.outcome.set_result(process.GenerationOutcome(process.OutcomeKind.FATAL,
                                                                detail=detail))
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.FAILED
        assert (result.reason, result.exit_code, result.restarts_used) == (detail, 1, 0)
        assert result.faults == ()
        assert h.agent.called() == ["start_generation", "stop_workers", "flush_checkpoints"]
        assert h.kinds() == ["generation-started", "job-finished"]
        (finished,) = h.data("job-finished")
        assert (finished["outcome"], finished["reason"]) == ("failed", detail)

    run_scenario(scenario)


def test_crash_loop_settles_then_fails_without_spending_the_budget(
    store: sqlite.SqliteStore,
) -> None:
    async def scenario() -> None:
        settings = policy.RecoverySettings(max_restarts=3, crash_loop_settle=4.5)
        h = make_harness(store, settings)
        run = asyncio.create_task(h.controller.run())

        generation = await h.next_generation()  # started at 100.0
        generation.workers[0].fail(1, at=101.0, error="ModuleNotFoundError: No module 'x'")
        generation.workers[1].fail(1, at=101.2, error="ModuleNotFoundError: No module 'x'")
        generation.fault(_exit_fault(0, at=101.5))
        result = await bounded(run)

        assert h.agent.calls[:2] == [("start_generation", (0, 0)), ("settle", 4.5)]
        assert h.agent.called() == ["start_generation", "settle", "describe",
                                    "complete_snapshots",
                                    "stop_workers", "flush_checkpoints"]
        assert result.outcome is events.JobOutcome.FAILED
        assert result.exit_code == 1
        assert result.restarts_used == 0
        assert result.reason == ("crash loop: all 2 ranks failed within 1.5 s of the start, "
                                 "before completing a step; not retried")
        assert result.errors.startswith("[root cause] rank 0: exit code 1\n")
        assert "[also failed] rank 1: exit code 1" in result.errors
        (decision,) = h.data("decision")
        assert (decision["strategy"], decision["restarts_left"]) == ("fail", 3)

    run_scenario(scenario)


def test_early_fault_of_one_rank_settles_then_restarts(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=1))
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        first.workers[1].fail(1, at=101.0)
        first.fault(_exit_fault(1, at=101.1))  # rank 0 keeps running: no crash loop
        second = await h.next_generation()
        second.succeed()
        result = await bounded(run)

        assert h.agent.called()[:5] == ["start_generation", "settle", "describe",
                                        "complete_snapshots",
                                        "stop_workers"]
        assert (result.outcome, result.restarts_used) == (events.JobOutcome.SUCCEEDED, 1)
        assert h.kinds().count("recovery-completed") == 0  # never stepped: nothing measured

    run_scenario(scenario)


def test_late_fault_does_not_settle(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=1))
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()  # started at 100.0; window 10 s
        first.workers[1].fail(1, at=130.0)
        first.fault(_exit_fault(1, at=130.0))
        second = await h.next_generation()
        second.succeed()
        await bounded(run)

        assert "settle" not in h.agent.called()

    run_scenario(scenario)


def test_second_fault_exhausts_the_budget(store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=1))
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        first.completed_step = 10
        first.workers[0].fail(1, at=150.0)
        first.fault(_exit_fault(0, at=150.0, pid=1))
        second = await h.next_generation()  # started at 200.0
        second.completed_step = 20
        second.workers[1].fail(1, at=250.0, error="boom")
        second.fault(_exit_fault(1, at=250.0, pid=2))
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.FAILED
        assert (result.restarts_used, result.generations) == (1, 2)
        assert result.reason.startswith("retry budget exhausted (max-restarts 1)")
        assert [record.generation for record in result.faults] == [0, 1]
        assert [d["restarts_left"] for d in h.data("decision")] == [0, 0]
        assert [d["strategy"] for d in h.data("decision")] == ["exit", "fail"]
        assert result.resume_step == 21
        assert result.errors == "[root cause] rank 1: exit code 1\n    boom"

    run_scenario(scenario)


def test_unconditional_retries_have_a_budget_of_their_own(store: sqlite.SqliteStore) -> None:
    """fault-retry-times 1 (H12): a second failure with no hardware cause fails the job though
    restarts are left; a device fault between them does not spend it."""
    async def scenario() -> None:
        h = make_harness(store, policy.RecoverySettings(max_restarts=5, fault_retry_times=1))
        run = asyncio.create_task(h.controller.run())

        first = await h.next_generation()
        first.completed_step = 10
        first.fault(_exit_fault(0, at=150.0, pid=1))
        second = await h.next_generation()
        second.completed_step = 20
        second.fault(dataclasses.replace(_exit_fault(1, at=250.0, pid=2), code="80E01801"))
        third = await h.next_generation()
        third.completed_step = 30
        third.fault(_exit_fault(0, at=350.0, pid=3))
        result = await bounded(run)

        assert result.outcome is events.JobOutcome.FAILED
        assert result.restarts_used == 2
        assert [d["strategy"] for d in h.data("decision")] == ["exit", "exit", "fail"]
        assert result.reason.startswith(
            "unconditional retry budget exhausted (fault-retry-times 1: failures with no "
            "hardware cause); last fault: rank 0 (pid 3) failed with exit code 1")

    run_scenario(scenario)


def test_clock_protocol_is_satisfied_by_the_fake() -> None:
    clock: clocks.Clock = FakeClock()

    assert clock.wall() - clock.monotonic() == 1_700_000_000.0
