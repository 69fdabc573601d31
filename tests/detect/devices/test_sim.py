"""The sim backend through the backend interface: timelines, injection, both modes, bad input."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.detect.devices.conftest import FakeClock
from trainguard.clock import SystemClock
from trainguard.detect.devices import backend, sim
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.device.replay import TimelineError


def _fail(error: backend.BackendError) -> None:
    raise AssertionError(f"the sim never fails: {error}")


def test_inventory_is_the_devices_asked_for(clock: FakeClock) -> None:
    inventory = sim.SimBackend(devices=3, clock=clock).open()
    assert inventory.devices == tuple(backend.DeviceIdentity(i, i) for i in range(3))
    assert (inventory.super_pod_id, inventory.server_index) == (-2, -2)


def test_injected_faults_are_pushed_at_once_with_their_wall_time(clock: FakeClock) -> None:
    device = sim.SimBackend(devices=2, clock=clock)
    device.open()
    pushed: list[DeviceFaultEvent] = []
    assert device.subscribe(pushed.append, _fail) is True
    clock.advance(5.0)
    made = device.inject(1, "80E01801")
    device.inject(1, "80E01801", Assertion.RECOVER)
    assert made == DeviceFaultEvent("device-1", "80E01801", Assertion.OCCUR, clock.wall())
    assert [(e.device, e.code, e.assertion) for e in pushed] == [
        ("device-1", "80E01801", Assertion.OCCUR), ("device-1", "80E01801", Assertion.RECOVER)]
    device.close()


def test_a_timeline_is_pushed_from_the_driver_thread_when_due() -> None:
    timeline = sim.parse_sim_timeline([
        '{"time": 0, "device": 0, "code": "81078603", "assertion": "occur"}',
        "# a comment, then a blank line",
        "",
        '{"time": 0.02, "device": 0, "code": "81078603", "assertion": "recover"}',
        '{"time": 0.02, "device": 1, "code": "80E3A201", "assertion": "once"}',
    ], devices=2)
    device = sim.SimBackend(devices=2, clock=SystemClock(), timeline=timeline)
    device.open()
    pushed: list[DeviceFaultEvent] = []
    done = threading.Event()

    def take(event: DeviceFaultEvent) -> None:
        assert threading.current_thread().name == "trainguard-sim-driver"
        pushed.append(event)
        if len(pushed) == 3:
            done.set()

    device.subscribe(take, _fail)
    assert done.wait(timeout=10.0)
    device.close()
    assert [(e.device, e.code, e.assertion) for e in pushed] == [
        ("device-0", "81078603", Assertion.OCCUR), ("device-0", "81078603", Assertion.RECOVER),
        ("device-1", "80E3A201", Assertion.ONCE)]
    assert pushed[1].time - pushed[0].time == pytest.approx(0.02)


def test_polled_sim_reports_what_is_present_and_the_notices(clock: FakeClock) -> None:
    timeline = (sim.SimFault(10.0, 2, "80E01801", Assertion.OCCUR),)
    device = sim.SimBackend(devices=4, clock=clock, timeline=timeline, subscription=False)
    device.open()
    assert device.subscribe(lambda event: None, _fail) is False
    assert device.poll().present == {}
    device.inject(0, "80E3A201", Assertion.ONCE)
    clock.advance(10.0)
    reading = device.poll()
    assert reading.present == {"device-2": frozenset({"80E01801"})}
    assert reading.time == clock.wall()
    assert [(e.device, e.code) for e in reading.notices] == [("device-0", "80E3A201")]
    assert device.poll().notices == ()


def test_a_timeline_file_is_read(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "faults.jsonl"
    path.write_text('{"time": 0, "device": 1, "code": "80e01801"}\n')
    device = sim.SimBackend.from_file(path, devices=2, clock=clock, subscription=False)
    device.open()
    assert device.poll().present == {"device-1": frozenset({"80e01801"})}
    with pytest.raises(TimelineError, match=r"missing\.jsonl: cannot be read"):
        sim.SimBackend.from_file(tmp_path / "missing.jsonl", devices=2, clock=clock)
    path.write_text('{"time": 0, "device": 5, "code": "80E01801"}\n')
    with pytest.raises(TimelineError, match=r"faults\.jsonl: line 1: device: 5 is not a device"):
        sim.SimBackend.from_file(path, devices=2, clock=clock)


@pytest.mark.parametrize(("line", "message"), [
    ("not json", "line 1: not JSON"),
    ("[1, 2]", "line 1: expected a JSON object"),
    ('{"time": 0, "device": 0, "code": "80E01801", "severity": 2}',
     "line 1: severity: not a field of a simulated fault"),
    ('{"device": 0, "code": "80E01801"}', r"line 1: time: expected seconds since start"),
    ('{"time": -1, "device": 0, "code": "80E01801"}', "line 1: time: expected seconds"),
    ('{"time": true, "device": 0, "code": "80E01801"}', "line 1: time: expected seconds"),
    ('{"time": 0, "device": "0", "code": "80E01801"}',
     r"line 1: device: '0' is not a device of this host \(physical ids 0\.\.1\)"),
    ('{"time": 0, "device": 2, "code": "80E01801"}', "line 1: device: 2 is not a device"),
    ('{"time": 0, "device": 0, "code": "12345678"}',
     "line 1: code: '12345678' is not in the fault code table"),
    ('{"time": 0, "device": 0, "code": "80 E0"}', "line 1: code: '80 E0' is not a fault code"),
    ('{"time": 0, "device": 0, "code": "80E01801", "assertion": "begin"}',
     "line 1: assertion: 'begin' is not one of occur, recover, once"),
])
def test_a_malformed_timeline_line_is_refused_naming_line_and_field(line: str,
                                                                    message: str) -> None:
    with pytest.raises(TimelineError, match=message):
        sim.parse_sim_timeline([line], devices=2)


def test_a_timeline_out_of_order_is_refused() -> None:
    with pytest.raises(TimelineError, match="line 2: time: 1 is earlier than the line before"):
        sim.parse_sim_timeline(['{"time": 5, "device": 0, "code": "80E01801"}',
                                '{"time": 1, "device": 0, "code": "80E01801"}'], devices=1)


def test_injecting_an_unknown_code_or_device_is_refused(clock: FakeClock) -> None:
    device = sim.SimBackend(devices=2, clock=clock)
    device.open()
    with pytest.raises(sim.SimFaultError, match="code: 'DEADBEEF' is not in the fault code"):
        device.inject(0, "DEADBEEF")
    with pytest.raises(sim.SimFaultError, match="device: 7 is not a device of this host"):
        device.inject(7, "80E01801")
    assert device.poll().present == {}  # nothing was kept
    with pytest.raises(ValueError, match="devices: expected at least 1"):
        sim.SimBackend(devices=0, clock=clock)


def test_gpu_codes_can_be_simulated(clock: FakeClock) -> None:
    device = sim.SimBackend(devices=1, clock=clock, subscription=False)
    device.open()
    device.inject(0, "XID-79")
    assert device.poll().present == {"device-0": frozenset({"XID-79"})}
