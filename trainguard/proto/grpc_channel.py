"""The controller's gRPC server and its clients.

Each agent's :class:`~trainguard.proto.channel.Channel` is one ``Control.Connect`` stream
(control.proto), opened by the agent (:func:`connect`); the controller serves
(:class:`ControlServer`) and hands each stream that opens to its own code as a channel.
``Control.Status`` answers ``trainguard status`` (:func:`cluster_status`),
``Control.SeparateDevice`` and ``ReleaseDevice`` ``trainguard devices`` (:func:`device_request`),
and
``PubFault.SendPublicFault`` (pubfault.proto) takes public faults from other senders
(:func:`send_public_fault`), and ``TrainingDataTrace`` (profiling.proto) switches a job's
profiling (:func:`switch_profiling`, :func:`profiling_status`, :func:`follow_profiling`).
Every call is authenticated
and its role checked first (:mod:`.grpc_security`); the server takes messages up to
:data:`~.grpc_security.MAX_MESSAGE_BYTES`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc
import grpc.aio
from google.protobuf import message as protobuf_message

from trainguard.proto import channel as channels
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_security, profiling_pb2, pubfault_pb2, versioned

__all__ = ["AGENT_LEASE", "GET_DATA_TRACE", "MODIFY_DATA_TRACE", "REPORT_DEVICES",
           "SUBSCRIBE_DATA_TRACE", "AgentConnection", "CallRefusedError", "ControlServer",
           "DataTraceHandler", "DeviceReportHandler", "DeviceRequestHandler",
           "PublicFaultHandler", "cluster_status", "connect", "device_request",
           "follow_profiling", "profiling_status",
           "report_devices", "send_public_fault", "switch_profiling"]

logger = logging.getLogger(__name__)

_Response = TypeVar("_Response", bound=protobuf_message.Message)


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
_PUBFAULT = pubfault_pb2.DESCRIPTOR.services_by_name["PubFault"]
_SEND_PUBLIC_FAULT = f"/{_PUBFAULT.full_name}/SendPublicFault"

PublicFaultHandler = Callable[[pubfault_pb2.PublicFaultRequest],
                              Awaitable[pubfault_pb2.RespStatus]]
_DATA_TRACE = profiling_pb2.DESCRIPTOR.services_by_name["TrainingDataTrace"]
MODIFY_DATA_TRACE = f"/{_DATA_TRACE.full_name}/ModifyTrainingDataTraceSwitch"
GET_DATA_TRACE = f"/{_DATA_TRACE.full_name}/GetTrainingDataTraceSwitch"
SUBSCRIBE_DATA_TRACE = f"/{_DATA_TRACE.full_name}/SubscribeDataTraceSwitch"


class DataTraceHandler(Protocol):
    """Switches a job's lightweight profiling, and says what it is (profiling.proto)."""

    def modify(self, request: profiling_pb2.DataTypeReq) -> Awaitable[profiling_pb2.DataTypeRes]:
        ...

    def get(self, request: profiling_pb2.DataStatusReq) -> profiling_pb2.DataStatusRes: ...

    def subscribe(self, client: profiling_pb2.ProfilingClientInfo
                  ) -> AsyncIterator[profiling_pb2.DataStatusRes]: ...
DeviceReportHandler = Callable[[pb.DeviceReport], Awaitable[pb.DeviceReportAck]]


