"""A controller taking a job over, through a real controller and a host's link over gRPC: the
job's hosts register again, saying how long they look for a controller; one that does not
come back within that wait has stopped itself, so those that did are stopped and told why,
not left training on without their peers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.controller.agent_fakes import FakeAgent
from tests.controller.test_controller_job_controller import FakeClock
from trainguard.agent import controller_link, joining
from trainguard.controller import service
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_security

CLIENT = grpc_security.ClientSecurity(insecure=True)


def test_a_takeover_whose_host_never_returns_stops_those_that_did(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "TAKEOVER_MARGIN", 0.5)

    async def scenario() -> tuple[pb.EndJob | None, list[tuple[str, Any]], float]:
        controller = service.ControllerService(
            service.ControllerSettings(run_root=tmp_path / "controller",
                                       security=grpc_security.ServerSecurity(insecure=True)),
            clock=FakeClock())
        port = await controller.start("127.0.0.1:0")
        agent = FakeAgent()
        try:
            settings = joining.ClusterSettings(endpoint=f"127.0.0.1:{port}", nnodes=2,
                                               security=CLIENT)
            register = pb.Register(job="job", node_rank=1, nnodes=2, nproc_per_node=2,
                                   host="host-1", rejoin=pb.Rejoin(generation=1, wait=1.0))
            connection, _ = await joining.rejoin(settings, register, within=10)
            started = asyncio.get_running_loop().time()
            link_agent: Any = agent
            link = controller_link.ControllerLink(link_agent, connection.channel,
                                                  host="host-1")
            end = await asyncio.wait_for(link.serve(), 30)
            waited = asyncio.get_running_loop().time() - started
            await connection.disconnect()
            async with asyncio.timeout(10):  # once the host's acknowledgement is read
                while controller.status().jobs:
                    await asyncio.sleep(0.05)
        finally:
            await controller.stop()
        return end, agent.calls, waited

    end, calls, waited = asyncio.run(scenario())
    assert end is not None, "the host was told how its job ended"
    assert (end.exit_code, end.outcome) == (1, "stopped")
    assert "node rank(s) [0] did not register again within 1.5 s" in end.reason
    assert [name for name, _ in calls] == ["stop", "flush"], \
        "its workers stopped, then its memory written to disk"
    assert 1.0 <= waited < 10.0, "ended once the hosts' wait and the margin had passed"
