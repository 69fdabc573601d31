"""The device detector: its modes, restarts of a failing backend, and levels that change while a
fault lasts, on a fake clock (no sleeps)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.detect.devices.conftest import FakeClock
from trainguard.detect.devices import backend, detector, sim
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent, UpgradeType
from trainguard.faults.device.device_health import FaultEngine
from trainguard.faults.levels import Level


class Updates(list[detector.DeviceUpdate]):
    def levels(self) -> list[tuple[str, str | None, Level]]:
        return [(u.health.device, u.event.code if u.event else None, u.health.level)
                for u in self]


def _detector(device: backend.DeviceBackend, clock: FakeClock, updates: Updates,
              **settings: float) -> detector.DeviceDetector:
    return detector.DeviceDetector(device, engine=FaultEngine(), on_update=updates.append,
                                   clock=clock, settings=detector.DetectorSettings(**settings))


def test_a_subscribing_backend_runs_in_subscription_mode(clock: FakeClock) -> None:
    device = sim.SimBackend(devices=4, clock=clock)
    updates = Updates()
    watch = _detector(device, clock, updates)
    assert watch.state.status is detector.Status.STARTING
    assert watch.tick() == pytest.approx(1.0)  # the next sweep; nothing is polled
    state = watch.state
    assert (state.status, state.mode, state.devices) == (detector.Status.RUNNING,
                                                         detector.Mode.SUBSCRIPTION, 4)
    assert watch.inventory is not None
    assert len(watch.inventory.devices) == 4
    device.inject(2, "80E01801")  # pushed: handled at the next tick
    watch.tick()
    assert updates.levels() == [("device-2", "80E01801", Level.RESTART_BUSINESS)]
    assert watch.healths["device-2"].level is Level.RESTART_BUSINESS
    assert state.to_data() == {"backend": "sim", "status": "running", "mode": "subscription",
                               "devices": 4, "last_error": "", "retries": 0, "retry_in": None}


def test_a_backend_that_cannot_subscribe_is_polled_every_period(clock: FakeClock) -> None:
    device = sim.SimBackend(devices=2, clock=clock, subscription=False)
    updates = Updates()
    watch = _detector(device, clock, updates, period=5.0)
    watch.tick()
    assert watch.state.mode is detector.Mode.POLLING
    device.inject(1, "80E01801")
    clock.advance(4.0)
    watch.tick()
    assert updates == []  # not polled yet
    clock.advance(1.0)
    watch.tick()
    assert updates.levels() == [("device-1", "80E01801", Level.RESTART_BUSINESS)]
    assert updates[0].event is not None
    assert updates[0].event.assertion is Assertion.OCCUR
    device.inject(1, "80E01801", Assertion.RECOVER)
    clock.advance(5.0)
    watch.tick()
    assert updates.levels()[-1] == ("device-1", "80E01801", Level.NORMAL_NPU)


def test_a_link_down_that_lasts_is_raised_while_it_lasts_and_lowered_after(
        clock: FakeClock) -> None:
    device = sim.SimBackend(devices=1, clock=clock)
    updates = Updates()
    watch = _detector(device, clock, updates)
    watch.tick()
    device.inject(0, "81078603")  # link down: FaultDuration 20 s -> PreSeparateNPU
    watch.tick()
    assert updates.levels() == [("device-0", "81078603", Level.NOT_HANDLE_FAULT)]
    for _ in range(21):
        clock.advance(1.0)
        watch.tick()
    raised = updates[-1]
    assert (raised.event, raised.health.level) == (None, Level.PRE_SEPARATE_NPU)
    assert [r.upgrade_type for r in raised.health.added] == [UpgradeType.FAULT_DURATION]
    assert clock.now - 100.0 == 21.0  # raised at the first sweep after 20 s
    device.inject(0, "81078603", Assertion.RECOVER)
    watch.tick()
    assert watch.healths["device-0"].level is Level.PRE_SEPARATE_NPU  # RecoverTimeout: 60 s
    for _ in range(61):
        clock.advance(1.0)
        watch.tick()
    assert updates[-1].event is None
    assert updates[-1].health.level is Level.NORMAL_NPU


def test_a_notice_counts_for_one_evaluation(clock: FakeClock) -> None:
    device = sim.SimBackend(devices=1, clock=clock)
    updates = Updates()
    watch = _detector(device, clock, updates)
    watch.tick()
    device.inject(0, "80E3A201", Assertion.ONCE)
    watch.tick()
    assert [level for _, _, level in updates.levels()] == [Level.SEPARATE_NPU, Level.NORMAL_NPU]
    assert watch.healths["device-0"].level is Level.NORMAL_NPU


class FlakyBackend(backend.DeviceBackend):
    """Polled; fails to open ``fail_opens`` times, then its polls fail when told."""

    name = "flaky"

    def __init__(self, clock: FakeClock, *, fail_opens: int) -> None:
        self.clock = clock
        self.fail_opens = fail_opens
        self.present: dict[str, frozenset[str]] = {}
        self.poll_fails = False
        self.opened = self.closed = 0

    def open(self) -> backend.Inventory:
        if self.fail_opens:
            self.fail_opens -= 1
            raise backend.BackendError("flaky", "driver not loaded")
        self.opened += 1
        return backend.Inventory((backend.DeviceIdentity(0, 0),))

    def subscribe(self, events: backend.EventSink, failed: backend.FailureSink) -> bool:
        return False

    def poll(self) -> backend.Reading:
        if self.poll_fails:
            raise backend.BackendError("flaky", "device query failed")
        return backend.Reading(self.clock.wall(), dict(self.present))

    def close(self) -> None:
        self.closed += 1


def test_a_backend_that_fails_to_open_is_retried_with_a_capped_backoff(
        clock: FakeClock) -> None:
    device = FlakyBackend(clock, fail_opens=4)
    watch = _detector(device, clock, Updates(), retry_initial=1.0, retry_cap=3.0)
    delays = []
    for _ in range(4):
        watch.tick()
        state = watch.state
        assert (state.status, state.last_error) == (detector.Status.FAILED,
                                                    "flaky: driver not loaded")
        assert state.retry_in is not None
        delays.append(state.retry_in)
        clock.advance(state.retry_in)
    assert delays == [1.0, 2.0, 3.0, 3.0]
    assert watch.state.retries == 4
    watch.tick()
    state = watch.state
    assert (state.status, state.mode, state.retries) == (detector.Status.RUNNING,
                                                         detector.Mode.POLLING, 0)
    assert state.last_error == "flaky: driver not loaded"  # what happened stays readable


def test_a_backend_that_dies_restarts_and_keeps_what_it_held(clock: FakeClock) -> None:
    device = FlakyBackend(clock, fail_opens=0)
    device.present = {"device-0": frozenset({"80E01801", "81078603"})}
    updates = Updates()
    watch = _detector(device, clock, updates, period=5.0, retry_initial=1.0)
    watch.tick()
    assert [u.event.code for u in updates if u.event] == ["80E01801", "81078603"]
    device.poll_fails = True
    clock.advance(5.0)
    watch.tick()
    assert watch.state.to_data()["status"] == "failed"
    assert watch.state.last_error == "flaky: device query failed"
    assert device.closed == 0  # closed on the next tick, off the loop's thread under run()
    device.poll_fails = False
    device.present = {"device-0": frozenset({"81078603"})}  # 80E01801 went while it was down
    clock.advance(1.0)
    watch.tick()
    assert (device.closed, device.opened) == (1, 2)
    assert watch.state.status is detector.Status.RUNNING
    events = [u.event for u in updates[2:] if u.event]
    assert [(e.code, e.assertion) for e in events] == [("80E01801", Assertion.RECOVER)]


def test_a_subscription_that_dies_is_reopened_and_its_late_events_dropped(
        clock: FakeClock) -> None:
    device = sim.SimBackend(devices=1, clock=clock)
    sinks: list[tuple[backend.EventSink, backend.FailureSink]] = []
    subscribe = device.subscribe

    def keep(events: backend.EventSink, failed: backend.FailureSink) -> bool:
        sinks.append((events, failed))
        return subscribe(events, failed)

    device.subscribe = keep  # type: ignore[method-assign]
    updates = Updates()
    watch = _detector(device, clock, updates, retry_initial=2.0)
    watch.tick()
    device.inject(0, "80E01801")
    events, failed = sinks[0]
    failed(backend.BackendError("sim", "driver gone"))
    watch.tick()
    assert (watch.state.status, watch.state.retry_in) == (detector.Status.FAILED, 2.0)
    events(DeviceFaultEvent("device-0", "80E01801", Assertion.RECOVER, clock.wall()))  # late
    clock.advance(2.0)
    watch.tick()
    assert watch.state.status is detector.Status.RUNNING
    assert len(sinks) == 2
    assert updates.levels() == [("device-0", "80E01801", Level.RESTART_BUSINESS)]


class BuggyBackend(FlakyBackend):
    def open(self) -> backend.Inventory:
        raise KeyError("vendor field")


def test_a_backend_bug_is_a_failure_not_the_end_of_the_detector(clock: FakeClock) -> None:
    watch = _detector(BuggyBackend(clock, fail_opens=0), clock, Updates())
    watch.tick()
    assert watch.state.last_error == "flaky: unexpected error: KeyError: 'vendor field'"


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="period must be > 0 seconds, got 0"):
        detector.DetectorSettings(period=0)
    with pytest.raises(ValueError, match=r"retry_cap \(1 s\) must be >= retry_initial \(2 s\)"):
        detector.DetectorSettings(retry_initial=2, retry_cap=1)


def test_run_takes_pushed_events_at_once_on_the_loop_thread(clock: FakeClock) -> None:
    device = sim.SimBackend(devices=2, clock=clock)

    async def scenario() -> detector.DeviceUpdate:
        arrived: asyncio.Queue[detector.DeviceUpdate] = asyncio.Queue()
        loop_thread = threading.current_thread()

        def on_update(update: detector.DeviceUpdate) -> None:
            assert threading.current_thread() is loop_thread
            arrived.put_nowait(update)

        watch = detector.DeviceDetector(device, engine=FaultEngine(), on_update=on_update,
                                        clock=clock)
        task = asyncio.create_task(watch.run())
        while watch.state.status is not detector.Status.RUNNING:
            await asyncio.sleep(0.01)
        injector = threading.Thread(target=device.inject, args=(1, "80E01801"))
        injector.start()
        update = await asyncio.wait_for(arrived.get(), timeout=10.0)
        injector.join()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return update

    update = asyncio.run(scenario())
    assert (update.health.device, update.health.level) == ("device-1", Level.RESTART_BUSINESS)
    with pytest.raises(ValueError, match="not a device"):
        device.inject(5, "80E01801")
