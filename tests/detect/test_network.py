from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.detect.detector_fixtures import FakeClock, need_root
from trainguard.clock import SystemClock
from trainguard.detect import network_probe
from trainguard.detect.network import (
    LINK_DOWN_CODE,
    NetworkDetector,
    NetworkSettings,
    TrainingInterface,
)
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.device.device_health import FaultEngine
from trainguard.faults.levels import Level
from trainguard.testing import gateway_link

ROUTES = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
ib0\t0000640A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
ib0\t0000650A\t0100640A\t0003\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""


def test_gateway_of_prefers_the_default_route_then_any_route_through_a_gateway() -> None:
    assert network_probe.gateway_of("eth0", ROUTES) == "192.0.2.1"
    assert network_probe.gateway_of("ib0", ROUTES) == "10.100.0.1"
    assert network_probe.gateway_of("ib1", ROUTES) is None


def test_gateway_of_names_the_bad_line() -> None:
    with pytest.raises(ValueError, match="line 3"):
        network_probe.gateway_of("eth0", ROUTES.splitlines()[0] + "\neth0\t0\t0\t3\neth0 x\n")


def test_link_up_reads_operstate_and_carrier(tmp_path: Path) -> None:
    for name, operstate, carrier in (("a", "up", "1"), ("b", "up", "0"), ("c", "down", "1"),
                                     ("d", "unknown", "1")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "operstate").write_text(operstate + "\n")
        (tmp_path / name / "carrier").write_text(carrier + "\n")
    assert [network_probe.link_up(name, sys_class_net=tmp_path) for name in "abcd"] == [
        True, False, False, True]
    with pytest.raises(FileNotFoundError):
        network_probe.link_up("missing", sys_class_net=tmp_path)


def test_settings_and_interfaces_name_the_bad_field() -> None:
    with pytest.raises(ValueError, match="probe_timeout"):
        NetworkSettings(probe_period=1.0, probe_timeout=2.0)
    with pytest.raises(ValueError, match="device_ids is empty"):
        TrainingInterface("ib0", ())
    with pytest.raises(ValueError, match="not an interface name"):
        TrainingInterface("../x", (0,))


class FakeNetwork:
    def __init__(self) -> None:
        self.up = {"ib0": True, "ib1": True}
        self.answers = {"10.0.0.1": True, "10.0.1.1": True}
        self.probed: list[tuple[str, str]] = []

    def link_up(self, interface: str) -> bool:
        return self.up[interface]

    async def probe(self, interface: str, gateway: str, *, timeout: float) -> None:
        self.probed.append((interface, gateway))
        if not self.answers[gateway]:
            raise network_probe.ProbeError(f"no echo reply from gateway {gateway}")


def detector(net: FakeNetwork, clock: FakeClock, seen: list[DeviceFaultEvent],
             routes: Callable[[], str] = lambda: "") -> NetworkDetector:
    return NetworkDetector(
        [TrainingInterface("ib0", (0, 1), gateway="10.0.0.1"),
         TrainingInterface("ib1", (2,), gateway="10.0.1.1")],
        clock=clock, on_events=seen.extend, prober=net.probe, link_up=net.link_up,
        route_table=routes)


def test_link_down_and_failed_probe_are_link_down_events_per_served_device() -> None:
    net, clock = FakeNetwork(), FakeClock()
    seen: list[DeviceFaultEvent] = []
    watcher = detector(net, clock, seen)
    assert watcher.check_links() == []
    assert asyncio.run(watcher.probe()) == []
    net.up["ib0"] = False
    clock.advance(1)
    events = watcher.check_links()
    assert [(e.device, e.code, e.assertion, e.time) for e in events] == [
        ("device-0", LINK_DOWN_CODE, Assertion.OCCUR, clock.wall_now),
        ("device-1", LINK_DOWN_CODE, Assertion.OCCUR, clock.wall_now)]
    net.answers["10.0.0.1"] = False  # still faulty: nothing new
    assert asyncio.run(watcher.probe()) == []
    net.up["ib0"] = True  # the link is back, the gateway still silent
    assert watcher.check_links() == []
    net.answers["10.0.0.1"] = True
    events = asyncio.run(watcher.probe())
    assert [(e.device, e.assertion) for e in events] == [
        ("device-0", Assertion.RECOVER), ("device-1", Assertion.RECOVER)]
    net.answers["10.0.1.1"] = False
    assert [(e.device, e.assertion) for e in asyncio.run(watcher.probe())] == [
        ("device-2", Assertion.OCCUR)]
    assert len(seen) == 5
    state = watcher.states()[1]
    assert state.probe_ok is False
    assert "10.0.1.1" in (state.last_error or "")


def test_gateway_from_the_route_table_is_kept_when_the_route_goes() -> None:
    net, clock = FakeNetwork(), FakeClock()
    seen: list[DeviceFaultEvent] = []
    net.answers["10.100.0.1"] = True
    routes = [ROUTES]
    watcher = NetworkDetector([TrainingInterface("ib0", (0,))], clock=clock,
                              on_events=seen.extend, prober=net.probe, link_up=net.link_up,
                              route_table=lambda: routes[0])
    asyncio.run(watcher.probe())
    routes[0] = ROUTES.splitlines()[0]
    asyncio.run(watcher.probe())
    assert net.probed == [("ib0", "10.100.0.1")] * 2


