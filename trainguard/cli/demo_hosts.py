"""The demo's second part: the same job across three hosts on this machine (two holding ranks,
one spare), one host killed whole in the middle.

The controller runs in this process (``trainguard controller``'s service); each host is its own
``trainguard run --nnodes 2:3`` process tree on loopback, as it would be on its own machine. The
killed host's agent and workers all get SIGKILL; its ranks go to the spare host, their state
sent by their data-parallel replicas on the other host, while the other host keeps its
processes. The job's final parameters must equal those of the run without faults.

The controller serves plain text on loopback (``--insecure``, with its warning: the demo has no
certificates), but still knows its hosts: each presents the agent token the demo made for this
run (README "Deploying securely" shows TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from trainguard import owner_only
from trainguard.cli import console as console_output
from trainguard.controller import service
from trainguard.proto import grpc_security

__all__ = ["HostDemo", "run"]

_STARTUP_TIMEOUT = 300.0  # seconds for the hosts to join and reach the step to kill at
_JOB_TIMEOUT = 600.0


class HostDemo:
    """Three hosts' ``trainguard run`` processes and their logs."""

    def __init__(self, *, run_root: Path, job: str, endpoint: str, steps: int, width: int,
                 digest: Path, token_file: Path) -> None:
        self.logs = [run_root / f"{job}.host-{node}.log" for node in range(3)]
        self.processes: list[subprocess.Popen[bytes]] = []
        for node, log in enumerate(self.logs):
            with log.open("wb") as output:
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-m", "trainguard", "run", "--nnodes", "2:3",
                     "--node-rank", str(node), "--nproc-per-node", "2", "--max-restarts", "3",
                     "--rdzv-endpoint", endpoint, "--rdzv-id", job, "--insecure",
                     "--token-file", str(token_file), "--node-name", f"demo-host-{node}",
                     "--run-root",
                     str(run_root), "-m", "trainguard.demo.ddp_job", "--steps", str(steps),
                     "--width", str(width), "--batch", "128", "--output", str(digest)],
                    stdout=output, stderr=subprocess.STDOUT, start_new_session=True))

    def output(self, node: int) -> str:
        return self.logs[node].read_text(errors="replace")

    async def wait_for_step(self, step: int) -> None:
        """Until rank 0 (host 0) has printed ``step``.

        Raises:
            RuntimeError: a host ended first, or the wait timed out.
        """
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        while f"step {step} " not in self.output(0):
            ended = [node for node, p in enumerate(self.processes) if p.poll() is not None]
            if ended or time.monotonic() > deadline:
                raise RuntimeError(f"host {ended[0] if ended else 0} did not reach step {step}"
                                   f":\n{self.output(ended[0] if ended else 0)}")
            await asyncio.sleep(0.1)

    def kill(self, node: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.processes[node].pid, signal.SIGKILL)

    async def wait(self, node: int) -> int:
        deadline = time.monotonic() + _JOB_TIMEOUT
        while (code := self.processes[node].poll()) is None:
            if time.monotonic() > deadline:
                self.kill(node)
                return -1
            await asyncio.sleep(0.2)
        return code

    def close(self) -> None:
        for node in range(len(self.processes)):
            self.kill(node)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.processes[node].wait(10)


async def run(*, run_root: Path, job: str, steps: int, width: int, console: Console
              ) -> str | None:
    """Run the job across three hosts, kill host 1 at a third of the steps; returns the final
    parameters' digest (None: the job failed, which is printed)."""
    observer = console_output.ConsoleObserver(console)
    token = secrets.token_urlsafe(24)
    access = grpc_security.AccessPolicy.parse({"identities": [
        {"name": "demo-hosts", "roles": ["agent"], "token": token}]})
    controller = service.ControllerService(
        service.ControllerSettings(run_root=run_root / f"{job}-controller",
                                   security=grpc_security.ServerSecurity(insecure=True,
                                                                         access=access)),
        on_event=observer.event)
    port = await controller.start("127.0.0.1:0")
    digest = run_root / job / "final-parameters.sha256"
    owner_only.make_dir(run_root / job)
    token_file = run_root / job / "agent.token"
    descriptor = owner_only.create(token_file)
    with os.fdopen(descriptor, "w") as written:
        written.write(token)
    hosts = HostDemo(run_root=run_root, job=job, endpoint=f"127.0.0.1:{port}", steps=steps,
                     width=width, digest=digest, token_file=token_file)
    try:
        console.print(f"controller on 127.0.0.1:{port}; hosts 0 and 1 hold 2 ranks each, host "
                      f"2 is a spare; logs: {hosts.logs[0].parent}/{job}.host-N.log")
        kill_at = (steps // 3) // 50 * 50 or 50
        await hosts.wait_for_step(kill_at)
        console.print(f"[bold red]host 1 killed whole[/bold red] (SIGKILL to its agent and "
                      f"both its workers) after step {kill_at}")
        hosts.kill(1)
        codes = [await hosts.wait(0), await hosts.wait(2)]
        result = controller.results.get(job)
        if result is not None:
            console.print(f"job across hosts: {result.outcome}: {result.reason}")
        if codes != [0, 0] or not digest.exists():
            console.print(f"[bold red]the job across hosts failed (exit codes {codes})"
                          f"[/bold red]\n{hosts.output(0)[-3000:]}")
            return None
        return digest.read_text().strip()
    finally:
        hosts.close()
        await controller.stop()
