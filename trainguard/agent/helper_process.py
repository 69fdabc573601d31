"""A helper process of the agent that answers typed requests (helpers.proto), in order.

Requests go to its stdin and replies come from its stdout, each framed by its length
(:func:`trainguard.proto.versioned.frame`). If the process dies, the requests in flight fail
and the next request starts a new process, so a helper killed mid-request costs that request
and nothing else.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

from google.protobuf.message import Message

from trainguard.proto import versioned

__all__ = ["HelperLostError", "HelperProcess"]

logger = logging.getLogger(__name__)

Reply = TypeVar("Reply", bound=Message)


class HelperLostError(RuntimeError):
    """The helper process exited before answering, or answered what this end cannot read."""


class HelperProcess(Generic[Reply]):
    def __init__(self, *, args: Sequence[str], env: Mapping[str, str], role: str,
                 reply: type[Reply]) -> None:
        """``args``: what follows ``python`` on the helper's command line; ``role``: its name in
        messages; ``reply``: the message type it answers with."""
        self._args = list(args)
        self._env = dict(env)
        self._role = role
        self._reply = reply
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: collections.deque[asyncio.Future[Reply]] = collections.deque()
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

    async def call(self, request: Message) -> Reply:
        """Send one request and wait for its reply.

        Raises:
            HelperLostError: the process died first (it is restarted on the next call), or its
                reply could not be read (the process is ended).
        """
        process = await self._ensure_started()
        assert process.stdin is not None
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        try:
            process.stdin.write(versioned.frame(versioned.serialize(request)))
            await process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader sees the exit and fails the future
        return await future

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        failure = ""
        try:
            # None: the process closed its stdout, it exited
            while (data := await versioned.read_frame_async(process.stdout)) is not None:
                reply = versioned.parse(self._reply, data)
                if self._waiting:
                    future = self._waiting.popleft()
                    if not future.done():
                        future.set_result(reply)
        except versioned.ProtocolError as error:
            failure = f": its reply could not be read ({error})"
            logger.error("%s process %d: %s; ending it", self._role, process.pid, error)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        returncode = await process.wait()
        if self._process is process:  # not closed by us
            logger.warning("%s process %d exited with %d", self._role, process.pid, returncode)
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(HelperLostError(
                    f"the {self._role} process exited with {returncode} before answering"
                    f"{failure}"))

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