def test_no_gateway_and_no_icmp_permission_are_detector_errors_not_faults() -> None:
    net, clock = FakeNetwork(), FakeClock()
    seen: list[DeviceFaultEvent] = []
    watcher = NetworkDetector([TrainingInterface("ib1", (0,))], clock=clock,
                              on_events=seen.extend, prober=net.probe, link_up=net.link_up,
                              route_table=lambda: ROUTES)
    asyncio.run(watcher.probe())
    asyncio.run(watcher.probe())
    status = watcher.status
    assert not status.working
    assert status.retries == 2
    assert seen == []
    assert "ib1 has no gateway" in (status.last_error or "")

    async def refused(interface: str, gateway: str, *, timeout: float) -> None:
        raise network_probe.ProbeUnavailableError("cannot probe gateways")

    watcher = NetworkDetector([TrainingInterface("ib0", (0,), "10.0.0.1")], clock=clock,
                              on_events=seen.extend, prober=refused, link_up=net.link_up)
    asyncio.run(watcher.probe())
    assert watcher.status.last_error == "cannot probe gateways"
    assert seen == []


def test_no_icmp_socket_permitted_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> socket.socket:
        raise PermissionError(1, "Operation not permitted")

    async def attempt() -> None:  # the loop has its own sockets already
        with monkeypatch.context() as patch:
            patch.setattr(socket, "socket", refuse)
            await network_probe.IcmpPinger()("lo", "127.0.0.1", timeout=1.0)

    with pytest.raises(network_probe.ProbeUnavailableError, match="ping_group_range"):
        asyncio.run(attempt())


def test_the_engine_holds_a_link_down_at_not_handle_for_20_s_then_raises_it() -> None:
    """The events drive FaultDuration (81078603: 20 s, then its configured level)."""
    net, clock = FakeNetwork(), FakeClock()
    seen: list[DeviceFaultEvent] = []
    watcher = detector(net, clock, seen)
    engine = FaultEngine()
    net.up["ib1"] = False
    for event in watcher.check_links():
        assert engine.report(event).level is Level.NOT_HANDLE_FAULT
    clock.advance(20)
    assert engine.health("device-2", clock.wall_now).level is Level.NOT_HANDLE_FAULT
    clock.advance(1)
    raised = engine.health("device-2", clock.wall_now)
    assert raised.level is Level.PRE_SEPARATE_NPU
    assert raised.network_level is raised.level


def test_icmp_echo_to_loopback_is_answered() -> None:
    asyncio.run(network_probe.IcmpPinger()("lo", "127.0.0.1", timeout=2.0))


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=10)


@pytest.fixture
def veth_pair() -> Iterator[tuple[str, str, str, str]]:
    """A veth link from this namespace (A) to a gateway's namespace (B, 10.213.n.1)."""
    need_root("a network namespace with a veth link")
    with gateway_link.gateway_link("node", subnet=213) as link:
        yield link.namespace, link.ours, link.theirs, link.gateway


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not seen within 10 s: {what}")


def test_real_veth_link_down_and_silent_gateway_are_seen_and_their_recovery(
        veth_pair: tuple[str, str, str, str]) -> None:
    namespace, ours, theirs, gateway = veth_pair
    seen: list[DeviceFaultEvent] = []

    async def scenario() -> None:
        watcher = NetworkDetector(
            [TrainingInterface(ours, (3, 5))], clock=SystemClock(), on_events=seen.extend,
            settings=NetworkSettings(probe_period=0.2, probe_timeout=0.2, link_period=0.05))
        task = asyncio.create_task(watcher.run())
        try:
            state = watcher.states
            await _until(lambda: state()[0].probe_ok is True and state()[0].link_up is True,
                         "the gateway answering")
            assert state()[0].gateway == gateway
            assert seen == []

            def assertions() -> list[tuple[str, Assertion]]:
                return [(event.device, event.assertion) for event in seen]

            _ip("-n", namespace, "link", "set", theirs, "down")
            await _until(lambda: len(seen) == 2, "the link going down")
            assert assertions() == [("device-3", Assertion.OCCUR), ("device-5", Assertion.OCCUR)]
            assert state()[0].link_up is False
            _ip("-n", namespace, "link", "set", theirs, "up")
            await _until(lambda: len(seen) == 4, "the link coming back")
            assert assertions()[2:] == [("device-3", Assertion.RECOVER),
                                        ("device-5", Assertion.RECOVER)]
            _ip("-n", namespace, "addr", "del", f"{gateway}/30", "dev", theirs)
            await _until(lambda: len(seen) == 6, "the gateway falling silent")
            assert assertions()[4] == ("device-3", Assertion.OCCUR)
            assert state()[0].link_up is True
            assert state()[0].probe_ok is False
            _ip("-n", namespace, "addr", "add", f"{gateway}/30", "dev", theirs)
            await _until(lambda: len(seen) == 8, "the gateway answering again")
            assert assertions()[6] == ("device-3", Assertion.RECOVER)
            assert all(event.code == LINK_DOWN_CODE for event in seen)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
