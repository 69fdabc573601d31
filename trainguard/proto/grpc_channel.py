"""The controller protocol across hosts: each agent's :class:`~trainguard.proto.channel.Channel`
is one gRPC ``Control.Connect`` stream (control.proto), opened by the agent.

The controller serves (:class:`ControlServer`) and hands each stream that opens to its own
code as a channel; an agent connects (:func:`connect`). Plain text for now: authentication
(mutual TLS or a token) comes with the controller's service in the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from trainguard.proto import control_pb2 as pb
from trainguard.proto import control_pb2_grpc as pb_grpc
from trainguard.proto.channel import ChannelClosedError

__all__ = ["AgentConnection", "ControlServer", "connect"]

logger = logging.getLogger(__name__)


class _StreamEnd:
    """A channel over one side of a bidirectional stream: ``read`` and ``write`` are that
    side's (the server's context or the client's call). Sends queue for a writer task, so
    that :meth:`send` never blocks, as the protocol's ends expect."""

    def __init__(self, read: Callable[[], Awaitable[Any]],
                 write: Callable[[pb.Envelope], Awaitable[None]],
                 done_writing: Callable[[], Awaitable[None]] | None = None) -> None:
        self._read = read
        self._write = write
        self._done_writing = done_writing
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._closed = False
        self._peer_closed = False
        self.writer = asyncio.create_task(self._write_all(), name="trainguard-grpc-writer")

    def send(self, data: bytes) -> None:
        if self._closed:
            raise ChannelClosedError("this end of the channel is closed")
        self._outbox.put_nowait(data)

    async def receive(self) -> bytes:
        if self._peer_closed:
            raise ChannelClosedError("the other end closed the stream")
        try:
            message = await self._read()
        except grpc.aio.AioRpcError as error:
            self._peer_closed = True
            raise ChannelClosedError(f"the stream broke: {error.code().name}: "
                                     f"{error.details()}") from error
        if message is grpc.aio.EOF:
            self._peer_closed = True
            raise ChannelClosedError("the other end closed the stream")
        data: bytes = message.SerializeToString()
        return data

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbox.put_nowait(None)

    async def _write_all(self) -> None:
        try:
            while (data := await self._outbox.get()) is not None:
                await self._write(pb.Envelope.FromString(data))
            if self._done_writing is not None:
                await self._done_writing()
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as error:
            # The stream ended under us; the reading side reports it.
            logger.debug("control stream write ended: %s", error)
            self._closed = True


class _Servicer(pb_grpc.ControlServicer):
    def __init__(self, on_agent: Callable[[_StreamEnd, str], Awaitable[None]]) -> None:
        self._on_agent = on_agent

    async def Connect(self, request_iterator: Any,  # noqa: N802 - the name control.proto gives
                      context: grpc.aio.ServicerContext[pb.Envelope, pb.Envelope]) -> None:
        end = _StreamEnd(context.read, context.write)
        try:
            await self._on_agent(end, context.peer())
        finally:
            end.close()
            # Let the last messages out before the stream ends with the handler.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(end.writer, 5.0)


class ControlServer:
    """The controller's gRPC server; ``on_agent(channel, peer)`` runs for each agent's stream,
    which ends when it returns."""

    def __init__(self, on_agent: Callable[[_StreamEnd, str], Awaitable[None]]) -> None:
        self._server = grpc.aio.server()
        pb_grpc.add_ControlServicer_to_server(_Servicer(on_agent), self._server)
        self.port = 0

    async def start(self, listen: str) -> int:
        """Listen on ``HOST:PORT`` (port 0: a free one); returns the port.

        Raises:
            OSError: the address cannot be bound.
        """
        try:
            self.port = self._server.add_insecure_port(listen)
        except RuntimeError as error:
            raise OSError(f"cannot listen on {listen}: {error}") from error
        await self._server.start()
        return self.port

    async def stop(self, *, grace: float = 1.0) -> None:
        await self._server.stop(grace)


class AgentConnection:
    """An agent's end of its stream to the controller, and the gRPC channel under it."""

    def __init__(self, channel: grpc.aio.Channel, end: _StreamEnd) -> None:
        self._grpc = channel
        self.channel = end

    async def disconnect(self) -> None:
        self.channel.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.channel.writer, 5.0)
        await self._grpc.close()


async def connect(address: str, *, timeout: float) -> AgentConnection:
    """Open this agent's stream to the controller at ``HOST:PORT``.

    Raises:
        ConnectionError: the controller did not answer within ``timeout`` seconds.
    """
    channel = grpc.aio.insecure_channel(address)
    try:
        await asyncio.wait_for(channel.channel_ready(), timeout)
    except TimeoutError:
        await channel.close()
        raise ConnectionError(f"the controller at {address} did not answer within "
                              f"{timeout:g} s") from None
    call = pb_grpc.ControlStub(channel).Connect()
    return AgentConnection(channel, _StreamEnd(call.read, call.write, call.done_writing))
