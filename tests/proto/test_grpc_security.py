"""Only authenticated callers in the right role reach the controller's handlers: mutual TLS
and bearer tokens, on a real gRPC server on loopback. Every refusal has its status code and
leaves the handlers uncalled."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio
import pytest

from tests.certificates import Authority
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel, grpc_security, profiling_pb2, pubfault_pb2

T = TypeVar("T")
SENDER_TOKEN = "sender-token-0123456789"
OPERATOR_TOKEN = "operator-token-0123456789"
AGENT_TOKEN = "agent-token-0123456789"


def _access(path: Path) -> Path:
    path.write_text(json.dumps({"identities": [
        {"name": "node-1", "roles": ["agent"], "token": AGENT_TOKEN},
        {"name": "alice", "roles": ["operator"], "token": OPERATOR_TOKEN},
        {"name": "ccae-gateway", "roles": ["public-fault-sender"], "resources": ["CCAE"],
         "token": SENDER_TOKEN}]}))
    path.chmod(0o600)
    return path


class Served:
    """What reached the handlers."""

    def __init__(self) -> None:
        self.public_faults: list[pubfault_pb2.PublicFaultRequest] = []
        self.statuses = 0
        self.switched: list[str] = []

    def status(self) -> pb.ClusterStatus:
        self.statuses += 1
        return pb.ClusterStatus()

    async def public_fault(self, request: pubfault_pb2.PublicFaultRequest
                           ) -> pubfault_pb2.RespStatus:
        self.public_faults.append(request)
        return pubfault_pb2.RespStatus(code=0, info="public fault send successfully")

    async def modify(self, request: profiling_pb2.DataTypeReq) -> profiling_pb2.DataTypeRes:
        self.switched.append(request.jobNsName)
        return profiling_pb2.DataTypeRes(code=200)

    def get(self, request: profiling_pb2.DataStatusReq) -> profiling_pb2.DataStatusRes:
        self.switched.append(request.jobNsName)
        return profiling_pb2.DataStatusRes(code=200)

    async def subscribe(self, client: profiling_pb2.ProfilingClientInfo
                        ) -> AsyncIterator[profiling_pb2.DataStatusRes]:
        self.switched.append(client.jobId)
        yield profiling_pb2.DataStatusRes(code=200)


def _serve(security: grpc_security.ServerSecurity,
           test: Callable[[str, Served], Awaitable[T]]) -> tuple[T, Served]:
    async def scenario() -> T:
        server = grpc_channel.ControlServer(lambda *_: asyncio.sleep(0), security=security,
                                            on_status=served.status,
                                            on_public_fault=served.public_fault,
                                            data_trace=served)
        port = await server.start("127.0.0.1:0")
        try:
            return await test(f"127.0.0.1:{port}", served)
        finally:
            await server.stop(grace=0)

    served = Served()
    return asyncio.run(asyncio.wait_for(scenario(), 30)), served


async def _code(call: Awaitable[Any]) -> str:
    """The status code a call is refused with ("OK": not refused), and its details."""
    try:
        await call
    except grpc_channel.CallRefusedError as error:
        return f"{error.code.name}: {error}"
    return "OK"


def _request(resource: str = "CCAE") -> pubfault_pb2.PublicFaultRequest:
    return pubfault_pb2.PublicFaultRequest(id="message-0001", resource=resource)


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    found = Authority(tmp_path_factory.mktemp("pki"))
    for name in ("controller",):
        found.issue(name, server=True)
    for name in ("node-1", "alice", "mallory"):
        found.issue(name)
    return found


def _tls_server(authority: Authority, tmp_path: Path, *, mutual: bool
                ) -> grpc_security.ServerSecurity:
    directory = authority.directory
    return grpc_security.ServerSecurity.from_files(
        certificate=directory / "controller.pem", key=directory / "controller.key",
        client_ca=authority.ca if mutual else None, access=_access(tmp_path / "access.json"))


def _client(authority: Authority, name: str | None = None, *, token: str | None = None,
            ca: Path | None = None) -> grpc_security.ClientSecurity:
    directory = authority.directory
    security = grpc_security.ClientSecurity.from_files(
        ca=ca or authority.ca, certificate=directory / f"{name}.pem" if name else None,
        key=directory / f"{name}.key" if name else None)
    return grpc_security.ClientSecurity(ca=security.ca, certificate=security.certificate,
                                        key=security.key, token=token)


def test_mutual_tls_lets_each_certificate_do_what_its_identity_may(
        authority: Authority, tmp_path: Path) -> None:
    async def test(address: str, served: Served) -> list[str]:
        def status(client: grpc_security.ClientSecurity) -> Awaitable[Any]:
            return grpc_channel.cluster_status(address, timeout=10, security=client)

        def send(client: grpc_security.ClientSecurity) -> Awaitable[Any]:
            return grpc_channel.send_public_fault(address, _request(), timeout=10,
                                                  security=client)

        return [await _code(status(_client(authority, "alice"))),
                await _code(send(_client(authority, "alice"))),
                await _code(status(_client(authority, "node-1"))),
                await _code(send(_client(authority, "node-1"))),
                await _code(status(_client(authority, "mallory"))),
                await _code(status(_client(authority)))]

    codes, served = _serve(_tls_server(authority, tmp_path, mutual=True), test)
    assert codes[:2] == ["OK", "OK"]  # an operator reads the cluster and sends as any sender
    assert codes[2].startswith("PERMISSION_DENIED: ")
    assert "node-1 may not call /trainguard.control.v1.Control/Status: it needs operator, " \
           "and has agent" in codes[2]
    assert codes[3].startswith("PERMISSION_DENIED: ")
    # A certificate the CA signed, of a name the access file does not list.
    assert codes[4].startswith("UNAUTHENTICATED: ")
    # No certificate at all: the TLS handshake fails, no call is made.
    assert codes[5].startswith("UNAVAILABLE: ")
    assert (served.statuses, len(served.public_faults)) == (1, 1)


def test_a_certificate_of_another_ca_and_plain_text_do_not_reach_a_handler(
        authority: Authority, tmp_path: Path) -> None:
    stranger = Authority(tmp_path / "other", name="another CA")
    stranger.issue("alice")

    async def test(address: str, served: Served) -> list[str]:
        forged = grpc_security.ClientSecurity.from_files(
            ca=authority.ca, certificate=stranger.directory / "alice.pem",
            key=stranger.directory / "alice.key")
        plain = grpc_security.ClientSecurity(insecure=True, token=OPERATOR_TOKEN)
        return [await _code(grpc_channel.cluster_status(address, timeout=5, security=forged)),
                await _code(grpc_channel.cluster_status(address, timeout=5, security=plain))]

    codes, served = _serve(_tls_server(authority, tmp_path, mutual=True), test)
    assert [code.split(":")[0] for code in codes] == ["UNAVAILABLE", "UNAVAILABLE"]
    assert served.statuses == 0


def test_tokens_over_tls_and_each_refusal_leaves_the_handlers_uncalled(
        authority: Authority, tmp_path: Path) -> None:
    async def test(address: str, served: Served) -> dict[str, str]:
        def send(token: str | None, request: pubfault_pb2.PublicFaultRequest | None = None
                 ) -> Awaitable[Any]:
            return grpc_channel.send_public_fault(
                address, request or _request(), timeout=10,
                security=_client(authority, token=token))

        oversize = _request()
        oversize.faults.add(description="x" * (grpc_security.MAX_MESSAGE_BYTES + 1))
        codes = {
            "no token": await _code(send(None)),
            "wrong token": await _code(send("not-a-token-of-the-file")),
            "another sender": await _code(send(SENDER_TOKEN, _request("pingmesh"))),
            "status as sender": await _code(grpc_channel.cluster_status(
                address, timeout=10, security=_client(authority, token=SENDER_TOKEN))),
            "oversize": await _code(send(SENDER_TOKEN, oversize)),
        }
        async with _client(authority, token=SENDER_TOKEN).channel(address) as channel:
            raw: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                "/pubfault.PubFault/SendPublicFault")
            try:
                await raw(b"\xff\xff\xff", timeout=10,
                          metadata=(("authorization", f"Bearer {SENDER_TOKEN}"),))
                codes["malformed"] = "OK"
            except grpc.aio.AioRpcError as error:
                codes["malformed"] = f"{error.code().name}: {error.details()}"
        codes["accepted"] = await _code(send(SENDER_TOKEN))
        return codes

    codes, served = _serve(_tls_server(authority, tmp_path, mutual=False), test)
    assert {name: code.split(":")[0] for name, code in codes.items()} == {
        "no token": "UNAUTHENTICATED", "wrong token": "UNAUTHENTICATED",
        "another sender": "PERMISSION_DENIED", "status as sender": "PERMISSION_DENIED",
        "oversize": "RESOURCE_EXHAUSTED", "malformed": "INVALID_ARGUMENT", "accepted": "OK"}
    assert ("ccae-gateway may not send public faults as 'pingmesh' (its resources: CCAE)"
            in codes["another sender"])
    assert [request.resource for request in served.public_faults] == ["CCAE"]
    assert served.statuses == 0


def test_an_insecure_controller_warns_at_every_start_and_still_checks_its_tokens(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    security = grpc_security.ServerSecurity(
        insecure=True, access=grpc_security.AccessPolicy.load(_access(tmp_path / "a.json")))

    async def test(address: str, served: Served) -> list[str]:
        def status(token: str | None) -> Awaitable[Any]:
            return grpc_channel.cluster_status(address, timeout=10, security=(
                grpc_security.ClientSecurity(insecure=True, token=token)))
        return [await _code(status(None)), await _code(status(OPERATOR_TOKEN))]

    with caplog.at_level(logging.WARNING, logger="trainguard.proto.grpc_security"):
        codes, _ = _serve(security, test)
        _serve(security, test)
    assert [code.split(":")[0] for code in codes] == ["UNAUTHENTICATED", "OK"]
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("INSECURE")]
    assert len(warnings) == 2
    assert "anyone who reaches it can read its traffic and forge tokens" in warnings[0]


def test_only_an_operator_switches_or_reads_a_jobs_profiling(tmp_path: Path) -> None:
    """The original's TrainingDataTrace calls, at the original's paths (no package)."""
    security = grpc_security.ServerSecurity(
        insecure=True, access=grpc_security.AccessPolicy.load(_access(tmp_path / "a.json")))

    async def test(address: str, served: Served) -> list[str]:
        def client(token: str) -> grpc_security.ClientSecurity:
            return grpc_security.ClientSecurity(insecure=True, token=token)

        modify = profiling_pb2.DataTypeReq(jobNsName="default/job7")
        get = profiling_pb2.DataStatusReq(jobNsName="default/job7")
        async def follow(token: str) -> list[int]:
            return [status.code async for status in grpc_channel.follow_profiling(
                address, profiling_pb2.ProfilingClientInfo(jobId="job7"),
                security=client(token))]

        return [await _code(grpc_channel.switch_profiling(
                    address, modify, timeout=10, security=client(token)))
                for token in (OPERATOR_TOKEN, SENDER_TOKEN, AGENT_TOKEN)] + [
                await _code(grpc_channel.profiling_status(
                    address, get, timeout=10, security=client(token)))
                for token in (OPERATOR_TOKEN, SENDER_TOKEN)] + [
                await _code(follow(token)) for token in (OPERATOR_TOKEN, SENDER_TOKEN)]

    codes, served = _serve(security, test)
    assert [code.split(":")[0] for code in codes] == [
        "OK", "PERMISSION_DENIED", "PERMISSION_DENIED", "OK", "PERMISSION_DENIED", "OK",
        "PERMISSION_DENIED"]
    assert "/TrainingDataTrace/ModifyTrainingDataTraceSwitch: it needs operator" in codes[1]
    assert served.switched == ["default/job7", "default/job7", "job7"]


def test_without_tls_or_insecure_the_controller_does_not_start() -> None:
    with pytest.raises(grpc_security.AccessError, match="give --tls-cert and --tls-key"):
        grpc_security.ServerSecurity()
    with pytest.raises(grpc_security.AccessError, match="give --tls-ca"):
        grpc_security.ClientSecurity()
    with pytest.raises(grpc_security.AccessError, match="--access-file is needed"):
        grpc_security.ServerSecurity(certificate=b"c", key=b"k")


@pytest.mark.parametrize(("identities", "message"), [
    ([{"name": "a", "roles": ["root"]}], r"roles \['root'\] has one that is not agent"),
    ([{"name": "a", "roles": ["agent"], "token": "short"}], "at least 16 characters"),
    ([{"name": "a", "roles": ["agent"]}, {"name": "a", "roles": ["operator"]}],
     "name 'a' is listed twice"),
    ([{"name": "a", "roles": ["agent"], "token": AGENT_TOKEN},
      {"name": "b", "roles": ["agent"], "token": AGENT_TOKEN}], "another identity's too"),
    ([{"name": "a", "roles": ["agent"], "group": "x"}], r"unknown keys \['group'\]"),
    ([{"name": "a", "roles": []}], "roles must be a non-empty list"),
])
def test_an_access_file_that_cannot_be_used_is_refused_naming_the_entry(
        identities: list[object], message: str) -> None:
    with pytest.raises(grpc_security.AccessError, match=message):
        grpc_security.AccessPolicy.parse({"identities": identities})


def test_an_access_file_others_may_read_is_refused(tmp_path: Path) -> None:
    path = _access(tmp_path / "access.json")
    path.chmod(0o644)
    with pytest.raises(grpc_security.AccessError, match=r"others may read or write it \(mode "
                                                        r"644\); it holds tokens: chmod 600 it"):
        grpc_security.AccessPolicy.load(path)
