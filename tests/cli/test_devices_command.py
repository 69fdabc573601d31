"""``trainguard devices separate | release``: what the controller answers, and its refusals,
reach the operator with exit code 1."""

from __future__ import annotations

import grpc
import pytest
from typer.testing import CliRunner

from trainguard.cli import main
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel, grpc_security


def _answer(monkeypatch: pytest.MonkeyPatch, answer: pb.DeviceAnswer | Exception,
            asked: list[tuple[str, int, bool]]) -> None:
    async def device_request(address: str, request: pb.DeviceRequest, *, separate: bool,
                             timeout: float, security: grpc_security.ClientSecurity
                             ) -> pb.DeviceAnswer:
        asked.append((request.node, request.device, separate))
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(grpc_channel, "device_request", device_request)


def test_separate_prints_the_controllers_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, int, bool]] = []
    _answer(monkeypatch, pb.DeviceAnswer(ok=True, text="host-a/device-3 separated"), asked)
    result = CliRunner().invoke(main.app, ["devices", "separate", "host-a", "3", "--insecure"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "host-a/device-3 separated"
    assert asked == [("host-a", 3, True)]


@pytest.mark.parametrize("answer", [
    pb.DeviceAnswer(ok=False, text="device 3 of node host-a is not separated"),
    grpc_channel.CallRefusedError(
        "the controller at ctrl:29400: PERMISSION_DENIED: bob may not call ReleaseDevice",
        grpc.StatusCode.PERMISSION_DENIED)])
def test_a_refused_release_says_why_with_exit_code_1(
        monkeypatch: pytest.MonkeyPatch, answer: pb.DeviceAnswer | Exception) -> None:
    asked: list[tuple[str, int, bool]] = []
    _answer(monkeypatch, answer, asked)
    result = CliRunner().invoke(main.app, ["devices", "release", "host-a", "3", "--insecure",
                                           "--controller", "ctrl:29400"])
    assert result.exit_code == 1
    assert ("not separated" in result.output) or ("PERMISSION_DENIED" in result.output)
    assert asked == [("host-a", 3, False)]


def test_a_negative_device_is_refused_before_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, int, bool]] = []
    _answer(monkeypatch, pb.DeviceAnswer(ok=True), asked)
    result = CliRunner().invoke(main.app, ["devices", "separate", "host-a", "-1", "--insecure"])
    assert result.exit_code == 2
    assert asked == []
