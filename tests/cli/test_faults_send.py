"""``trainguard faults send``: the operator's client of the controller's PubFault service, to
a controller serving TLS and tokens in a thread of this process."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.certificates import Authority
from tests.faults.test_public_messages import fault_document, message_document
from trainguard.cli.main import app
from trainguard.controller import service
from trainguard.proto import grpc_security

TOKEN = "operator-token-0123456789"


class _Served:
    def __init__(self, tmp_path: Path) -> None:
        self.pki = Authority(tmp_path / "pki")
        certificate, key = self.pki.issue("controller", server=True)
        access = tmp_path / "access.json"
        access.write_text(json.dumps({"identities": [
            {"name": "alice", "roles": ["operator"], "token": TOKEN}]}))
        access.chmod(0o600)
        self.security = grpc_security.ServerSecurity.from_files(
            certificate=certificate, key=key, access=access)
        self.run_root = tmp_path / "controller"
        self.token_file = tmp_path / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.address = ""
        self.controller: service.ControllerService | None = None
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete,
                                        args=(self._serve(),), daemon=True)
        self._stop: asyncio.Event | None = None

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self.controller = service.ControllerService(service.ControllerSettings(
            run_root=self.run_root, security=self.security))
        port = await self.controller.start("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self._ready.set()
        await self._stop.wait()
        await self.controller.stop()

    def __enter__(self) -> _Served:
        self._thread.start()
        assert self._ready.wait(30)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def send(self, *args: str, token: bool = True) -> Result:
        access = ["--tls-ca", str(self.pki.ca)]
        if token:
            access += ["--token-file", str(self.token_file)]
        return CliRunner().invoke(app, ["faults", "send", "--controller", self.address,
                                        *access, *args])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[_Served]:
    with _Served(tmp_path) as running:
        yield running


def test_a_fault_built_from_flags_is_taken_in(served: _Served) -> None:
    result = served.send("--resource", "CCAE", "--code", "220001001", "--node", "host-1",
                         "--device", "0", "--device", "3")
    assert result.exit_code == 0, result.output
    assert result.stdout == "code 0: public fault send successfully\n"
    assert served.controller is not None
    (fault,) = served.controller.public_faults.cache.current("host-1")
    assert (fault.resource, fault.fault_code, fault.device_ids) == ("CCAE", "220001001", (0, 3))


def test_a_message_the_checks_refuse_exits_1_with_the_answer(served: _Served,
                                                              tmp_path: Path) -> None:
    message = tmp_path / "message.json"
    message.write_text(json.dumps(message_document(fault_document(faultCode="999999999"))))
    result = served.send(str(message))
    assert result.exit_code == 1
    assert result.stdout.startswith("code 409: faults[0].faultCode: 999999999 is not a "
                                    "configured public fault code")


def test_without_a_token_the_call_is_refused_and_nothing_is_taken(served: _Served) -> None:
    result = served.send("--resource", "CCAE", "--code", "220001001", "--node", "host-1",
                         "--device", "0", token=False)
    assert result.exit_code == 1
    assert "UNAUTHENTICATED" in result.output
    assert served.controller is not None
    assert served.controller.public_faults.cache.nodes() == []


def test_credentials_and_a_message_are_asked_for_before_anything_is_sent() -> None:
    result = CliRunner().invoke(app, ["faults", "send", "--resource", "CCAE"])
    assert result.exit_code == 2
    assert "give --tls-ca" in result.output
    result = CliRunner().invoke(app, ["faults", "send", "--insecure", "--resource", "CCAE"],
                                terminal_width=200, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "give --code, --node, --device to build one" in result.output
