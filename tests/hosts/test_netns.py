"""The simulated hosts of ``tests.hosts.netns``: reachable as real hosts would be, silenced by a
cut and back after a restore, and gone without a trace after the ``with``."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from tests.hosts.netns import Host, HostNetwork, NetnsError, require_netns

# Prints the port it listens on (any free one, on every address), then echoes each connection.
ECHO_SERVER = """
import socketserver

class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)

socketserver.ThreadingTCPServer.daemon_threads = True
with socketserver.ThreadingTCPServer(("0.0.0.0", 0), Echo) as server:
    print(server.server_address[1], flush=True)
    server.serve_forever()
"""

# Connects to ADDRESS PORT within TIMEOUT seconds, has "ping" echoed; prints "ok", "timeout" or
# the error.
ECHO_CLIENT = """
import socket, sys

address, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    with socket.create_connection((address, port), timeout=timeout) as connection:
        connection.sendall(b"ping")
        echoed = b""
        while len(echoed) < 4 and (data := connection.recv(4)):
            echoed += data
    print("ok" if echoed == b"ping" else f"echoed {echoed!r}")
except TimeoutError:
    print("timeout")
except OSError as error:
    print(type(error).__name__, error)
"""

REACH_TIMEOUT = 5.0
"""Seconds a connection that should work may take (on one machine, it takes milliseconds)."""
CUT_TIMEOUT = 0.5
"""Seconds given to a connection that should not get through; shorter than the ~3 s a failed
ARP resolution takes, so that silence shows as a timeout, not as "No route to host"."""

Start = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def network() -> Iterator[HostNetwork]:
    require_netns()
    with HostNetwork(2) as network:
        yield network


def echo_server(start: Start) -> int:
    """Start an echo server with ``start`` (``Host.popen``, ``HostNetwork.popen``); its port."""
    server = start([sys.executable, "-c", ECHO_SERVER], stdout=subprocess.PIPE)
    assert server.stdout is not None
    ready, _, _ = select.select([server.stdout], [], [], 10.0)
    assert ready, "the echo server did not say its port within 10 s"
    return int(server.stdout.readline())


def echo(prefix: Sequence[str], address: str, port: int, timeout: float) -> tuple[str, float]:
    """Connect from where ``prefix`` runs (``Host.command()``; ``[]``: the root namespace) to
    ``address``:``port`` and have "ping" echoed: the outcome and the seconds it took."""
    began = time.monotonic()
    done = subprocess.run([*prefix, sys.executable, "-c", ECHO_CLIENT, address, str(port),
                           str(timeout)], capture_output=True, text=True, timeout=timeout + 10,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), time.monotonic() - began


def reaches(source: Host | None, address: str, port: int) -> bool:
    outcome, _ = echo(source.command() if source else [], address, port, REACH_TIMEOUT)
    assert outcome in ("ok", "timeout") or "Errno" in outcome, outcome
    return outcome == "ok"


def assert_silenced(*attempts: tuple[Host | None, str, int]) -> None:
    """Each connection attempt (from, to address, port; all at once) gets no answer at all,
    and gives up within the bound."""
    def attempt(source: Host | None, address: str, port: int) -> tuple[str, float]:
        return echo(source.command() if source else [], address, port, CUT_TIMEOUT)

    with ThreadPoolExecutor(len(attempts)) as pool:
        outcomes = list(pool.map(attempt, *zip(*attempts, strict=True)))
    for (source, address, _), (outcome, took) in zip(attempts, outcomes, strict=True):
        assert outcome == "timeout", f"{source} to {address}: {outcome}"
        assert took < CUT_TIMEOUT + 5


def test_hosts_reach_each_other_and_the_root_namespace(network: HostNetwork) -> None:
    first, second = network.hosts
    on_first = echo_server(first.popen)
    on_second = echo_server(second.popen)
    in_root = echo_server(network.popen)

    assert reaches(second, first.address, on_first)
    assert reaches(first, second.address, on_second)
    assert reaches(None, first.address, on_first)
    assert reaches(first, network.root_address, in_root)
    assert reaches(first, "127.0.0.1", on_first)  # lo is up
    # A host has a network stack of its own: what listens in another host, or in the root
    # namespace, is not on its loopback (unless the first host listens on the same port).
    for port in {on_second, in_root} - {on_first}:
        assert not reaches(first, "127.0.0.1", port)


def test_a_cut_silences_the_host_both_ways_until_restored(network: HostNetwork) -> None:
    first, second = network.hosts
    on_first = echo_server(first.popen)
    on_second = echo_server(second.popen)
    assert reaches(second, first.address, on_first)

    first.cut()
    assert first.is_cut
    assert_silenced((second, first.address, on_first), (None, first.address, on_first),
                    (first, second.address, on_second), (first, network.root_address, on_first))
    # The other host is not affected.
    assert not second.is_cut
    assert reaches(None, second.address, on_second)

    first.restore()
    assert not first.is_cut
    assert reaches(second, first.address, on_first)
    assert reaches(None, first.address, on_first)
    assert reaches(first, second.address, on_second)


def test_a_cut_is_silence_not_a_reset(network: HostNetwork) -> None:
    """An established connection sees nothing during a cut, and carries on after it."""
    host = network.host(0)
    port = echo_server(host.popen)
    with socket.create_connection((host.address, port), timeout=REACH_TIMEOUT) as connection:
        connection.sendall(b"before")
        assert connection.recv(16) == b"before"

        host.cut()
        connection.sendall(b"during")
        connection.settimeout(CUT_TIMEOUT)
        with pytest.raises(TimeoutError):
            connection.recv(16)

        host.restore()
        # Delivered by TCP's retransmission (backing off from 200 ms), on the same connection.
        connection.settimeout(REACH_TIMEOUT)
        assert connection.recv(16) == b"during"


def links() -> set[str]:
    return {link["ifname"] for link in json.loads(
        subprocess.run(["ip", "-json", "link", "show"], capture_output=True, text=True,
                       check=True, timeout=10).stdout)}


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True,
                            timeout=10).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def assert_gone(network: HostNetwork) -> None:
    assert not namespaces() & {host.namespace for host in network.hosts}
    assert not links() & {network.bridge, *(host.link for host in network.hosts)}


def is_dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_leaving_ends_the_processes_and_deletes_the_network() -> None:
    require_netns()
    with HostNetwork(2) as network:
        host = network.host(0)
        assert {host.namespace for host in network.hosts} <= namespaces()
        assert {network.bridge, *(host.link for host in network.hosts)} <= links()
        # A process in the host, with a child in its group ...
        leader = host.popen(["sh", "-c", "sleep 300 & echo $!; exec sleep 300"],
                            stdout=subprocess.PIPE)
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        # ... one started in a host without the harness ...
        untracked = subprocess.Popen(network.host(1).command("sleep", "300"),
                                     start_new_session=True)
        # ... and one in the root namespace.
        in_root = network.popen(["sleep", "300"])
        assert not any(is_dead(pid) for pid in (leader.pid, child, untracked.pid, in_root.pid))
    try:
        assert leader.poll() is not None
        assert in_root.poll() is not None
        assert is_dead(child)
        assert untracked.wait(timeout=5) is not None
    finally:
        untracked.kill()
    assert_gone(network)


def test_leaving_cleans_up_also_when_the_body_raised() -> None:
    require_netns()
    network = HostNetwork(1)
    started = []

    def body() -> None:
        with network:
            started.append(network.host(0).popen(["sleep", "300"]))
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        body()
    assert started[0].poll() is not None
    assert_gone(network)


def test_a_failed_start_undoes_what_it_made() -> None:
    require_netns()
    network = HostNetwork(3)
    taken = network.host(1).namespace
    subprocess.run(["ip", "netns", "add", taken], check=True, timeout=10)
    try:
        with pytest.raises(NetnsError, match="netns add"):
            network.start()
        assert namespaces() & {host.namespace for host in network.hosts} == {taken}
        assert not links() & {network.bridge, *(host.link for host in network.hosts)}
    finally:
        subprocess.run(["ip", "netns", "delete", taken], check=True, timeout=10)


def test_networks_side_by_side_do_not_collide() -> None:
    require_netns()
    with HostNetwork(1) as one, HostNetwork(1) as other:
        assert one.subnet != other.subnet
        assert one.token != other.token
        for network in (one, other):
            assert max(len(name) for name in (network.bridge, network.host(0).link)) <= 15
            port = echo_server(network.host(0).popen)
            assert reaches(None, network.host(0).address, port)


@pytest.mark.parametrize("hostnames", [False, True])
def test_the_process_started_is_the_command_itself(hostnames: bool) -> None:
    """So that its pid is the one to signal; and with hostnames, each host has its own."""
    require_netns(hostnames=hostnames)
    with HostNetwork(2, hostnames=hostnames) as network:
        shown = [host.run(["hostname"], timeout=10).stdout.strip() for host in network.hosts]
        if hostnames:
            assert shown == ["host0", "host1"]
        else:
            assert shown == [socket.gethostname()] * 2
        process = network.host(1).popen(["sleep", "300"])
        deadline = time.monotonic() + 5
        while psutil.Process(process.pid).cmdline() != ["sleep", "300"]:
            assert time.monotonic() < deadline, psutil.Process(process.pid).cmdline()
            time.sleep(0.01)
