"""A real etcd on loopback for tests and benchmarks: one member or a cluster of several, each a
``etcd`` process on free ports with its data in a directory of the caller's, ended with its
process group. Debian's ``etcd-server`` package provides the binary (``make test`` installs it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["EtcdCluster", "EtcdMember", "etcd_binary", "free_ports"]

START_TIMEOUT = 30.0


def etcd_binary() -> str | None:
    """The etcd server's path, or None where it is not installed."""
    return shutil.which("etcd", path=os.environ.get("PATH", "") + ":/usr/bin:/usr/sbin")


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on loopback now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclasses.dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class EtcdCluster:
    """``size`` members named ``m0``..; :meth:`url` is the store URL of them all."""

    def __init__(self, directory: Path, *, size: int = 1) -> None:
        binary = etcd_binary()
        if binary is None:
            raise FileNotFoundError("no etcd binary: apt-get install etcd-server")
        self._binary = binary
        self._directory = directory
        ports = free_ports(2 * size)
        self.members = [EtcdMember(f"m{index}", ports[2 * index], ports[2 * index + 1],
                                   directory / f"m{index}") for index in range(size)]
        self._initial = ",".join(f"{m.name}=http://127.0.0.1:{m.peer_port}"
                                 for m in self.members)

    def url(self, namespace: str = "") -> str:
        return "etcd://" + ",".join(m.endpoint for m in self.members) + (
            f"/{namespace.strip('/')}" if namespace else "")

    def start(self) -> EtcdCluster:
        for member in self.members:
            self.start_member(member, new=True)
        deadline = time.monotonic() + START_TIMEOUT
        for member in self.members:
            self._wait_healthy(member, deadline)
        return self

    def start_member(self, member: EtcdMember, *, new: bool = False) -> None:
        """Start (or start again, with its data) one member."""
        member.data_dir.mkdir(parents=True, exist_ok=True)
        log = (self._directory / f"{member.name}.log").open("ab")
        peer = f"http://127.0.0.1:{member.peer_port}"
        client = f"http://127.0.0.1:{member.client_port}"
        member.process = subprocess.Popen(
            [self._binary, "--name", member.name, "--data-dir", str(member.data_dir),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", self._initial, "--initial-cluster-token", "trainguard-test",
             "--initial-cluster-state", "new" if new else "existing",
             # Quick elections on loopback: a lost leader is replaced within a second.
             "--heartbeat-interval", "50", "--election-timeout", "500"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def kill_member(self, member: EtcdMember) -> None:
        if member.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(member.process.pid, signal.SIGKILL)
            member.process.wait(timeout=10)

    def stop(self) -> None:
        for member in self.members:
            self.kill_member(member)

    def __enter__(self) -> EtcdCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _wait_healthy(self, member: EtcdMember, deadline: float) -> None:
        """Until the member answers on its client port (``/health`` says a leader is known)."""
        while True:
            if not member.running:
                log = (self._directory / f"{member.name}.log").read_text(errors="replace")
                raise RuntimeError(f"etcd member {member.name} exited:\n{log[-3000:]}")
            with contextlib.suppress(OSError, urllib.error.URLError), urllib.request.urlopen(
                    f"http://{member.endpoint}/health", timeout=1) as answer:
                if b'"true"' in answer.read():
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"etcd member {member.name} not healthy within "
                                   f"{START_TIMEOUT} s")
            time.sleep(0.05)
