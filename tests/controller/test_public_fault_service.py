"""The controller's PubFault service and public fault documents: the original's answers, in its
order (rate limit, checks, cache), nothing changed by a refusal, and a taken fault handed to
the jobs on the devices it names. Also: a host whose names would escape is refused."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.controller.test_controller_job_controller import FakeClock
from tests.faults.test_public_messages import fault_document, message_document
from trainguard.controller import public_fault_intake, service
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level
from trainguard.faults.public import public_faults, public_messages
from trainguard.proto import (
    channel,
    codec,
    grpc_channel,
    grpc_security,
    pubfault_messages,
    versioned,
)
from trainguard.proto import control_pb2 as pb

CLIENT = grpc_security.ClientSecurity(insecure=True)


def _service(tmp_path: Path) -> service.ControllerService:
    return service.ControllerService(
        service.ControllerSettings(run_root=tmp_path / "controller",
                                   security=grpc_security.ServerSecurity(insecure=True)),
        clock=FakeClock())


def _send(tmp_path: Path, documents: list[dict[str, Any]]
          ) -> tuple[list[tuple[int, str]], service.ControllerService]:
    """The answers to ``documents`` sent in turn, and the controller (stopped) that took them;
    its clock stands still, so that every message comes in one second."""
    made: list[service.ControllerService] = []

    async def scenario() -> list[tuple[int, str]]:
        controller = _service(tmp_path)  # its gRPC server belongs to this loop
        made.append(controller)
        port = await controller.start("127.0.0.1:0")
        try:
            answers = []
            for document in documents:
                answer = await grpc_channel.send_public_fault(
                    f"127.0.0.1:{port}", pubfault_messages.from_document(document),
                    timeout=10, security=CLIENT)
                answers.append((answer.code, answer.info))
            return answers
        finally:
            await controller.stop()

    return asyncio.run(asyncio.wait_for(scenario(), 60)), made[0]


def _cached(controller: service.ControllerService) -> dict[str, list[str]]:
    cache = controller.public_faults.cache
    return {node: [fault.fault_id for fault in cache.current(node)] for node in cache.nodes()}


def test_a_valid_message_is_taken_in_with_the_originals_answer(tmp_path: Path) -> None:
    answers, controller = _send(tmp_path, [message_document()])
    assert answers == [(0, "public fault send successfully")]
    assert _cached(controller) == {"node-1": ["fault-0001"]}


def test_a_refused_message_gets_409_with_its_reasons_and_changes_nothing(
        tmp_path: Path) -> None:
    answers, controller = _send(tmp_path, [
        message_document(fault_document(faultCode="999999999")),
        message_document(version="2.0")])
    assert answers == [
        (409, "faults[0].faultCode: 999999999 is not a configured public fault code; fault "
              "dropped; faults: no valid fault is left; message rejected"),
        (409, "version: '2.0' is not 1.0; message rejected")]
    assert _cached(controller) == {}


def test_over_the_senders_rate_gets_410_and_changes_nothing(tmp_path: Path) -> None:
    flood = [message_document(fault_document(faultId=f"fault-{n:04d}"), id=f"message-{n:04d}")
             for n in range(public_messages.MESSAGES_PER_SECOND + 1)]
    answers, controller = _send(tmp_path, flood)
    assert answers[:-1] == [(0, "public fault send successfully")] * 100
    assert answers[-1] == (410, "limiter work by resource failed")
    assert "fault-0100" not in _cached(controller)["node-1"]
    assert len(_cached(controller)["node-1"]) == 100


def test_a_document_is_read_when_it_appears_or_changes_and_a_link_is_refused(
        tmp_path: Path) -> None:
    clock = FakeClock()
    intake = public_fault_intake.PublicFaultIntake(public_faults.PublicFaultConfig.default(),
                                                   clock=clock)
    documents = public_fault_intake.PublicFaultDocuments(tmp_path / "public-faults", intake)
    assert documents.poll() == []
    assert oct(os.stat(tmp_path / "public-faults").st_mode & 0o777) == "0o700"
    path = tmp_path / "public-faults" / "ccae.json"
    path.write_text(json.dumps(message_document()))
    (tmp_path / "public-faults" / "bad.json").write_text("{not json")
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(message_document(fault_document(faultId="fault-link"))))
    (tmp_path / "public-faults" / "link.json").symlink_to(outside)

    first = dict(documents.poll())
    assert isinstance(first["ccae.json"], public_fault_intake.IntakeResult)
    assert first["ccae.json"].code is public_fault_intake.ResultCode.OK
    assert str(first["bad.json"]).startswith("not readable as JSON")
    assert first["link.json"] == "not a plain file (a symbolic link is refused)"
    assert documents.poll() == []  # nothing changed: nothing read again
    path.write_text(json.dumps(message_document(fault_document(faultId="fault-0002"))))
    (name, result), = documents.poll()
    assert name == "ccae.json"
    assert isinstance(result, public_fault_intake.IntakeResult)
    assert [fault.fault_id for fault in intake.cache.current("node-1")] == [
        "fault-0001", "fault-0002"]


class _Controller:
    def __init__(self) -> None:
        self.reports: list[tuple[DeviceFaultEvent, str]] = []

    async def device_fault(self, event: DeviceFaultEvent, *, reported_by: str) -> None:
        self.reports.append((event, reported_by))


class _Host:
    def __init__(self, host: str) -> None:
        self.host = host


def test_a_taken_fault_is_handed_to_the_job_device_by_device_on_its_hosts_only() -> None:
    message, _ = public_messages.validate_message(message_document(fault_document(
        influence=[{"nodeName": "host-1", "deviceIds": [3, 0]},
                   {"nodeName": "elsewhere", "deviceIds": [1]}])),
        config=public_faults.PublicFaultConfig.default())
    assert message is not None
    controller = _Controller()
    handed = asyncio.run(public_fault_intake.hand_to_job(
        message, controller, [_Host("host-0"), _Host("host-1")], wall=5.0))  # type: ignore[arg-type]
    assert handed == 2
    assert controller.reports == [
        (DeviceFaultEvent("host-1/device-3", "public:220001001", Assertion.OCCUR, 5.0,
                          level=Level.SEPARATE_NPU), "public fault CCAE/fault-0001"),
        (DeviceFaultEvent("host-1/device-0", "public:220001001", Assertion.OCCUR, 5.0,
                          level=Level.SEPARATE_NPU), "public fault CCAE/fault-0001")]


@pytest.mark.parametrize(("job", "host", "refusal"), [
    ("../x", "node-1", "job (--rdzv-id) '../x' is not valid"),
    ("a/b", "node-1", "job (--rdzv-id) 'a/b' is not valid"),
    ("", "node-1", "job (--rdzv-id) '' is not valid"),
    ("job", "Node-1", "host (--node-name) 'Node-1' is not valid"),
    ("job", "a" * 254, "host (--node-name) 'aaaa"),
    ("job", "../x", "host (--node-name) '../x' is not valid"),
])
def test_a_host_whose_names_would_escape_is_refused_and_forms_no_job(
        tmp_path: Path, job: str, host: str, refusal: str) -> None:
    async def scenario() -> tuple[pb.Envelope, pb.ClusterStatus]:
        controller = _service(tmp_path)
        agent_end, controller_end = channel.in_process_pair()
        joined = asyncio.create_task(controller._agent_joined(controller_end, "test"))
        agent_end.send(versioned.serialize(pb.Envelope(register=pb.Register(
            job=job, host=host, nnodes=2, nproc_per_node=1))))
        answer = codec.unpack(await asyncio.wait_for(agent_end.receive(), 10))
        await asyncio.wait_for(joined, 10)
        return answer, controller.status()

    answer, status = asyncio.run(scenario())
    assert refusal in answer.registered.refused.reason
    assert status == pb.ClusterStatus()
    assert not (tmp_path / "controller").exists() or not any((tmp_path / "controller").iterdir())


def test_the_controller_takes_a_document_dropped_into_its_directory(tmp_path: Path) -> None:
    async def scenario() -> dict[str, list[str]]:
        controller = _service(tmp_path)
        await controller.start("127.0.0.1:0")
        try:
            directory = tmp_path / "controller" / public_fault_intake.DOCUMENTS_DIRECTORY
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "ccae.json").write_text(json.dumps(message_document()))
            while not controller.public_faults.cache.nodes():
                await asyncio.sleep(0.05)
            return _cached(controller)
        finally:
            await controller.stop()

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == {"node-1": ["fault-0001"]}


def test_the_allowed_senders_come_from_the_operators_file_and_follow_its_changes(
        tmp_path: Path) -> None:
    shipped = json.loads((Path(public_faults.__file__).parents[1] / "data" /
                          public_faults.SYSTEM_FILE_NAME).read_text())
    config = tmp_path / "fault-config"
    config.mkdir()
    custom = config / "publicCustomization.json"
    custom.write_text(json.dumps({**shipped, "publicFaultResource": ["our-monitor"]}))

    async def scenario() -> list[tuple[int, str]]:
        controller = service.ControllerService(service.ControllerSettings(
            run_root=tmp_path / "controller", fault_config_dir=config,
            security=grpc_security.ServerSecurity(insecure=True)), clock=FakeClock())
        port = await controller.start("127.0.0.1:0")

        async def send(resource: str, fault_id: str) -> tuple[int, str]:
            answer = await grpc_channel.send_public_fault(
                f"127.0.0.1:{port}", pubfault_messages.from_document(message_document(
                    fault_document(faultId=fault_id), resource=resource)),
                timeout=10, security=CLIENT)
            return answer.code, answer.info

        try:
            answers = [await send("our-monitor", "fault-0001"), await send("CCAE", "fault-0002")]
            custom.write_text(json.dumps({**shipped, "publicFaultResource": ["CCAE"]}))
            while "CCAE" not in controller.public_faults.config.resources:
                await asyncio.sleep(0.05)
            answers.append(await send("CCAE", "fault-0003"))
            return answers
        finally:
            await controller.stop()

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == [
        (0, "public fault send successfully"), (410, "limiter work by resource failed"),
        (0, "public fault send successfully")]
