"""Jobs across hosts for real: ``trainguard controller`` and one ``trainguard run`` per host,
on loopback or each host in a network namespace of its own (tests/hosts/netns.py).

The controller serves plain text (``--insecure``) unless a test passes its own access flags
(``access``: the controller's, ``host_access``: every host's); each host on loopback has its
own node name, ``host-<k>`` in the order hosts are started (one in a network namespace has its
namespace's host name)."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.jobs import DEFAULT_TIMEOUT, Job, LoggedProcess
from trainguard import testing

__all__ = ["Cluster", "Controller"]

_LISTENING = re.compile(r"listening on (\S+:\d+);")


class Controller(LoggedProcess):
    """One ``trainguard controller`` process; its port is a free one, read from its output,
    unless ``port`` is given. A ``standby`` waits for another to lead: its endpoint is
    ``address:port`` and it listens only once it leads (:meth:`wait_leading`)."""

    def __init__(self, *args: str, run_root: Path, cwd: Path, address: str = "127.0.0.1",
                 port: int = 0, standby: bool = False, name: str = "controller",
                 access: tuple[str, ...] = ("--insecure",)) -> None:
        self.run_root = run_root
        super().__init__([sys.executable, "-m", "trainguard", "controller", "--listen",
                          f"{address}:{port}", "--run-root", str(run_root), *access, *args],
                         log=cwd / f"{name}.console.log", cwd=cwd)
        if standby:
            self.endpoint = f"{address}:{port}"
            self._wait("stand by", lambda: "standing by" in self.output())
        else:
            self.endpoint = self.wait_leading()

    def wait_leading(self, timeout: float = 60) -> str:
        """Until it listens (it leads); its endpoint."""
        found = self._wait("start listening", lambda: _LISTENING.search(self.output()),
                           timeout=timeout)
        return str(found.group(1))

    def _wait(self, what: str, condition: Callable[[], Any], timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = condition()
            if found:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        output = self.output()
        self.kill()
        pytest.fail(f"the controller did not {what}:\n{output}")

    def events(self, job: str, kind: str | None = None) -> list[dict[str, Any]]:
        run_dir = self.run_root / job
        if not (run_dir / "state.db").exists():
            return []
        return [dict(event.data, kind=event.kind)
                for event in testing.recorded_events(run_dir, *([kind] if kind else []))]


class Cluster:
    """A controller and the hosts of jobs across hosts, all ended when the test ends."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.run_root = root / "runs"
        self.controller: Controller | None = None
        self.extra: list[LoggedProcess] = []  # more controllers, ended with the rest
        self.hosts: list[Job] = []
        self.host_access: tuple[str, ...] = ("--insecure",)

    def start_controller(self, *args: str, address: str = "127.0.0.1",
                         access: tuple[str, ...] = ("--insecure",)) -> Controller:
        self.controller = Controller(*args, run_root=self.root / "controller", cwd=self.root,
                                     address=address, access=access)
        return self.controller

    def host(self, node: int | None, *args: str, job: str = "job", nnodes: int | str = 2,
             endpoint: str | None = None, prefix: tuple[str, ...] = (),
             env: dict[str, str] | None = None) -> Job:
        """``trainguard run`` for node ``node`` (None: the controller assigns one), with
        ``env`` over this process's environment."""
        if endpoint is None:
            assert self.controller is not None, "start the controller first"
            endpoint = self.controller.endpoint
        placement = ["--node-rank", str(node)] if node is not None else [
            "--rdzv-backend", "c10d"]
        # On loopback every host has this machine's name; in a namespace, its own.
        name = () if prefix else ("--node-name", f"host-{len(self.hosts)}")
        host = Job(["--nnodes", str(nnodes), *placement, "--rdzv-endpoint", endpoint,
                    *self.host_access, *name, *args],
                   run_root=self.run_root, run_id=job, cwd=self.root, node=node,
                   prefix=prefix, env=env)
        self.hosts.append(host)
        return host

    def wait_all(self, hosts: list[Job], timeout: float = DEFAULT_TIMEOUT) -> list[int]:
        return [host.wait(timeout) for host in hosts]

    def close(self) -> None:
        for process in (*self.hosts, *self.extra):
            process.kill()
        if self.controller is not None:
            self.controller.kill()

    @classmethod
    @contextlib.contextmanager
    def around(cls, root: Path) -> Iterator[Cluster]:
        cluster = cls(root)
        try:
            yield cluster
        finally:
            cluster.close()
