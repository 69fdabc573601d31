"""A cluster job's lightweight profiling, switched through the original's TrainingDataTrace
calls on a real controller, its hosts' links over gRPC: every host and spare takes the switch,
and a host that joins later gets it before it holds ranks; the job's document and event keep
it, and a subscriber follows each change; a job that is not there, or a switch that cannot be
read, gets the original's codes."""

from __future__ import annotations

import asyncio
import json
import types
from pathlib import Path
from typing import Any

from tests.controller.agent_fakes import FakeAgent
from tests.controller.test_service_takeover import (
    CLIENT,
    RECOVERY,
    _controller,
    _join_as_spare,
    _link,
    _stop,
    _until_started,
)
from trainguard import testing
from trainguard.agent import joining
from trainguard.controller import data_trace
from trainguard.job import profiling_switch
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel, profiling_pb2
from trainguard.store import sqlite


def test_a_jobs_profiling_reaches_every_host_and_each_that_joins_later(tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        controller = _controller(tmp_path, host_wait=1.0)
        port = await controller.start("127.0.0.1:0")
        address = f"127.0.0.1:{port}"
        host, spare = FakeAgent(), FakeAgent()
        settings = joining.ClusterSettings(endpoint=address, nnodes=1, security=CLIENT)
        links: list[asyncio.Task[pb.EndJob | None]] = []

        def ask(**fields: str) -> Any:
            return grpc_channel.switch_profiling(address, profiling_pb2.DataTypeReq(
                jobNsName="default/job7", profilingSwitch=profiling_pb2.ProfilingSwitch(
                    **fields)), timeout=10, security=CLIENT)

        try:
            connection, _ = await joining.join(settings, pb.Register(
                job="job7", nnodes=1, max_nodes=2, nproc_per_node=2, host="host-0",
                recovery=RECOVERY), on_retry=print)
            links.append(_link(host, connection, "host-0"))
            await _until_started(host)
            found: dict[str, Any] = {"absent": await grpc_channel.switch_profiling(
                address, profiling_pb2.DataTypeReq(jobNsName="default/other"), timeout=10,
                security=CLIENT)}
            followed: list[str] = []

            async def follow(job: str) -> None:
                async for status in grpc_channel.follow_profiling(
                        address, profiling_pb2.ProfilingClientInfo(jobId=job),
                        security=CLIENT):
                    followed.append(f"{status.code} {status.profilingSwitch.Step or '-'} "
                                    f"{status.profilingSwitch.CommunicationOperator or '-'}")

            await follow("other")
            following = asyncio.create_task(follow("job7"))
            async with asyncio.timeout(10):
                while len(followed) < 2:
                    await asyncio.sleep(0.05)
            found["bad"] = await ask(FP="yes")
            found["light"] = await ask(Step="on")
            links.append(await _join_as_spare(settings, spare, job="job7", nnodes=1))
            async with asyncio.timeout(20):
                while not spare.calls:
                    await asyncio.sleep(0.05)
            found["heavy"] = await ask(CommunicationOperator="on")
            found["status"] = await grpc_channel.profiling_status(
                address, profiling_pb2.DataStatusReq(jobNsName="job7"), timeout=10,
                security=CLIENT)
            async with asyncio.timeout(10):
                while len(followed) < 4:
                    await asyncio.sleep(0.05)
            following.cancel()
            found["followed"] = followed
        finally:
            await _stop(controller, links)
        found["host"], found["spare"] = host.calls, spare.calls
        return found

    found = asyncio.run(scenario())
    assert (found["absent"].code, found["absent"].message) == (
        data_trace.NOT_FOUND, "no job 'other' runs under this controller")
    assert found["bad"].code == data_trace.BAD_REQUEST
    assert "FP is 'yes', expected \"on\" or \"off\"" in found["bad"].message
    assert (found["light"].code, found["light"].message) == (
        data_trace.DONE, "job job7: profiling Step, SaveCheckpoint, FP, DataLoader")
    assert found["heavy"].code == data_trace.DONE
    assert found["followed"] == ["404 - -", "200 off off", "200 on off", "200 on on"], \
        "no such job; then the switch as it was, and each change (not the refused one)"
    status = found["status"]
    assert (status.code, status.profilingSwitch.CommunicationOperator,
            status.profilingSwitch.DataLoader) == (data_trace.DONE, "on", "on")
    switches = [json.loads(switch) for name, switch in found["host"] if name == "profiling"]
    assert [s["CommunicationOperator"] for s in switches] == ["off", "on"]
    assert {s["Step"] for s in switches} == {"on"}
    spare_calls = [name for name, _ in found["spare"]]
    assert spare_calls[:2] == ["profiling", "profiling"], \
        "the spare took the switch as it joined, then the next one"

    store = sqlite.SqliteStore.open(tmp_path / "controller" / "job7" / "state.db",
                                    read_only=True)
    document = store.get_document("data-trace-job7")
    store.close()
    assert document is not None
    assert json.loads(document.data["profilingSwitch"])["CommunicationOperator"] == "on"
    marks = [e.data["marks"] for e in testing.recorded_events(
        tmp_path / "controller" / "job7", "profiling-switched")]
    assert marks == ["Step, SaveCheckpoint, FP, DataLoader",
                     "CommunicationOperator, Step, SaveCheckpoint, FP, DataLoader"]


def test_a_subscription_ends_with_its_job() -> None:
    async def scenario() -> list[str]:
        job: Any = types.SimpleNamespace(profiling=profiling_switch.PRESETS["light"],
                                         recorder=None, ended=asyncio.Event(),
                                         connected=lambda: [])
        trace = data_trace.DataTrace({"job7": job}.get)
        statuses = trace.subscribe(profiling_pb2.ProfilingClientInfo(jobId="ns/job7"))
        first = await anext(statuses)
        job.ended.set()
        rest = [status async for status in statuses]
        assert not trace._watchers, "its queue went with it"
        return [first.message, *(status.message for status in rest)]

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) == [
        "job job7: profiling Step, SaveCheckpoint, FP, DataLoader"]
