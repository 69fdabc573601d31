"""The controller protocol over a real gRPC stream on loopback: the controller serves, an
agent connects and carries out commands, and either end's going is seen by the other."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import grpc
import grpc.aio
import pytest

from tests.controller.agent_fakes import FakeAgent
from trainguard.agent import controller_link
from trainguard.controller import agent_proxy
from trainguard.faults import process
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel, grpc_security, versioned

SERVER = grpc_security.ServerSecurity(insecure=True)
CLIENT = grpc_security.ClientSecurity(insecure=True)


def test_the_controller_drives_an_agent_across_a_grpc_stream() -> None:
    async def scenario() -> tuple[list[Any], list[tuple[str, Any]]]:
        seen: list[Any] = []

        async def drive(channel: Any, peer: str) -> None:
            proxy = agent_proxy.AgentProxy(channel)
            await proxy.connect(timeout=10)
            seen.append((proxy.host, proxy.spares_left, peer.startswith("ipv4:127.0.0.1")))
            view = await proxy.start_generation(0, restart_count=0)
            generation = agent.generation
            assert generation is not None
            for rank in range(4):
                generation.begun(rank, 1.0 + rank)
            seen.append(await asyncio.wait_for(view.all_stepping, 10))
            seen.append(await proxy.dump(failed=[1]))
            agent.refuse = "cannot form it"
            with pytest.raises(process.RecoveryError, match="cannot"):
                await proxy.recover(1, restart_count=1, replace=[1], to_spares=False)
            await proxy.close()

        agent = FakeAgent()
        server = grpc_channel.ControlServer(drive, security=SERVER)
        port = await server.start("127.0.0.1:0")
        try:
            connection = await grpc_channel.connect(f"127.0.0.1:{port}", timeout=10,
                                                    security=CLIENT)
            link_agent: Any = agent
            link = controller_link.ControllerLink(link_agent, connection.channel, host="host-b")
            # The controller's handler returns and its stream ends: the agent's serving ends.
            await asyncio.wait_for(link.serve(), 30)
            await connection.disconnect()
        finally:
            await server.stop()
        return seen, agent.calls

    seen, calls = asyncio.run(scenario())
    assert seen == [("host-b", 1, True), 4.0, 17]
    assert [name for name, _ in calls] == ["start", "dump", "recover"]


def test_an_agent_that_goes_away_fails_the_controllers_waiting_command() -> None:
    async def scenario() -> str:
        failed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def settle(proxy: agent_proxy.AgentProxy) -> None:
            try:
                await proxy.settle(timeout=60)
            except agent_proxy.AgentCommandError as error:
                failed.set_result(str(error))

        async def drive(channel: Any, _: str) -> None:
            # As the controller's service: the command is the job's, not the stream's, task;
            # gRPC may cancel the stream's handler when the agent's connection drops.
            proxy = agent_proxy.AgentProxy(channel)
            await proxy.connect(timeout=10)
            command = asyncio.create_task(settle(proxy))
            try:
                await proxy.wait_gone()
            finally:
                await proxy.close()
                await asyncio.wait_for(command, 10)

        server = grpc_channel.ControlServer(drive, security=SERVER)
        port = await server.start("127.0.0.1:0")
        try:
            connection = await grpc_channel.connect(f"127.0.0.1:{port}", timeout=10,
                                                    security=CLIENT)
            agent = FakeAgent()
            agent.settling = asyncio.Event()  # never set: the agent is busy settling
            link_agent: Any = agent
            link = controller_link.ControllerLink(link_agent, connection.channel, host="host-c")
            serving = asyncio.create_task(link.serve())
            while not agent.calls:  # the command arrived
                await asyncio.sleep(0.01)
            await connection.disconnect()  # the agent's host goes, mid-command
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            return await asyncio.wait_for(failed, 30)
        finally:
            await server.stop()

    assert "the agent is gone" in asyncio.run(scenario())


def test_a_controller_that_refuses_is_named_with_its_address_at_once() -> None:
    async def scenario() -> None:
        # A port nobody listens on: bound and closed.
        server = grpc_channel.ControlServer(lambda *_: asyncio.sleep(0), security=SERVER)
        port = await server.start("127.0.0.1:0")
        await server.stop()
        with pytest.raises(ConnectionError, match=rf"the controller at 127.0.0.1:{port} refused "
                                                  "the connection, or there is no route to it"):
            await grpc_channel.connect(f"127.0.0.1:{port}", timeout=5, security=CLIENT)

    asyncio.run(scenario())


def test_a_controller_that_accepts_but_never_answers_is_given_up_after_the_timeout() -> None:
    async def scenario(port: int) -> None:
        with pytest.raises(ConnectionError, match=rf"the controller at 127.0.0.1:{port} did "
                                                  "not answer within 0.5 s"):
            await grpc_channel.connect(f"127.0.0.1:{port}", timeout=0.5, security=CLIENT)

    # A socket that accepts connections (the kernel's backlog) and never speaks HTTP/2.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        asyncio.run(scenario(silent.getsockname()[1]))


def test_the_status_question_gets_the_controllers_answer_and_another_version_is_refused(
        ) -> None:
    async def scenario() -> tuple[pb.ClusterStatus, str]:
        def status() -> pb.ClusterStatus:
            answer = pb.ClusterStatus()
            job = answer.jobs.add(job="j", state="running", nnodes=2, nproc_per_node=2)
            job.hosts.add(place=2, host="h2", state="spare")
            return answer

        server = grpc_channel.ControlServer(lambda *_: asyncio.sleep(0), on_status=status,
                                            security=SERVER)
        port = await server.start("127.0.0.1:0")
        try:
            got = await grpc_channel.cluster_status(f"127.0.0.1:{port}", timeout=10,
                                                   security=CLIENT)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                ask = channel.unary_unary("/trainguard.control.v1.Control/Status",
                                          request_serializer=pb.StatusRequest.SerializeToString,
                                          response_deserializer=pb.ClusterStatus.FromString)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await ask(pb.StatusRequest(version=99), timeout=10)
            return got, f"{refused.value.code().name}: {refused.value.details()}"
        finally:
            await server.stop()

    got, refusal = asyncio.run(scenario())
    assert got.version == versioned.PROTOCOL_VERSION
    assert [(h.place, h.host, h.state) for h in got.jobs[0].hosts] == [(2, "h2", "spare")]
    assert refusal == ("FAILED_PRECONDITION: protocol version 99, this controller speaks "
                       f"{versioned.PROTOCOL_VERSION}")