class DeviceRequestHandler(Protocol):
    """Separates (``separate``) or releases an operator's device."""

    def __call__(self, request: pb.DeviceRequest, *, separate: bool
                 ) -> Awaitable[pb.DeviceAnswer]: ...


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
                 security: grpc_security.ServerSecurity,
                 on_status: Callable[[], pb.ClusterStatus] | None = None,
                 on_public_fault: PublicFaultHandler | None = None,
                 on_devices: DeviceReportHandler | None = None,
                 on_device_request: DeviceRequestHandler | None = None,
                 data_trace: DataTraceHandler | None = None,
                 lease: float = AGENT_LEASE) -> None:
        """``lease``: seconds an agent's connection may stay silent before its stream ends
        (it is pinged every half of it; a ping unanswered within half of it ends it);
        ``on_status``: what ``Control.Status`` answers; ``on_public_fault``: takes a public
        fault message whose caller may send as its sender (None: the service is not
        offered); ``on_devices``: takes a host's device report (None: refused);
        ``on_device_request``: an operator's separation or release (None: refused);
        ``data_trace``: the jobs' profiling switches (None: the service is not offered)."""
        self._on_agent = on_agent
        self._on_status = on_status
        self._on_public_fault = on_public_fault
        self._on_devices = on_devices
        self._on_device_request = on_device_request
        self._security = security
        self._server = grpc.aio.server(
            interceptors=[grpc_security.AccessInterceptor(security)], options=[
                *_keepalive(lease),
                # Agents ping too (connect); refusing their pings would end their streams.
                ("grpc.http2.min_ping_interval_without_data_ms", 100),
                ("grpc.max_receive_message_length", grpc_security.MAX_MESSAGE_BYTES),
            ])
        handlers = [grpc.method_handlers_generic_handler(
            _SERVICE.full_name,
            {"Connect": grpc.stream_stream_rpc_method_handler(self._connect),
             "Status": grpc.unary_unary_rpc_method_handler(
                 self._status, request_deserializer=pb.StatusRequest.FromString,
                 response_serializer=pb.ClusterStatus.SerializeToString),
             "ReportDevices": grpc.unary_unary_rpc_method_handler(
                 self._report_devices, request_deserializer=pb.DeviceReport.FromString,
                 response_serializer=pb.DeviceReportAck.SerializeToString),
             **{name: grpc.unary_unary_rpc_method_handler(
                 functools.partial(self._device_request, separate=name == "SeparateDevice"),
                 request_deserializer=pb.DeviceRequest.FromString,
                 response_serializer=pb.DeviceAnswer.SerializeToString)
                for name in ("SeparateDevice", "ReleaseDevice")}})]
        if on_public_fault is not None:
            # Parsed by the handler, not by gRPC: only once the caller is known, and a
            # message that does not parse is the sender's error (INVALID_ARGUMENT).
            handlers.append(grpc.method_handlers_generic_handler(
                _PUBFAULT.full_name,
                {"SendPublicFault": grpc.unary_unary_rpc_method_handler(
                    self._send_public_fault,
                    response_serializer=pubfault_pb2.RespStatus.SerializeToString)}))
        if data_trace is not None:
            async def get(request: profiling_pb2.DataStatusReq,
                          _: object) -> profiling_pb2.DataStatusRes:
                return data_trace.get(request)

            async def subscribe(client: profiling_pb2.ProfilingClientInfo,
                                _: object) -> AsyncIterator[profiling_pb2.DataStatusRes]:
                async for status in data_trace.subscribe(client):  # gRPC wants a generator
                    yield status

            handlers.append(grpc.method_handlers_generic_handler(_DATA_TRACE.full_name, {
                "ModifyTrainingDataTraceSwitch": grpc.unary_unary_rpc_method_handler(
                    lambda request, _: data_trace.modify(request),
                    request_deserializer=profiling_pb2.DataTypeReq.FromString,
                    response_serializer=profiling_pb2.DataTypeRes.SerializeToString),
                "GetTrainingDataTraceSwitch": grpc.unary_unary_rpc_method_handler(
                    get, request_deserializer=profiling_pb2.DataStatusReq.FromString,
                    response_serializer=profiling_pb2.DataStatusRes.SerializeToString),
                "SubscribeDataTraceSwitch": grpc.unary_stream_rpc_method_handler(
                    subscribe,
                    request_deserializer=profiling_pb2.ProfilingClientInfo.FromString,
                    response_serializer=profiling_pb2.DataStatusRes.SerializeToString)}))
        self._server.add_generic_rpc_handlers(tuple(handlers))
        self.port = 0

    async def _report_devices(
            self, report: pb.DeviceReport,
            context: grpc.aio.ServicerContext[pb.DeviceReport, pb.DeviceReportAck]
    ) -> pb.DeviceReportAck:
        if self._on_devices is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no device reports taken here")
        assert self._on_devices is not None
        try:
            return await self._on_devices(report)
        except ValueError as error:  # a name that is no node name
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            raise

    async def _device_request(
            self, request: pb.DeviceRequest,
            context: grpc.aio.ServicerContext[pb.DeviceRequest, pb.DeviceAnswer], *,
            separate: bool) -> pb.DeviceAnswer:
        if self._on_device_request is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no devices separated here")
        assert self._on_device_request is not None
        return await self._on_device_request(request, separate=separate)

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

    async def _send_public_fault(
            self, data: bytes,
            context: grpc.aio.ServicerContext[bytes, pubfault_pb2.RespStatus]
    ) -> pubfault_pb2.RespStatus:
        assert self._on_public_fault is not None
        try:
            request = pubfault_pb2.PublicFaultRequest.FromString(data)
        except protobuf_message.DecodeError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"not a PublicFaultRequest: {error}")
        caller = grpc_security.CALLER.get()
        if not caller.may_send_as(request.resource):
            logger.warning("refused a public fault from %s: %s may not send as %r",
                           context.peer(), caller.name, request.resource)
            allowed = ", ".join(sorted(caller.resources or ())) or "none"
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"{caller.name} may not send public faults as "
                                f"{request.resource!r} (its resources: {allowed})")
        return await self._on_public_fault(request)

    async def start(self, listen: str) -> int:
        """Listen on ``HOST:PORT`` (port 0: a free one); returns the port.

        Raises:
            OSError: the address cannot be bound.
        """
        try:
            self.port = self._security.bind(self._server, listen)
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


