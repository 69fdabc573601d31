"""A JobController that takes a running job over from a controller that went away: it goes on
with the hosts' generation, or restarts without spending the restart its predecessor spent;
and the record it leaves for its own successor."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.controller.test_controller_job_controller import (
    JOB,
    FakeAgent,
    FakeClock,
    FakeGeneration,
    FakeWorker,
    _exit_fault,
    bounded,
    run_scenario,
    store,
)
from tests.controller.test_repeated_failures import _fail
from trainguard import testing
from trainguard.controller import api, job_controller, job_record, policy
from trainguard.job import events
from trainguard.store import kv, recorder, sqlite, trailing

__all__ = ["store"]  # the fixture, imported from the JobController's tests


class _Taken:
    def __init__(self, store: sqlite.SqliteStore) -> None:
        self.kv = testing.key_value_store()
        self.writer = trailing.TrailingWriter(self.kv, what="the test job's record")
        self.agent = FakeAgent(2)
        self.events: list[events.Event] = []
        event_recorder = recorder.EventRecorder(store, FakeClock())
        event_recorder.subscribe(self.events.append)
        handle: api.AgentHandle = self.agent
        self.controller = job_controller.JobController(
            policy.RecoverySettings(max_restarts=3), job=JOB, world_size=2, agent=handle,
            recorder=event_recorder, clock=FakeClock(),
            journal=job_record.JobJournal(self.writer, JOB))

    async def record(self) -> dict[str, object] | None:
        await self.writer.flush()
        entry = await self.kv.get(job_record.PREFIX + JOB)
        return json.loads(entry.value) if entry is not None else None

    def took_over(self) -> list[tuple[int, bool]]:
        return [(e.generation, e.adopted) for e in self.events
                if isinstance(e, events.ControllerTookOver)]


def _generation(number: int) -> FakeGeneration:
    loop = asyncio.get_running_loop()
    return FakeGeneration(number=number, restart_count=1, master_port=29500 + number,
                          started_at=100.0, outcome=loop.create_future(),
                          all_stepping=loop.create_future(),
                          workers={rank: FakeWorker(rank) for rank in range(2)})


def test_a_recovery_under_way_is_finished_by_a_restart_that_spends_nothing(
        store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        taken = _Taken(store)
        taken.agent.current = _generation(4)  # the hosts, still in the faulted generation
        record = job_record.JobRecord(job=JOB, generation=4, restarts_used=2, resume_step=80,
                                      recovering=True)
        run = asyncio.create_task(taken.controller.run(resume=record))
        restarted = await bounded(taken.agent.generations.get())
        assert (restarted.number, restarted.restart_count) == (5, 2)
        assert taken.agent.called()[:2] == ["stop_workers", "start_generation"]
        assert await taken.record() == {
            "job": JOB, "generation": 5, "restarts_used": 2, "retries_used": 0,
            "isolated": [], "resume_step": 80, "repeated": None, "repeats": 0,
            "recovering": False}
        restarted.succeed()
        result = await bounded(run)
        assert (result.outcome, result.restarts_used) == (events.JobOutcome.SUCCEEDED, 2)
        assert taken.took_over() == [(5, False)]
        assert await taken.record() is None, "a job that ended leaves no record"

    run_scenario(scenario)


def test_the_hosts_generation_is_gone_on_with_and_its_fault_counts_from_the_record(
        store: sqlite.SqliteStore) -> None:
    async def scenario() -> None:
        taken = _Taken(store)
        adopted = taken.agent.current = _generation(3)
        record = job_record.JobRecord(job=JOB, generation=2, restarts_used=1)
        run = asyncio.create_task(taken.controller.run(resume=record, adopted=adopted))
        writing = asyncio.create_task(taken.writer.run())
        await asyncio.sleep(0)
        assert "start_generation" not in taken.agent.called()
        assert taken.took_over() == [(3, True)]
        adopted.workers[1].fail(1, at=150.0)
        adopted.fault(_exit_fault(1, at=150.0, last_step=20))
        restarted = await bounded(taken.agent.generations.get())
        assert (restarted.number, restarted.restart_count) == (4, 2)
        restarted.succeed()
        result = await bounded(run)
        writing.cancel()
        assert result.restarts_used == 2

    run_scenario(scenario)


def test_a_crash_loop_counted_before_the_takeover_is_counted_on(
        store: sqlite.SqliteStore) -> None:
    """The same failure twice under one controller, then once under its successor: the third
    in a row (crash-loop-repeats 3) ends the job, though the successor saw it only once."""
    async def scenario() -> None:
        first = _Taken(store)
        run = asyncio.create_task(first.controller.run())
        writing = asyncio.create_task(first.writer.run())
        for number in range(2):
            _fail(await bounded(first.agent.generations.get()), after=1.0, port=40000 + number)
        hosts = await bounded(first.agent.generations.get())  # the hosts train on in it
        await first.writer.flush()
        entry = await first.kv.get(job_record.PREFIX + JOB)
        assert entry is not None
        run.cancel()  # the controller is gone
        writing.cancel()
        record = job_record.JobRecord.from_json(entry.value, key=entry.key)
        assert (record.generation, record.repeats) == (2, 2)

        successor = _Taken(store)
        adopted = successor.agent.current = _generation(hosts.number)
        run = asyncio.create_task(successor.controller.run(resume=record, adopted=adopted))
        _fail(adopted, after=1.0, port=40002)
        result = await bounded(run)
        assert result.outcome is events.JobOutcome.FAILED
        assert result.reason.startswith(
            "crash loop: the same failure 3 times in a row, each before a step completed")
        assert result.restarts_used == 2, "the successor spent no restart on it"

    run_scenario(scenario)


def test_the_events_follow_the_job_to_the_controller_that_takes_it_over_and_go_when_it_ends(
        tmp_path: Path) -> None:
    """One run root holds every event of a job taken over: the successor adds its
    predecessor's, under their ids, before its own."""
    def started(generation: int) -> events.GenerationStarted:
        return events.GenerationStarted(
            job=JOB, generation=generation, world_size=2, master_port=29500,
            restart_count=generation, restore_source="none", restore_step=0, plan_seconds=0.0)

    async def scenario() -> tuple[list[str], list[tuple[int, int]], list[str]]:
        store = testing.key_value_store()
        await store.put(f"{job_record.EVENTS_PREFIX}{JOB}/000000000003", b"not json")
        first_writer = trailing.TrailingWriter(store, what="the first controller's")
        first = job_record.JobJournal(first_writer, JOB)
        before = sqlite.SqliteStore.open(tmp_path / "a" / "state.db")
        first_recorder = recorder.EventRecorder(before, FakeClock(), mirror=first.event)
        first_recorder.record(started(0))
        first_recorder.record(started(1))
        await first_writer.flush()
        kept = [entry.key for entry in (await store.list(job_record.EVENTS_PREFIX)).entries]

        second_writer = trailing.TrailingWriter(store, what="the successor's")
        second = job_record.JobJournal(second_writer, JOB)
        after = sqlite.SqliteStore.open(tmp_path / "b" / "state.db")
        after.insert_events(await second.take_events(store))
        recorder.EventRecorder(after, FakeClock(), mirror=second.event).record(started(2))
        held = [(event.id, event.data["generation"]) for event in after.events()]
        second.note(None)
        await second_writer.flush()
        left = [entry.key for entry in (await store.list(job_record.EVENTS_PREFIX)).entries]
        before.close()
        after.close()
        return kept, held, left

    kept, held, left = asyncio.run(scenario())
    assert kept == [f"job-events/{JOB}/{n:012d}" for n in (1, 2, 3)]
    assert held == [(1, 0), (2, 1), (3, 2)], "the unreadable one is passed over"
    assert left == [], "the job ended: its events went with its record"


