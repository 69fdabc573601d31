"""The agent's local socket: workers' step marks and requests, and control clients' requests.

An abstract Unix socket (Linux): it has no file to clean up and no path-length limit to hit in
deep run directories. Its address is written ``@name`` in the environment and in ``agent.json``.

An abstract socket has no file permissions: anyone on the host who learns its name can connect.
So every connection is checked with the kernel's word on its peer (``SO_PEERCRED``): only the
job's own user and root are answered, and a worker's hello must come from the process it names.
The handler then checks the hello's per-worker secret, which a process of the same user cannot
guess either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import uuid
from typing import Protocol

from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec

__all__ = ["IpcServer", "MessageHandler", "refusal"]

logger = logging.getLogger(__name__)

_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def _peer(writer: asyncio.StreamWriter) -> tuple[int, int]:
    """The connected process's pid and uid, as the kernel saw them at ``connect``."""
    connection = writer.get_extra_info("socket")
    pid, uid, _ = _CREDENTIALS.unpack(connection.getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
    return pid, uid


def refusal(first: messages.Message, *, pid: int, uid: int) -> str | None:
    """Why a connection from process ``pid`` of user ``uid`` that opened with ``first`` is
    refused; None when it may go on."""
    own = os.geteuid()
    if uid not in (own, 0):
        return f"uid {uid} is neither the job's user (uid {own}) nor root"
    if isinstance(first, messages.Hello) and first.pid != pid:
        return f"its hello claims pid {first.pid}"
    return None


async def _read(reader: asyncio.StreamReader) -> bytes | None:
    """The next message's bytes; None at the end.

    Raises:
        ProtocolError: the stream ended inside a message, or it is too long to be one.
    """
    return await versioned.read_frame_async(reader, limit=worker_codec.FRAME_LIMIT)


def _write(writer: asyncio.StreamWriter, message: messages.Message) -> None:
    writer.write(versioned.frame(worker_codec.encode(message)))


class MessageHandler(Protocol):
    def worker_connected(self, hello: messages.Hello, writer: asyncio.StreamWriter) -> bool:
        """Accept (True) or refuse a worker's connection (one of an older generation)."""
        ...

    def worker_message(self, hello: messages.Hello, message: messages.Message) -> None: ...

    def worker_disconnected(self, hello: messages.Hello) -> None: ...

    async def control(self, request: messages.Message) -> messages.Message:
        """Answer one control request."""
        ...


class IpcServer:
    def __init__(self, handler: MessageHandler) -> None:
        self._handler = handler
        self.address = f"@trainguard-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(messages.socket_name(self.address))
        self._server = await asyncio.start_unix_server(self._serve, sock=listener)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            pid, uid = _peer(writer)
            data = await _read(reader)
            if data is None:
                return
            first = worker_codec.decode(data)
            refused = refusal(first, pid=pid, uid=uid)
            if refused is not None:
                await self._refuse(first, refused, writer, pid=pid)
            elif isinstance(first, messages.Hello):
                await self._serve_worker(first, reader, writer)
            else:
                await self._serve_control(first, reader, writer)
        except (messages.MessageError, versioned.ProtocolError) as error:
            logger.warning("dropping a connection that sent a bad message: %s", error)
        except ConnectionError:
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    @staticmethod
    async def _refuse(first: messages.Message, reason: str, writer: asyncio.StreamWriter, *,
                      pid: int) -> None:
        logger.warning("refused a connection from pid %s: %s", pid, reason)
        request_id = getattr(first, "request_id", None)
        if isinstance(request_id, int):
            _write(writer, messages.ControlReply(
                request_id=request_id, ok=False, detail=f"the agent refused: {reason}"))
            await writer.drain()

    async def _serve_worker(self, hello: messages.Hello, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
        if not self._handler.worker_connected(hello, writer):
            logger.warning("refused the hello of pid %s (rank %s, generation %s): not a worker "
                           "of the current generation, or without its secret", hello.pid,
                           hello.rank, hello.generation)
            return
        try:
            while (data := await _read(reader)) is not None:
                self._handler.worker_message(hello, worker_codec.decode(data))
        finally:
            self._handler.worker_disconnected(hello)

    async def _serve_control(self, first: messages.Message, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        request: messages.Message | None = first
        while request is not None:
            _write(writer, await self._handler.control(request))
            await writer.drain()
            data = await _read(reader)
            request = worker_codec.decode(data) if data is not None else None

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
