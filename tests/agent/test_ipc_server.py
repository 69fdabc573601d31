"""Who the agent's socket answers: the job's user and root, and a worker only as itself; how
it reads and answers them, and what it drops."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import struct
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from trainguard.agent import ipc_server
from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec
from trainguard.proto import worker_pb2 as pb

T = TypeVar("T")

OWN = os.geteuid()
INJECT = messages.InjectRequest(request_id=1, rank=1, kind=messages.InjectionKind.CRASH,
                                at_step=None)
HELLO = messages.Hello(rank=1, local_rank=1, pid=4242, generation=0, secret="s")


def test_another_user_is_refused_whatever_it_sends() -> None:
    other = OWN + 1000
    for first in (INJECT, HELLO):
        assert ipc_server.refusal(first, pid=4242, uid=other) == (
            f"uid {other} is neither the job's user (uid {OWN}) nor root")


def test_the_jobs_user_and_root_are_answered() -> None:
    assert ipc_server.refusal(INJECT, pid=99, uid=OWN) is None
    assert ipc_server.refusal(INJECT, pid=99, uid=0) is None
    assert ipc_server.refusal(HELLO, pid=4242, uid=OWN) is None


def test_a_hello_must_come_from_the_process_it_names() -> None:
    assert ipc_server.refusal(HELLO, pid=4243, uid=OWN) == "its hello claims pid 4242"


# --- the socket itself: frames in, frames out, a bad one drops the connection ----------------


class RecordingHandler:
    """Accepts every worker, records what arrives, answers every control request."""

    def __init__(self) -> None:
        self.arrived: list[messages.Message] = []
        self.disconnected = asyncio.Event()

    def worker_connected(self, hello: messages.Hello, writer: asyncio.StreamWriter) -> bool:
        self.arrived.append(hello)
        return True

    def worker_message(self, hello: messages.Hello, message: messages.Message) -> None:
        self.arrived.append(message)

    def worker_disconnected(self, hello: messages.Hello) -> None:
        self.disconnected.set()

    async def control(self, request: messages.Message) -> messages.Message:
        self.arrived.append(request)
        return messages.ControlReply(getattr(request, "request_id", 0), True, "done")


JSON_LINE = b'{"type":"inject-request","request_id":1}\n'  # as spoken before: its "{"ty" a length


def _frames(*items: messages.Message) -> bytes:
    return b"".join(versioned.frame(worker_codec.encode(item)) for item in items)


async def _talk(server: ipc_server.IpcServer, data: bytes) -> bytes:
    """Send ``data``, then read until the agent closes the connection (bounded)."""
    reader, writer = await asyncio.open_unix_connection(messages.socket_name(server.address))
    writer.write(data)
    await writer.drain()
    writer.write_eof()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def _with_server(use: Callable[[ipc_server.IpcServer, RecordingHandler], Awaitable[T]]) -> T:
    async def scenario() -> T:
        handler = RecordingHandler()
        server = ipc_server.IpcServer(handler)
        await server.start()
        try:
            return await use(server, handler)
        finally:
            await server.close()
    return asyncio.run(scenario())


def test_a_connection_that_opens_with_a_hello_is_a_workers() -> None:
    hello = dataclasses.replace(HELLO, pid=os.getpid())
    mark = messages.StepMark(step=3, phase=messages.StepPhase.BEGIN, time=1.0)

    async def use(server: ipc_server.IpcServer, handler: RecordingHandler) -> bytes:
        answer = await _talk(server, _frames(hello, mark, mark))
        await asyncio.wait_for(handler.disconnected.wait(), 10)
        assert handler.arrived == [hello, mark, mark]
        return answer

    assert _with_server(use) == b""


def test_a_connection_that_opens_with_a_request_is_a_control_clients() -> None:
    second = dataclasses.replace(INJECT, request_id=2)

    async def use(server: ipc_server.IpcServer, handler: RecordingHandler) -> bytes:
        answer = await _talk(server, _frames(INJECT, second))
        assert handler.arrived == [INJECT, second]
        return answer

    stream = io.BytesIO(_with_server(use))
    replies = [worker_codec.decode(data) for data in iter(lambda: versioned.read_frame(stream),
                                                          None)]
    assert replies == [messages.ControlReply(1, True, "done"), messages.ControlReply(2, True,
                                                                                    "done")]


@pytest.mark.parametrize(("data", "problem"), [
    (versioned.frame(b"garbage"), "unreadable Envelope"),
    (JSON_LINE, f"a message of {versioned.frame_length(JSON_LINE[:4])} bytes, over the limit "
     f"of {worker_codec.FRAME_LIMIT}"),
    (versioned.frame(pb.Envelope(version=versioned.PROTOCOL_VERSION + 1, inject_request=pb.
                                 InjectRequest(request_id=1, kind="crash")).SerializeToString()),
     "Envelope of protocol version 2; this end speaks version 1"),
    (versioned.frame(pb.Envelope(version=versioned.PROTOCOL_VERSION, step=pb.StepMark(
        step=1, phase="middle")).SerializeToString()),
     "step: field 'phase' is 'middle', expected one of begin, end"),
    (struct.pack("<I", worker_codec.FRAME_LIMIT + 1) + b"\0" * 64,
     f"a message of {worker_codec.FRAME_LIMIT + 1} bytes, over the limit"),
    (versioned.frame(worker_codec.encode(INJECT))[:-1], "the stream ended 1 bytes before"),
])
def test_a_bad_first_message_drops_the_connection_naming_the_problem(
        data: bytes, problem: str, caplog: pytest.LogCaptureFixture) -> None:
    async def use(server: ipc_server.IpcServer, handler: RecordingHandler) -> bytes:
        answer = await _talk(server, data)
        assert handler.arrived == []
        return answer

    with caplog.at_level("WARNING", logger="trainguard.agent.ipc_server"):
        assert _with_server(use) == b""
    assert f"dropping a connection that sent a bad message: {problem}" in caplog.text


def test_a_bad_message_after_a_hello_drops_the_workers_connection(
        caplog: pytest.LogCaptureFixture) -> None:
    hello = dataclasses.replace(HELLO, pid=os.getpid())
    mark = messages.StepMark(step=3, phase=messages.StepPhase.BEGIN, time=1.0)

    async def use(server: ipc_server.IpcServer, handler: RecordingHandler) -> None:
        await _talk(server, _frames(hello) + versioned.frame(b"garbage") + _frames(mark))
        await asyncio.wait_for(handler.disconnected.wait(), 10)
        assert handler.arrived == [hello]

    with caplog.at_level("WARNING", logger="trainguard.agent.ipc_server"):
        _with_server(use)
    assert "dropping a connection that sent a bad message: unreadable Envelope" in caplog.text