class CallRefusedError(ConnectionError):
    """The controller refused a call; ``code`` is gRPC's status code, the message its
    reason."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


async def _unary(address: str, method: str, request: protobuf_message.Message,
                 response: type[_Response], *, timeout: float,
                 security: grpc_security.ClientSecurity) -> _Response:
    """One call; raises CallRefusedError (see the callers)."""
    async with security.channel(address) as channel:
        call = channel.unary_unary(method, request_serializer=type(request).SerializeToString,
                                   response_deserializer=response.FromString)
        try:
            answer: _Response = await call(request, timeout=timeout,
                                           metadata=security.metadata())
        except grpc.aio.AioRpcError as error:
            raise CallRefusedError(f"the controller at {address}: {error.code().name}: "
                                   f"{error.details()}", error.code()) from error
    return answer


async def cluster_status(address: str, *, timeout: float,
                         security: grpc_security.ClientSecurity) -> pb.ClusterStatus:
    """The controller's view of its jobs (``Control.Status``).

    Raises:
        CallRefusedError: it could not be reached or asked within ``timeout`` seconds, or
            refused the question (the message says why).
    """
    return await _unary(address, f"/{_SERVICE.full_name}/Status",
                        pb.StatusRequest(version=versioned.PROTOCOL_VERSION), pb.ClusterStatus,
                        timeout=timeout, security=security)


async def send_public_fault(address: str, request: pubfault_pb2.PublicFaultRequest, *,
                            timeout: float, security: grpc_security.ClientSecurity
                            ) -> pubfault_pb2.RespStatus:
    """Send a public fault message (``PubFault.SendPublicFault``); the controller's answer
    (code 0: taken in).

    Raises:
        CallRefusedError: it could not be reached within ``timeout`` seconds, or refused the
            call before looking at the message (credentials, role, size).
    """
    return await _unary(address, _SEND_PUBLIC_FAULT, request, pubfault_pb2.RespStatus,
                        timeout=timeout, security=security)


async def switch_profiling(address: str, request: profiling_pb2.DataTypeReq, *,
                           timeout: float, security: grpc_security.ClientSecurity
                           ) -> profiling_pb2.DataTypeRes:
    """Switch a job's lightweight profiling (``TrainingDataTrace.ModifyTrainingDataTraceSwitch``);
    the controller's answer (code 200: done).

    Raises:
        CallRefusedError: it could not be reached within ``timeout`` seconds, or refused the
            call (credentials, role).
    """
    return await _unary(address, MODIFY_DATA_TRACE, request, profiling_pb2.DataTypeRes,
                        timeout=timeout, security=security)


async def profiling_status(address: str, request: profiling_pb2.DataStatusReq, *,
                           timeout: float, security: grpc_security.ClientSecurity
                           ) -> profiling_pb2.DataStatusRes:
    """A job's lightweight-profiling switch (``TrainingDataTrace.GetTrainingDataTraceSwitch``).

    Raises:
        CallRefusedError: as :func:`switch_profiling`.
    """
    return await _unary(address, GET_DATA_TRACE, request, profiling_pb2.DataStatusRes,
                        timeout=timeout, security=security)


async def follow_profiling(address: str, client: profiling_pb2.ProfilingClientInfo, *,
                           security: grpc_security.ClientSecurity
                           ) -> AsyncIterator[profiling_pb2.DataStatusRes]:
    """A job's lightweight-profiling switch now, then each change until the job ends
    (``TrainingDataTrace.SubscribeDataTraceSwitch``).

    Raises:
        CallRefusedError: it could not be reached, or refused the call (credentials, role),
            or the stream broke.
    """
    async with security.channel(address) as channel:
        call = channel.unary_stream(
            SUBSCRIBE_DATA_TRACE,
            request_serializer=profiling_pb2.ProfilingClientInfo.SerializeToString,
            response_deserializer=profiling_pb2.DataStatusRes.FromString)
        try:
            async for status in call(client, metadata=security.metadata()):
                yield status
        except grpc.aio.AioRpcError as error:
            raise CallRefusedError(f"the controller at {address}: {error.code().name}: "
                                   f"{error.details()}", error.code()) from error


async def device_request(address: str, request: pb.DeviceRequest, *, separate: bool,
                         timeout: float, security: grpc_security.ClientSecurity
                         ) -> pb.DeviceAnswer:
    """Separate (``separate``) or release an operator's device (``Control.SeparateDevice``,
    ``Control.ReleaseDevice``); the controller's answer (``ok`` false: refused, ``text`` says
    why).

    Raises:
        CallRefusedError: it could not be reached within ``timeout`` seconds, or refused the
            call (credentials, role).
    """
    method = "SeparateDevice" if separate else "ReleaseDevice"
    return await _unary(address, f"/{_SERVICE.full_name}/{method}", request, pb.DeviceAnswer,
                        timeout=timeout, security=security)


REPORT_DEVICES = f"/{_SERVICE.full_name}/ReportDevices"


async def report_devices(address: str, report: pb.DeviceReport, *, timeout: float,
                         security: grpc_security.ClientSecurity) -> pb.DeviceReportAck:
    """Report a host's devices (``Control.ReportDevices``); the levels of those that changed.

    Raises:
        CallRefusedError: it could not be reached within ``timeout`` seconds, or refused the
            call (credentials, role, a name that is no node name).
    """
    return await _unary(address, REPORT_DEVICES, report, pb.DeviceReportAck, timeout=timeout,
                        security=security)


async def connect(address: str, *, timeout: float,
                  security: grpc_security.ClientSecurity) -> AgentConnection:
    """Open this agent's stream to the controller at ``HOST:PORT``.

    Raises:
        ConnectionError: the controller did not answer within ``timeout`` seconds.
    """
    channel = security.channel(address, options=_keepalive(AGENT_LEASE))
    try:
        await asyncio.wait_for(_ready(channel), timeout)
    except TimeoutError:
        await channel.close()
        raise ConnectionError(f"the controller at {address} did not answer within "
                              f"{timeout:g} s") from None
    except ConnectionError as error:
        await channel.close()
        raise ConnectionError(f"the controller at {address} {error}") from None
    call: grpc.aio.StreamStreamCall[bytes, bytes] = channel.stream_stream(_CONNECT)(
        metadata=security.metadata())
    return AgentConnection(channel, _StreamEnd(call.read, call.write, call.done_writing))
