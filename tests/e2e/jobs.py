"""Running ``trainguard run`` for real: a process group per job, cleaned up whatever happens."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from trainguard import testing

__all__ = ["SCRIPTS", "Job", "LoggedProcess", "Start"]

SCRIPTS = Path(__file__).parent / "scripts"
DEFAULT_TIMEOUT = 180.0


class LoggedProcess:
    """A ``trainguard`` command in a process group of its own, its output in ``log``; ended
    with everything it started."""

    def __init__(self, command: list[str], *, log: Path, cwd: Path,
                 env: dict[str, str] | None = None) -> None:
        self.log = log
        self._output = self.log.open("ab")
        self.process = subprocess.Popen(
            command, cwd=cwd, stdout=self._output, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})}, start_new_session=True)

    def output(self) -> str:
        if not self._output.closed:
            self._output.flush()
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        testing.end_process_tree(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        self._output.close()


class Job(LoggedProcess):
    """One ``trainguard run`` process (and, through its process group, everything it starts)."""

    def __init__(self, args: list[str], *, run_root: Path, run_id: str, cwd: Path,
                 env: dict[str, str] | None = None, node: int | None = None,
                 prefix: tuple[str, ...] = ()) -> None:
        """``node``: this host's node rank in a job across hosts (its run directory is the
        job's ``node-<rank>``, its checkpoints the job's ``checkpoints/node-<rank>``);
        ``prefix``: what runs the command (a network namespace's)."""
        self.run_dir = run_root / run_id
        self.checkpoint_dir = self.run_dir / "checkpoints"
        name = run_id
        if node is not None:
            self.run_dir /= f"node-{node}"
            self.checkpoint_dir /= f"node-{node}"
            name = f"{run_id}.node-{node}"
        command = [*prefix, sys.executable, "-m", "trainguard", "run", "--run-root",
                   str(run_root), "--rdzv-id", run_id, *args]
        super().__init__(command, log=cwd / f"{name}.console.log", cwd=cwd, env=env)

    def wait(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            output = self.output()
            self.kill()
            pytest.fail(f"trainguard run did not end within {timeout} s:\n{output}")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not (self.run_dir / "state.db").exists():
            return []
        return [dict(event.data, kind=event.kind)
                for event in testing.recorded_events(self.run_dir, *([kind] if kind else []))]

    def wait_for(self, what: str, condition: Callable[[], Any], *,
                 timeout: float = DEFAULT_TIMEOUT) -> Any:
        """Poll ``condition`` until it is truthy; fail after ``timeout`` seconds or if the job
        ended first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = condition()
            if result:
                return result
            if self.process.poll() is not None:
                result = condition()
                if result:
                    return result
                pytest.fail(f"the job ended before {what}:\n{self.output()}")
            time.sleep(0.05)
        pytest.fail(f"timed out after {timeout} s waiting for {what}:\n{self.output()}")

    def wait_for_event(self, kind: str, count: int = 1, *, timeout: float = DEFAULT_TIMEOUT
                       ) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.wait_for(
            f"{count} {kind} event(s)", lambda: (e := self.events(kind)) and len(e) >= count
            and e, timeout=timeout)
        return found

    def children(self) -> dict[str, int]:
        """The agent's helper processes by role: 'standby', 'persister'."""
        found = {}
        for child in psutil.Process(self.process.pid).children():
            with contextlib.suppress(psutil.Error):
                command = " ".join(child.cmdline())
                for role in ("standby", "persister"):
                    if f"trainguard.agent.{role}" in command:
                        found[role] = child.pid
        return found


Start = Callable[..., Job]


def clean_digest_of(root: Path, args: list[str]) -> str:
    """The digest a job writes (``--output``) when it runs ``args`` on 4 ranks of one host,
    without faults: what a job that recovered must match bit for bit."""
    job = Job(["--nproc-per-node", "4", *args, "--output", str(root / "sha")],
              run_root=root / "runs", run_id="clean", cwd=root)
    try:
        assert job.wait() == 0, job.output()
    finally:
        job.kill()
    return (root / "sha").read_text()
