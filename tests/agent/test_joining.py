"""Registering with the controllers a host knows, over real gRPC streams on loopback: one that
goes away as it is asked (a leader dying while a standby takes over) sends the host on to the
next, where a refusal ends the attempt at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trainguard.agent import joining
from trainguard.proto import codec, grpc_channel, grpc_security, versioned
from trainguard.proto import control_pb2 as pb

SERVER = grpc_security.ServerSecurity(insecure=True)
CLIENT = grpc_security.ClientSecurity(insecure=True)


async def _hang_up(channel: Any, _: str) -> None:
    await channel.receive()  # the registration, left unanswered: the stream ends


def _answer(registered: pb.Registered) -> Any:
    async def answer(channel: Any, _: str) -> None:
        codec.unpack(await channel.receive())
        channel.send(versioned.serialize(pb.Envelope(registered=registered)))
        await asyncio.sleep(0.5)  # the answer goes out before the stream ends
    return answer


async def _rejoin(*handlers: Any, within: float) -> pb.Placement:
    servers = [grpc_channel.ControlServer(handler, security=SERVER) for handler in handlers]
    try:
        ports = [await server.start("127.0.0.1:0") for server in servers]
        settings = joining.ClusterSettings(
            endpoint=",".join(f"127.0.0.1:{port}" for port in ports), nnodes=2,
            security=CLIENT)
        register = pb.Register(job="job", node_rank=1, nnodes=2, nproc_per_node=2,
                               host="host-1", rejoin=pb.Rejoin(generation=1, wait=within))
        connection, placement = await joining.rejoin(settings, register, within=within)
        await connection.disconnect()
        return placement
    finally:
        for server in servers:
            await server.stop()


def test_a_controller_that_hangs_up_on_the_registration_sends_the_host_to_the_next() -> None:
    placed = pb.Registered(placement=pb.Placement(node_rank=1, nnodes=2))
    placement = asyncio.run(_rejoin(_hang_up, _answer(placed), within=20))
    assert (placement.node_rank, placement.nnodes) == (1, 2)


def test_a_refusal_ends_the_attempt_though_time_is_left() -> None:
    refused = pb.Registered(refused=pb.Refusal(reason="node rank 1 is held by host-9"))
    with pytest.raises(joining.JoinRefusedError, match="held by host-9"):
        asyncio.run(asyncio.wait_for(_rejoin(_answer(refused), within=60), 30))


def test_controllers_that_only_hang_up_are_given_up_once_the_wait_is_over() -> None:
    with pytest.raises(joining.JoinRefusedError, match="closed the registration"):
        asyncio.run(asyncio.wait_for(_rejoin(_hang_up, _hang_up, within=2), 30))
