"""A helper process of the agent that answers JSON commands, one line each, in order.

If the process dies, the commands in flight fail and the next command starts a new process, so
a helper killed mid-command costs that command and nothing else.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["HelperLostError", "HelperProcess"]

logger = logging.getLogger(__name__)


class HelperLostError(RuntimeError):
    """The helper process exited before answering."""


class HelperProcess:
    def __init__(self, *, args: Sequence[str], env: Mapping[str, str], role: str) -> None:
        """``args``: what follows ``python`` on the helper's command line; ``role``: its name in
        messages."""
        self._args = list(args)
        self._env = dict(env)
        self._role = role
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: collections.deque[asyncio.Future[dict[str, Any]]] = collections.deque()
        self._ids = itertools.count(1)
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def _ensure_started(self) -> asyncio.subprocess.Process:
        if self._process is not None and self._process.returncode is None:
            return self._process
        if self._process is not None:
            self.restarts += 1
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, *self._args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=self._env,
        )
        self._reader = asyncio.create_task(self._read(self._process),
                                           name=f"{self._role}-replies")
        return self._process

    async def call(self, command: dict[str, Any]) -> dict[str, Any]:
        """Send one command and wait for its answer.

        Raises:
            HelperLostError: the process died first (it is restarted on the next call).
        """
        process = await self._ensure_started()
        assert process.stdin is not None
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        body = dict(command, id=next(self._ids))
        try:
            process.stdin.write(json.dumps(body).encode() + b"\n")
            await process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader sees the exit and fails the future
        return await future

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            if self._waiting:
                future = self._waiting.popleft()
                if not future.done():
                    future.set_result(json.loads(line))
        returncode = await process.wait()
        if self._process is process:  # not closed by us
            logger.warning("%s process %d exited with %d", self._role, process.pid, returncode)
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(HelperLostError(
                    f"the {self._role} process exited with {returncode} before answering"))

    async def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