def test_a_record_that_cannot_be_read_names_its_key() -> None:
    async def scenario() -> str:
        store = testing.key_value_store()
        await store.put(job_record.PREFIX + JOB, b'{"job": "demo", "generation": "x"}')
        try:
            await job_record.load(store, JOB)
        except ValueError as error:
            return str(error)
        raise AssertionError("an unreadable record was read")

    assert asyncio.run(scenario()) == (
        "the job record jobs/demo is unreadable: generation must be an integer")


def test_an_unreachable_store_holds_the_decision_back_no_longer_than_a_second(
        store: sqlite.SqliteStore) -> None:
    """Training never waits for the store: the decision's record waits for it instead."""
    async def scenario() -> None:
        taken = _Taken(store)

        async def unreachable(key: str, value: bytes, **_: object) -> int:
            raise kv.UnavailableError("no etcd member answered")

        taken.kv.put = unreachable  # type: ignore[method-assign]
        writing = asyncio.create_task(taken.writer.run())
        run = asyncio.create_task(taken.controller.run())
        first = await bounded(taken.agent.generations.get())
        first.workers[0].fail(1, at=150.0)
        loop = asyncio.get_running_loop()
        faulted_at = loop.time()
        first.fault(_exit_fault(0, at=150.0, last_step=20))
        second = await bounded(taken.agent.generations.get())
        assert loop.time() - faulted_at < job_record.SETTLE_SECONDS + 0.5
        assert taken.writer.unwritten == 1
        second.succeed()
        await bounded(run)
        writing.cancel()

    run_scenario(scenario)
