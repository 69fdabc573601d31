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

from trainguard.proto import channel as channels
from trainguard.proto import control_pb2 as pb
from trainguard.proto import versioned

__all__ = ["AGENT_LEASE", "AgentConnection", "ControlServer", "cluster_status", "connect"]

logger = logging.getLogger(__name__)


AGENT_LEASE = 2.0
"""Seconds a connection between an agent and its controller may stay silent before either end
gives it up: a cut link or a host that vanished is seen within it, by gRPC keepalive pings."""


def _keepalive(lease: float) -> list[tuple[str, int]]:
    half = max(1, round(lease * 500))
    return [("grpc.keepalive_time_ms", half), ("grpc.keepalive_timeout_ms", half),
            ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0)]


_SERVICE = pb.DESCRIPTOR.services_by_name["Control"]
_CONNECT = f"/{_SERVICE.full_name}/{_SERVICE.methods_by_name['Connect'].name}"
"""control.proto's ``Control.Connect``. Its envelopes cross the stream as the bytes the codec
made: no (de)serializer is registered, so gRPC neither parses nor re-encodes them."""


class _StreamEnd(channels.QueuedEnd):
    """A channel over one side of a bidirectional stream: ``read`` and ``write`` are that
    side's (the server's context or the client's call). Sends queue for a writer task."""

    def __init__(self, read: Callable[[], Awaitable[Any]],
                 write: Callable[[bytes], Awaitable[None]],
                 done_writing: Callable[[], Awaitable[None]] | None = None) -> None:
        super().__init__(asyncio.Queue())
        self._read = read
        self._write = write
        self._done_writing = done_writing
        self.writer = asyncio.create_task(self._write_all(), name="trainguard-grpc-writer")

    async def receive(self) -> bytes:
        self._check_peer()
        try:
            data = await self._read()
        except grpc.aio.AioRpcError as error:
            raise self._peer_gone(f"the stream broke: {error.code().name}: "
                                  f"{error.details()}") from error
        if data is grpc.aio.EOF:
            raise self._peer_gone("the other end closed the stream")
        assert isinstance(data, bytes)
        return data

    async def _write_all(self) -> None:
        try:
            while (data := await self._outbox.get()) is not None:
                await self._write(data)
            if self._done_writing is not None:
                await self._done_writing()
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as error:
            # The stream ended under us; the reading side reports it.
            logger.debug("control stream write ended: %s", error)
            self._closed = True


class ControlServer:
    """The controller's gRPC server; ``on_agent(channel, peer)`` runs for each agent's stream,
    which ends when it returns."""

    def __init__(self, on_agent: Callable[[_StreamEnd, str], Awaitable[None]], *,
                 on_status: Callable[[], pb.ClusterStatus] | None = None,
                 lease: float = AGENT_LEASE) -> None:
        """``lease``: seconds an agent's connection may stay silent before its stream ends
        (it is pinged every half of it; a ping unanswered within half of it ends it);
        ``on_status``: what ``Control.Status`` answers."""
        self._on_agent = on_agent
        self._on_status = on_status
        self._server = grpc.aio.server(options=[
            *_keepalive(lease),
            # Agents ping too (connect); refusing their pings would end their streams.
            ("grpc.http2.min_ping_interval_without_data_ms", 100),
        ])
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            _SERVICE.full_name,
            {"Connect": grpc.stream_stream_rpc_method_handler(self._connect),
             "Status": grpc.unary_unary_rpc_method_handler(
                 self._status, request_deserializer=pb.StatusRequest.FromString,
                 response_serializer=pb.ClusterStatus.SerializeToString)}),))
        self.port = 0

    async def _connect(self, requests: object,
                       context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        end = _StreamEnd(context.read, context.write)
        try:
            await self._on_agent(end, context.peer())
        finally:
            end.close()
            # Let the last messages out before the stream ends with the handler.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(end.writer, 5.0)

    async def _status(self, request: pb.StatusRequest,
                      context: grpc.aio.ServicerContext[pb.StatusRequest, pb.ClusterStatus]
                      ) -> pb.ClusterStatus:
        if request.version != versioned.PROTOCOL_VERSION:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"protocol version {request.version}, this controller speaks "
                                f"{versioned.PROTOCOL_VERSION}")
        status = self._on_status() if self._on_status is not None else pb.ClusterStatus()
        status.version = versioned.PROTOCOL_VERSION
        return status

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


async def _ready(channel: grpc.aio.Channel) -> None:
    """Until the channel is connected.

    Raises:
        ConnectionError: the first attempt failed (refused, no route): the caller decides
            when to try again, and says so, instead of gRPC retrying unseen.
    """
    state = channel.get_state(try_to_connect=True)
    while state is not grpc.ChannelConnectivity.READY:
        if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            raise ConnectionError("refused the connection, or there is no route to it")
        await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=True)


async def cluster_status(address: str, *, timeout: float) -> pb.ClusterStatus:
    """The controller's view of its jobs (``Control.Status``).

    Raises:
        ConnectionError: it could not be reached or asked within ``timeout`` seconds, or
            refused the question (the message says why).
    """
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(f"/{_SERVICE.full_name}/Status",
                                   request_serializer=pb.StatusRequest.SerializeToString,
                                   response_deserializer=pb.ClusterStatus.FromString)
        try:
            status: pb.ClusterStatus = await call(
                pb.StatusRequest(version=versioned.PROTOCOL_VERSION), timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise ConnectionError(f"the controller at {address}: {error.code().name}: "
                                  f"{error.details()}") from error
    return status


async def connect(address: str, *, timeout: float) -> AgentConnection:
    """Open this agent's stream to the controller at ``HOST:PORT``.

    Raises:
        ConnectionError: the controller did not answer within ``timeout`` seconds.
    """
    channel = grpc.aio.insecure_channel(address, options=_keepalive(AGENT_LEASE))
    try:
        await asyncio.wait_for(_ready(channel), timeout)
    except TimeoutError:
        await channel.close()
        raise ConnectionError(f"the controller at {address} did not answer within "
                              f"{timeout:g} s") from None
    except ConnectionError as error:
        await channel.close()
        raise ConnectionError(f"the controller at {address} {error}") from None
    call: grpc.aio.StreamStreamCall[bytes, bytes] = channel.stream_stream(_CONNECT)()
    return AgentConnection(channel, _StreamEnd(call.read, call.write, call.done_writing))
