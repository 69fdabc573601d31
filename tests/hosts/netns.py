"""Several simulated hosts on one machine: a Linux network namespace per host, on one bridge.

Why: multi-host behaviour (agents on different hosts, a host whose link is lost) has to be
tested without several machines. Each host gets a network stack of its own (addresses, ports,
routes), so processes of different hosts can listen on the same port and see each other only
over the network, and a host's link can be cut like a pulled cable.

Layout of ``HostNetwork(2)`` on the subnet 10.X.Y.0/24 (names carry a random token TTTTTT)::

    root namespace                                      namespace tgTTTTTT-h0
      bridge tgTTTTTTbr 10.X.Y.1 --- veth tgTTTTTTh0 === eth0 10.X.Y.2
                                 \\                      namespace tgTTTTTT-h1
                                  -- veth tgTTTTTTh1 === eth0 10.X.Y.3

Processes in the root namespace (a controller) reach the hosts, and are reached by them, at the
bridge's address ``HostNetwork.root_address``; a host reaches no other address of the root
namespace and nothing beyond the machine (no route, no forwarding).

Worth knowing:

- ``Host.cut`` downs the root-side end of the host's veth (its bridge port), not ``eth0`` in
  the namespace: ``eth0`` then loses carrier but keeps its address and routes, so the host's
  processes meet silence (connects and sends time out; an established TCP connection outlives a
  short cut), as with a pulled cable. Downing ``eth0`` itself would delete the host's routes,
  and its own connects would fail at once with "Network is unreachable".
- Host-to-host traffic is bridged in the root namespace. Where br_netfilter is loaded and
  ``net.bridge.bridge-nf-call-iptables`` is 1, it crosses the root namespace's iptables FORWARD
  chain, so a FORWARD policy of DROP (Docker sets one) breaks host-to-host traffic while
  host-to-root still works. No ``ip_forward`` is needed: all of it is one L2 segment.
- ``ip netns exec`` switches only the network (and mount) namespace, so every host has the
  machine's hostname, unless the network is made with ``hostnames=True``: then each host's
  processes get a UTS namespace of their own named ``host<i>`` (trainguard tells hosts apart by
  ``socket.gethostname()``).
- Cleanup SIGKILLs what the harness started (each process's group and descendants, and then
  anything left inside the namespaces), then deletes the veths, the bridge and the namespaces.
  A process started outside the harness in the root namespace is not tracked: ``adopt`` it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import IO, Any, Self

import psutil

from tests import conftest

__all__ = ["Host", "HostNetwork", "NetnsError", "netns_unavailable", "require_netns"]

COMMAND_TIMEOUT = 10.0
"""Seconds any one ``ip`` command may take: they are instant, unless the machine is in trouble."""
KILL_TIMEOUT = 5.0
"""Seconds cleanup waits for the processes it SIGKILLed to be gone (twice at most: those it
started, then any left in the namespaces)."""
MAX_HOSTS = 200

_File = int | IO[Any] | None


class NetnsError(RuntimeError):
    """An ``ip`` command failed (its stderr is in the message), or cleanup left something."""


def _ip(*args: str, timeout: float = COMMAND_TIMEOUT) -> str:
    """Run ``ip ARGS`` and return its stdout.

    Raises:
        NetnsError: it failed or did not end within ``timeout``.
    """
    command = ["ip", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NetnsError(f"{' '.join(command)}: {error}") from error
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _link_exists(name: str) -> bool:
    """Whether the root namespace has a link ``name``."""
    try:
        _ip("link", "show", name)
    except NetnsError:
        return False
    return True


def _free_subnet() -> tuple[int, int]:
    """X, Y of a 10.X.Y.0/24 on which the root namespace has no address or route, drawn at
    random (seeded with the pid too) so that concurrent runs do not pick the same one.

    Raises:
        NetnsError: none found in a few draws, or ``ip`` failed.
    """
    draw = random.Random(f"{os.getpid()}-{time.time_ns()}-{secrets.token_hex(4)}")
    for _ in range(32):
        x, y = draw.randrange(64, 250), draw.randrange(1, 255)
        # "root" selects the routes inside the prefix, "table all" the local addresses too.
        if not _ip("-4", "route", "show", "table", "all", "root", f"10.{x}.{y}.0/24").strip():
            return x, y
    raise NetnsError("found no free 10.X.Y.0/24 subnet")


def _end_processes(processes: Sequence[subprocess.Popen[Any]], deadline: float) -> list[str]:
    """SIGKILL each process's group and its descendants (also those that started sessions of
    their own), then reap the processes; wait until ``deadline`` at most.

    Returns:
        What could not be ended, one line each.
    """
    for process in processes:
        descendants = []
        if process.poll() is None:
            with contextlib.suppress(psutil.Error):
                descendants = psutil.Process(process.pid).children(recursive=True)
        # Also when the leader is gone: its group may live on without it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.returncode is None:  # It may have left its group.
            process.kill()
        for descendant in descendants:
            with contextlib.suppress(psutil.Error):
                descendant.kill()
    problems = []
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            problems.append(f"process {process.pid} ({process.args!r}) outlived SIGKILL")
    return problems


class Host:
    """One simulated host: a network namespace with ``eth0`` at ``address`` on the bridge."""

    def __init__(self, network: HostNetwork, index: int) -> None:
        self.network = network
        self.index = index
        self.namespace = f"{network.token}-h{index}"
        """The network namespace's name, as ``ip netns`` knows it."""
        self.link = f"{network.token}h{index}"
        """The root-side end of the host's veth: its port on the bridge."""
        self.address = f"{network.prefix}.{index + 2}"
        self.hostname = f"host{index}"
        """The hostname its processes see, with ``HostNetwork(hostnames=True)``."""

    def __repr__(self) -> str:
        return f"Host({self.index}, namespace={self.namespace!r}, address={self.address!r})"

    def command(self, *args: str) -> list[str]:
        """``args`` prefixed so that they run in this host's namespace (and, with
        ``hostnames=True``, its UTS namespace). Every prefix execs, so the process started is
        the command itself: its pid is the one to signal."""
        prefix = ["ip", "netns", "exec", self.namespace]
        if self.network.hostnames:
            prefix += ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"',
                       self.hostname]
        return [*prefix, *args]

    def popen(self, args: Sequence[str], *, stdin: _File = None, stdout: _File = None,
              stderr: _File = None, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``args`` in this host, in a session (so a process group) of its own; cleanup
        ends it with everything it started."""
        return self.network.popen(self.command(*args), stdin=stdin, stdout=stdout,
                                  stderr=stderr, env=env, cwd=cwd)

    def run(self, args: Sequence[str], *, timeout: float = 30.0, input: str | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``args`` in this host to its end (killed after ``timeout`` seconds, raising
        ``subprocess.TimeoutExpired``); its output captured as text, its status not checked."""
        return subprocess.run(self.command(*args), capture_output=True, text=True,
                              timeout=timeout, input=input, env=env, check=False)

    def cut(self) -> None:
        """Take the host's link down, like a pulled cable: its packets are dropped silently,
        both ways, while its own addresses and routes stay (see the module's docstring)."""
        _ip("link", "set", self.link, "down")

    def restore(self) -> None:
        """Bring the host's link back up; traffic flows again at once (the bridge runs no STP)."""
        _ip("link", "set", self.link, "up")

    @property
    def is_cut(self) -> bool:
        """Whether the host's link is down now."""
        flags: list[str] = json.loads(_ip("-json", "link", "show", self.link))[0]["flags"]
        return "UP" not in flags


class HostNetwork:
    """``count`` hosts (``Host``) on a bridge in the root namespace, made on entering and torn
    down on leaving, also when the body raised.

    Names carry a random token (``network.token``) and the subnet 10.X.Y.0/24 is one the root
    namespace does not use, so that concurrent runs, and leftovers of killed ones, do not
    collide. Leftovers can be found by the ``tg`` prefix: ``ip netns list``, ``ip link``.
    """

    def __init__(self, count: int, *, hostnames: bool = False) -> None:
        """Choose the names and the subnet; nothing is created until ``start`` (``with``).

        Raises:
            ValueError: ``count`` is not in 1..200.
            NetnsError: no free subnet was found, or ``ip`` failed.
        """
        if not 1 <= count <= MAX_HOSTS:
            raise ValueError(f"count must be in 1..{MAX_HOSTS}, not {count}")
        self.hostnames = hostnames
        self.token = f"tg{secrets.token_hex(3)}"
        x, y = _free_subnet()
        self.prefix = f"10.{x}.{y}"
        self.subnet = f"{self.prefix}.0/24"
        self.root_address = f"{self.prefix}.1"
        """The bridge's address: where the hosts reach processes of the root namespace."""
        self.bridge = f"{self.token}br"
        self.hosts = tuple(Host(self, index) for index in range(count))
        self._mac = f"02:74:67:{x:02x}:{y:02x}:01"
        self._started = False
        self._made_bridge = False
        self._made_namespaces: list[str] = []
        self._made_links: list[str] = []
        self._processes: list[subprocess.Popen[Any]] = []

    def __repr__(self) -> str:
        return f"HostNetwork({len(self.hosts)}, token={self.token!r}, subnet={self.subnet!r})"

    def host(self, index: int) -> Host:
        return self.hosts[index]

    def start(self) -> Self:
        """Make the bridge, the namespaces and their links, undoing all of it if one step fails.

        Raises:
            NetnsError: an ``ip`` command failed.
            RuntimeError: it was started before.
        """
        if self._started:
            raise RuntimeError(f"{self!r} was started before")
        self._started = True
        try:
            # A fixed MAC: a bridge otherwise takes its ports' lowest, which changes as ports
            # come and go and would make the root namespace's neighbours' ARP entries stale.
            _ip("link", "add", "name", self.bridge, "address", self._mac, "type", "bridge",
                "forward_delay", "0")
            self._made_bridge = True
            _ip("address", "add", f"{self.root_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for host in self.hosts:
                _ip("netns", "add", host.namespace)
                self._made_namespaces.append(host.namespace)
                # The peer is made inside the namespace, so it can be named eth0 there.
                _ip("link", "add", host.link, "type", "veth", "peer", "name", "eth0", "netns",
                    host.namespace)
                self._made_links.append(host.link)
                _ip("link", "set", host.link, "master", self.bridge, "up")
                _ip("-n", host.namespace, "address", "add", f"{host.address}/24", "dev", "eth0")
                _ip("-n", host.namespace, "link", "set", "eth0", "up")
                _ip("-n", host.namespace, "link", "set", "lo", "up")
        except BaseException:
            with contextlib.suppress(NetnsError):
                self.close()
            raise
        return self

    def popen(self, args: Sequence[str], *, stdin: _File = None, stdout: _File = None,
              stderr: _File = None, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``args`` as is (in the root namespace, unless prefixed by ``Host.command``),
        in a session of its own; cleanup ends it with everything it started."""
        process = subprocess.Popen(list(args), stdin=stdin, stdout=stdout, stderr=stderr,
                                   env=None if env is None else dict(env), cwd=cwd,
                                   start_new_session=True)
        self._processes.append(process)
        return process

    def adopt(self, process: subprocess.Popen[Any]) -> None:
        """Have cleanup end ``process`` too (started elsewhere, in a session of its own)."""
        self._processes.append(process)

    def close(self) -> None:
        """End the processes, then delete the links, the bridge and the namespaces; every step
        is tried, and every wait bounded. Idempotent.

        Raises:
            NetnsError: something could not be ended or deleted (all of it in the message).
        """
        problems = _end_processes(self._processes, time.monotonic() + KILL_TIMEOUT)
        self._processes.clear()
        problems += self._end_namespace_processes()
        # Deleting one end of a veth deletes both, at once: a namespace's own links would go
        # only when the kernel gets round to destroying the namespace.
        for link in self._made_links:
            try:
                _ip("link", "delete", link)
            except NetnsError as error:
                if _link_exists(link):
                    problems.append(str(error))
        self._made_links.clear()
        if self._made_bridge:
            try:
                _ip("link", "delete", self.bridge)
                self._made_bridge = False
            except NetnsError as error:
                problems.append(str(error))
        for namespace in list(self._made_namespaces):
            try:
                _ip("netns", "delete", namespace)
                self._made_namespaces.remove(namespace)
            except NetnsError as error:
                problems.append(str(error))
        if problems:
            raise NetnsError("cleanup of " + repr(self) + " left:\n" + "\n".join(problems))

    def _end_namespace_processes(self) -> list[str]:
        """SIGKILL whatever still runs in the namespaces (one started by a ``Host.command``
        prefix outside ``popen``, or one that left its group), until none is left or
        ``KILL_TIMEOUT`` has passed."""
        deadline = time.monotonic() + KILL_TIMEOUT
        while True:
            remaining: dict[str, list[int]] = {}
            for namespace in self._made_namespaces:
                with contextlib.suppress(NetnsError):
                    pids = [int(pid) for pid in _ip("netns", "pids", namespace).split()]
                    if pids:
                        remaining[namespace] = pids
            if not remaining:
                return []
            if time.monotonic() >= deadline:
                return [f"processes {pids} still run in namespace {namespace}"
                        for namespace, pids in remaining.items()]
            for pids in remaining.values():
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        try:
            self.close()
        except NetnsError as problem:
            if error is None:
                raise
            # The body's own error comes first; cleanup's problems go with it, not over it.
            error.add_note(str(problem))


@functools.cache
def netns_unavailable() -> str | None:
    """Why this machine cannot run ``HostNetwork`` (not root, no ``ip``, namespaces, veths or
    bridges refused, as in an unprivileged container), or None if it can. Found out once, by
    making and tearing down a network of one host."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "no ip(8) (iproute2) on PATH"
    try:
        with HostNetwork(1):
            pass
    except (NetnsError, OSError) as error:
        return str(error)
    return None


def require_netns(*, hostnames: bool = False) -> None:
    """Skip the calling test unless ``netns_unavailable`` says the machine can run it, through
    ``tests.conftest.unavailable``: under CI (``CI`` set, root) it fails instead, so that a
    test that stopped running cannot pass unseen. With ``hostnames``, also require ``unshare``
    and ``hostname``."""
    reason = netns_unavailable()
    if reason is None and hostnames:
        missing = [tool for tool in ("unshare", "hostname", "sh") if shutil.which(tool) is None]
        if missing:
            reason = f"no {', '.join(missing)} on PATH for hostnames"
    if reason is not None:
        conftest.unavailable(f"cannot make network namespaces: {reason}")
