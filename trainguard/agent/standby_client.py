"""The agent's side of the standby process (:mod:`trainguard.agent.standby`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence

from trainguard.proto import helpers_pb2 as pb
from trainguard.proto import versioned

__all__ = ["StandbyError", "StandbyProcess", "WorkerLaunch"]

logger = logging.getLogger(__name__)

_MAX_PACKET = 1 << 20


class StandbyError(RuntimeError):
    """The standby process could not start, or died, or refused a spawn."""


@dataclasses.dataclass(frozen=True)
class WorkerLaunch:
    """What one worker runs: ``mode`` is "path" (script), "module" (-m) or "exec" (--no-python)."""

    mode: str
    target: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str


ExitCallback = Callable[[int, int], None]  # (pid, returncode)


class StandbyProcess:
    def __init__(
        self,
        *,
        preload: Sequence[str],
        env: Mapping[str, str],
        on_exit: ExitCallback,
        on_lost: Callable[[str], None],
    ) -> None:
        self._preload = list(preload)
        self._env = dict(env)
        self._on_exit = on_exit
        self._on_lost = on_lost
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[int]] = {}
        self._ready: asyncio.Future[pb.Ready] | None = None
        self._channel: socket.socket | None = None
        self._process: asyncio.subprocess.Process | None = None
        self.pid: int | None = None
        self.preloaded: list[str] = []

    @property
    def alive(self) -> bool:
        return self._channel is not None

    async def start(self, *, timeout: float) -> None:
        """Start the process and wait until its preloads are imported.

        Raises:
            StandbyError: it exited or did not get ready within ``timeout`` seconds.
        """
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._ready = loop.create_future()
        try:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "trainguard.agent.standby", str(theirs.fileno()),
                str(os.getpid()), *self._preload,
                pass_fds=(theirs.fileno(),), env=self._env, stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self._channel = ours
        loop.add_reader(ours.fileno(), self._on_readable)
        try:
            ready = await asyncio.wait_for(self._ready, timeout)
        except (TimeoutError, StandbyError) as error:
            await self.close()
            raise StandbyError(f"the standby process did not get ready: {error}") from error
        self.pid = ready.pid
        self.preloaded = list(ready.preloaded)
        for name, reason in ready.failed.items():
            logger.warning("standby process could not preload %s (%s); workers import it "
                           "themselves", name, reason)

    async def spawn(self, launch: WorkerLaunch, *, stdout: int, stderr: int) -> int:
        """Fork a worker; returns its pid. The descriptors are the worker's stdout and stderr.

        Raises:
            StandbyError: the standby process is gone or the fork failed.
        """
        if self._channel is None:
            raise StandbyError("the standby process is not running")
        request_id = next(self._ids)
        request = pb.StandbyRequest(spawn=pb.Spawn(
            id=request_id, mode=launch.mode, target=launch.target, args=list(launch.args),
            env=dict(launch.env), cwd=launch.cwd))
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        socket.send_fds(self._channel, [versioned.serialize(request)], [stdout, stderr])
        return await future

    def _on_readable(self) -> None:
        assert self._channel is not None
        try:
            packet = self._channel.recv(_MAX_PACKET)
        except OSError as error:
            packet = b""
            logger.warning("standby channel failed: %s", error)
        if not packet:
            self._lost("the standby process exited")
            return
        try:
            event = versioned.parse(pb.StandbyEvent, packet)
        except versioned.ProtocolError as error:
            self._lost(f"the standby process sent what this agent cannot read: {error}")
            return
        kind = event.WhichOneof("kind")
        if kind == "ready" and self._ready is not None and not self._ready.done():
            self._ready.set_result(event.ready)
        elif kind == "spawned":
            self._resolve(event.spawned.id, result=event.spawned.pid)
        elif kind == "spawn_failed":
            self._resolve(event.spawn_failed.id, error=StandbyError(event.spawn_failed.error))
        elif kind == "exited":
            self._on_exit(event.exited.pid, event.exited.returncode)

    def _resolve(self, request_id: int, *, result: int = 0,
                 error: Exception | None = None) -> None:
        future = self._pending.pop(request_id, None)
        if future is None or future.done():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def _lost(self, reason: str) -> None:
        self._detach()
        failure = StandbyError(reason)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(failure)
        for request_id in list(self._pending):
            self._resolve(request_id, error=failure)
        self._on_lost(reason)

    def _detach(self) -> None:
        if self._channel is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(self._channel.fileno())
            self._channel.close()
            self._channel = None

    async def close(self, *, timeout: float = 5.0) -> None:
        """Hang up; the standby process exits, and with it any worker still running."""
        self._detach()
        process, self._process = self._process, None
        if process is None:
            return
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
