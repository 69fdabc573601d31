"""EventRecorder: one call logs an event, stores it and tells the listeners."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard import clock as clocks
from trainguard.faults import process
from trainguard.job import events
from trainguard.store import api, recorder, sqlite

ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


class FakeClock:
    def __init__(self, *, monotonic: float = 1000.0, wall: float = 1_700_000_000.25) -> None:
        self.now = monotonic
        self.wall_now = wall

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[sqlite.SqliteStore]:
    opened = sqlite.SqliteStore.open(tmp_path / "state.db")
    yield opened
    opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def events_recorder(store: sqlite.SqliteStore, clock: FakeClock) -> recorder.EventRecorder:
    return recorder.EventRecorder(store, clock)


def _generation_started(generation: int = 0) -> events.GenerationStarted:
    return events.GenerationStarted(job="demo", generation=generation, world_size=4,
                                    master_port=29500, restart_count=generation,
                                    restore_source="memory", restore_step=7, plan_seconds=0.01)


def test_fake_clock_is_a_clock() -> None:
    clock: clocks.Clock = FakeClock()

    assert clock.monotonic() == 1000.0


@pytest.mark.parametrize(("seconds", "text"), [
    (1_700_000_000.25, "2023-11-14T22:13:20.250Z"),
    (0.0, "1970-01-01T00:00:00.000Z"),
    (1_796_022_170.5, "2026-11-30T07:02:50.500Z"),
    (1_700_000_000.0009, "2023-11-14T22:13:20.000Z"),  # milliseconds are cut, not rounded
])
def test_iso_utc_format(seconds: float, text: str) -> None:
    assert clocks.iso_utc(seconds) == text
    assert ISO.fullmatch(clocks.iso_utc(seconds))


def test_record_stores_the_event_with_the_clock_time(
    events_recorder: recorder.EventRecorder, store: sqlite.SqliteStore
) -> None:
    event_id = events_recorder.record(_generation_started())

    (stored,) = store.events()
    assert stored == api.StoredEvent(
        id=event_id, time="2023-11-14T22:13:20.250Z", kind="generation-started",
        data={"job": "demo", "generation": 0, "world_size": 4, "master_port": 29500,
              "restart_count": 0, "restore_source": "memory", "restore_step": 7,
              "plan_seconds": 0.01, "kept_processes": 0})


def test_record_returns_growing_ids_and_uses_the_current_time(
    events_recorder: recorder.EventRecorder, store: sqlite.SqliteStore, clock: FakeClock
) -> None:
    first = events_recorder.record(_generation_started(0))
    clock.wall_now += 61.5
    second = events_recorder.record(_generation_started(1))

    assert second > first
    assert [e.time for e in store.events()] == ["2023-11-14T22:13:20.250Z",
                                                "2023-11-14T22:14:21.750Z"]


def test_record_serialises_enums_as_their_values(
    events_recorder: recorder.EventRecorder, store: sqlite.SqliteStore
) -> None:
    fault = process.ProcessFault(rank=2, pid=77, kind=process.ProcessFaultKind.SIGNALED,
                                 detected_at=5.0, returncode=-9, last_step=12)
    events_recorder.record(events.FaultDetected.of(job="demo", generation=1, fault=fault))

    (stored,) = store.events(kinds=["fault-detected"])
    assert stored.data["fault_kind"] == "signaled"
    assert stored.data["description"] == "rank 2 (pid 77) failed with SIGKILL at step 12"
    assert stored.data["detect_seconds"] is None


def test_record_logs_the_summary(events_recorder: recorder.EventRecorder,
                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="trainguard.store.recorder")

    events_recorder.record(_generation_started(3))

    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("trainguard.store.recorder", logging.INFO,
         "generation 3: 4 ranks, rendezvous on port 29500, state of step 7 from memory "
         "(chosen in 0.01 s)")]


def test_record_tells_every_listener_in_order(events_recorder: recorder.EventRecorder) -> None:
    seen: list[tuple[str, events.Event]] = []
    events_recorder.subscribe(lambda event: seen.append(("first", event)))
    events_recorder.subscribe(lambda event: seen.append(("second", event)))
    event = events.DecisionMade(job="demo", generation=0, strategy="exit",
                                reason="exited process: job-level restart", restarts_left=2)

    events_recorder.record(event)

    assert seen == [("first", event), ("second", event)]


def test_listener_sees_the_event_after_it_is_stored(
    events_recorder: recorder.EventRecorder, store: sqlite.SqliteStore
) -> None:
    stored_when_told: list[list[str]] = []
    events_recorder.subscribe(
        lambda event: stored_when_told.append([e.kind for e in store.events()]))

    events_recorder.record(_generation_started())

    assert stored_when_told == [["generation-started"]]


def test_publish_writes_a_document(events_recorder: recorder.EventRecorder,
                                   store: sqlite.SqliteStore, clock: FakeClock) -> None:
    events_recorder.publish("job-status-demo", {"state": "running", "generation": 0})
    clock.wall_now = 1_700_000_100.5
    events_recorder.publish("job-status-demo", {"state": "succeeded"})

    assert store.get_document("job-status-demo") == api.Document(
        "job-status-demo", {"state": "succeeded"}, 2, "2023-11-14T22:15:00.500Z")
    assert store.events() == []


def test_publish_tells_no_listener(events_recorder: recorder.EventRecorder) -> None:
    seen: list[events.Event] = []
    events_recorder.subscribe(seen.append)

    events_recorder.publish("job-status-demo", {"state": "running"})

    assert seen == []


def test_recorder_with_the_system_clock_writes_iso_times(store: sqlite.SqliteStore) -> None:
    system = recorder.EventRecorder(store, clocks.SystemClock())

    system.record(_generation_started())
    system.publish("doc", {})

    (stored,) = store.events()
    assert ISO.fullmatch(stored.time)
    document = store.get_document("doc")
    assert document is not None
    assert ISO.fullmatch(document.updated)


def test_a_mirror_gets_each_event_as_stored(store: sqlite.SqliteStore, clock: FakeClock) -> None:
    mirrored: list[api.StoredEvent] = []
    events_recorder = recorder.EventRecorder(store, clock, mirror=mirrored.append)

    first = events_recorder.record(_generation_started(0))
    events_recorder.record(_generation_started(1))

    assert mirrored == store.events()
    assert mirrored[0].id == first
