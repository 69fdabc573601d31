"""Who may call the controller's gRPC services, and how they prove it.

Callers prove who they are by one of:

* **a client certificate** (mutual TLS): the controller is given a CA (``--tls-ca``) and
  accepts only clients whose certificate that CA signed; the certificate's common name (CN) is
  the caller's identity;
* **a bearer token**: the call carries ``authorization: Bearer <token>`` in its metadata; the
  token names an identity in the access file. Over TLS (the controller's ``--tls-cert`` and
  ``--tls-key``) nobody on the path can read it.

The **access file** (``--access-file``, JSON, readable by its owner only) lists the identities
and what each may do::

    {"identities": [
      {"name": "node-1", "roles": ["agent"], "token": "<at least 16 characters>"},
      {"name": "ccae-gateway", "roles": ["public-fault-sender"], "resources": ["CCAE"]},
      {"name": "alice", "roles": ["operator"]}]}

``token`` is optional (an identity without one can only come with a certificate of that CN).
Roles and their calls (:data:`METHOD_ROLES`): ``agent`` opens a host's stream
(``Control.Connect``) and reports its devices (``Control.ReportDevices``); ``operator`` reads
the cluster (``Control.Status``), separates and releases devices (``Control.SeparateDevice``,
``Control.ReleaseDevice``) and may send public faults as any sender;
switches and reads a job's profiling (``TrainingDataTrace``);
``public-fault-sender`` sends public faults (``PubFault.SendPublicFault``) only as the senders
(``resource``) its entry lists. A method not listed is refused to everyone.

Refusals change nothing and carry the gRPC status code that says why: no or unknown
credentials ``UNAUTHENTICATED``; a known identity without the role, or sending as another
sender, ``PERMISSION_DENIED``; a message over :data:`MAX_MESSAGE_BYTES`
``RESOURCE_EXHAUSTED`` (gRPC's own check, before any of ours).

Plain text is only for a controller started with ``--insecure`` (it warns each time): then the
access file, when given, is still enforced by token; without one, anyone who reaches the port
may do anything.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import functools
import hashlib
import json
import logging
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import grpc
import grpc.aio

__all__ = [
    "ANONYMOUS",
    "CALLER",
    "MAX_MESSAGE_BYTES",
    "METHOD_ROLES",
    "AccessError",
    "AccessInterceptor",
    "AccessPolicy",
    "ClientSecurity",
    "Identity",
    "Role",
    "ServerSecurity",
]

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""The largest message the controller takes (gRPC's default, and the original's Go server's):
a public fault message at its limits (100 faults of 1000 nodes) would be larger, so senders
split theirs."""

_MIN_TOKEN = 16
"""Characters a token has at least: shorter ones could be guessed."""


class Role(enum.StrEnum):
    AGENT = "agent"
    OPERATOR = "operator"
    PUBLIC_FAULT_SENDER = "public-fault-sender"


METHOD_ROLES: Mapping[str, frozenset[Role]] = {
    "/trainguard.control.v1.Control/Connect": frozenset({Role.AGENT}),
    "/trainguard.control.v1.Control/ReportDevices": frozenset({Role.AGENT}),
    "/trainguard.control.v1.Control/Status": frozenset({Role.OPERATOR}),
    "/trainguard.control.v1.Control/SeparateDevice": frozenset({Role.OPERATOR}),
    "/trainguard.control.v1.Control/ReleaseDevice": frozenset({Role.OPERATOR}),
    "/pubfault.PubFault/SendPublicFault": frozenset({Role.OPERATOR, Role.PUBLIC_FAULT_SENDER}),
    "/TrainingDataTrace/ModifyTrainingDataTraceSwitch": frozenset({Role.OPERATOR}),
    "/TrainingDataTrace/GetTrainingDataTraceSwitch": frozenset({Role.OPERATOR}),
    "/TrainingDataTrace/SubscribeDataTraceSwitch": frozenset({Role.OPERATOR}),
}
"""Which roles may call each method; any other method is refused."""


class AccessError(ValueError):
    """Security settings or an access file that cannot be used; the message names the file
    or flag and what is wrong."""


@dataclasses.dataclass(frozen=True)
class Identity:
    """A caller the controller knows, and what it may do."""

    name: str
    roles: frozenset[Role]
    resources: frozenset[str] | None = frozenset()
    """The senders (``resource``) it may send public faults as; None: any."""

    def may_send_as(self, resource: str) -> bool:
        """Whether it may send public faults as ``resource``: an operator as any sender, a
        public-fault sender as its own."""
        return (Role.OPERATOR in self.roles or self.resources is None
                or resource in self.resources)


ANONYMOUS = Identity("anonymous", frozenset(Role), None)
"""Every caller of an ``--insecure`` controller without an access file."""

CALLER: contextvars.ContextVar[Identity] = contextvars.ContextVar("trainguard_grpc_caller")
"""The identity of the call being served; set by :class:`AccessInterceptor` for the handler."""


def _digest(token: str) -> bytes:
    """Tokens are looked up by digest: a lookup's time then says nothing about the token."""
    return hashlib.sha256(token.encode()).digest()


@dataclasses.dataclass(frozen=True)
class AccessPolicy:
    """The identities of the access file, by certificate name and by token digest."""

    by_name: Mapping[str, Identity]
    by_token: Mapping[bytes, Identity]

    @classmethod
    def parse(cls, data: object, *, source: str = "access file") -> AccessPolicy:
        """The policy of a parsed access file.

        Raises:
            AccessError: its shape is wrong, a key or role is unknown, a token is short or
                repeated, a name repeated; the message names the entry.
        """
        if not isinstance(data, dict) or set(data) != {"identities"} or not isinstance(
                data["identities"], list):
            raise AccessError(f"{source}: must be a JSON object with one key, "
                              "\"identities\", a list")
        by_name: dict[str, Identity] = {}
        by_token: dict[bytes, Identity] = {}
        for index, entry in enumerate(data["identities"]):
            where = f"{source}: identities[{index}]"
            identity, token = _identity(entry, where)
            if identity.name in by_name:
                raise AccessError(f"{where}: name {identity.name!r} is listed twice")
            by_name[identity.name] = identity
            if token is not None:
                if _digest(token) in by_token:
                    raise AccessError(f"{where}: its token is another identity's too")
                by_token[_digest(token)] = identity
        return cls(by_name, by_token)

    @classmethod
    def load(cls, path: Path) -> AccessPolicy:
        """Read an access file, which only its owner may read (it holds tokens).

        Raises:
            AccessError: it cannot be read, others may read it, or it is not a valid policy.
        """
        try:
            mode = path.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise AccessError(f"access file {path}: others may read or write it (mode "
                                  f"{stat.S_IMODE(mode):o}); it holds tokens: chmod 600 it")
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            if isinstance(error, AccessError):
                raise
            raise AccessError(f"access file {path}: {error}") from error
        return cls.parse(data, source=f"access file {path}")


def _identity(entry: object, where: str) -> tuple[Identity, str | None]:
    if not isinstance(entry, dict):
        raise AccessError(f"{where}: must be an object")
    unknown = set(entry) - {"name", "roles", "resources", "token"}
    if unknown:
        raise AccessError(f"{where}: unknown keys {sorted(unknown)} (known: name, roles, "
                          "resources, token)")
    name, roles, resources, token = (entry.get("name"), entry.get("roles"),
                                     entry.get("resources", []), entry.get("token"))
    if not isinstance(name, str) or not name:
        raise AccessError(f"{where}: name must be a non-empty string")
    if not isinstance(roles, list) or not roles:
        raise AccessError(f"{where} ({name}): roles must be a non-empty list of "
                          f"{', '.join(Role)}")
    try:
        parsed = frozenset(Role(role) for role in roles)
    except ValueError:
        raise AccessError(f"{where} ({name}): roles {roles} has one that is not "
                          f"{', '.join(Role)}") from None
    if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
        raise AccessError(f"{where} ({name}): resources must be a list of senders")
    if token is not None and (not isinstance(token, str) or len(token) < _MIN_TOKEN):
        raise AccessError(f"{where} ({name}): token must be a string of at least "
                          f"{_MIN_TOKEN} characters")
    return Identity(name, parsed, frozenset(resources)), token


def _read(path: Path | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as error:
        raise AccessError(f"{what} {path}: {error}") from error


@dataclasses.dataclass(frozen=True)
class ServerSecurity:
    """How the controller's server authenticates its callers (see the module docstring)."""

    certificate: bytes | None = None
    """The controller's certificate chain (PEM); with ``key``, it serves TLS."""
    key: bytes | None = None
    client_ca: bytes | None = None
    """CA certificates (PEM) that sign the clients' certificates: mutual TLS, every client
    must present one."""
    access: AccessPolicy | None = None
    insecure: bool = False
    """Plain text allowed: no TLS."""

    def __post_init__(self) -> None:
        if (self.certificate is None) != (self.key is None):
            raise AccessError("--tls-cert and --tls-key go together")
        if self.insecure:
            if self.certificate is not None:
                raise AccessError("--insecure serves plain text; it cannot be used with "
                                  "--tls-cert")
            return
        if self.certificate is None:
            raise AccessError("the controller serves TLS: give --tls-cert and --tls-key (and "
                              "--tls-ca for client certificates), or --insecure for plain "
                              "text on a network you trust")
        if self.access is None:
            raise AccessError("--access-file is needed with TLS: it says which identity has "
                              "which role")

    @classmethod
    def from_files(cls, *, certificate: Path | None = None, key: Path | None = None,
                   client_ca: Path | None = None, access: Path | None = None,
                   insecure: bool = False) -> ServerSecurity:
        """Read the files the flags name.

        Raises:
            AccessError: a file cannot be read or used, or the flags do not go together.
        """
        return cls(certificate=_read(certificate, "--tls-cert"), key=_read(key, "--tls-key"),
                   client_ca=_read(client_ca, "--tls-ca"),
                   access=AccessPolicy.load(access) if access is not None else None,
                   insecure=insecure)

    def bind(self, server: grpc.aio.Server, address: str) -> int:
        """Listen on ``address`` as these settings say; returns the port."""
        if self.insecure:
            port = server.add_insecure_port(address)
            logger.warning(
                "INSECURE: the controller serves plain text on %s:%d (--insecure): %s",
                address.rpartition(":")[0], port,
                "anyone who reaches it can read its traffic and forge tokens" if self.access
                else "anyone who reaches it can register hosts, read the cluster and send "
                     "public faults")
            return port
        assert self.certificate is not None
        assert self.key is not None
        credentials = grpc.ssl_server_credentials(
            [(self.key, self.certificate)], root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None)
        return server.add_secure_port(address, credentials)

    def identify(self, metadata: Iterable[tuple[str, str | bytes]],
                 auth_context: Mapping[str, Iterable[bytes]]) -> Identity | None:
        """The caller, from its token or else its certificate; None: unknown."""
        if self.access is None:
            return ANONYMOUS
        token = next((value for key, value in metadata if key == "authorization"), None)
        if token is not None:
            text = token.decode() if isinstance(token, bytes) else token
            scheme, _, secret = text.partition(" ")
            if scheme.lower() != "bearer" or not secret:
                return None
            return self.access.by_token.get(_digest(secret))
        names = list(auth_context.get("x509_common_name", ()))
        if names:
            return self.access.by_name.get(names[0].decode(errors="replace"))
        return None


_Behavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]
_StreamBehavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Any]]


class AccessInterceptor(grpc.aio.ServerInterceptor):
    """Every call is authenticated and its method's role checked before its handler runs; the
    handler finds the caller in :data:`CALLER`."""

    def __init__(self, security: ServerSecurity) -> None:
        self._security = security
        self._guarded: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        """Each method's handler, guarded once: a host's report every 5 s, from thousands of
        hosts, must not build it again each time."""

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
            handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = handler_call_details.method
        guarded = self._guarded.get(method)
        if guarded is not None:
            return guarded
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        guarded = self._guarded[method] = self._guard_handler(method, handler)
        return guarded

    def _guard_handler(self, method: str, handler: grpc.RpcMethodHandler[Any, Any]
                       ) -> grpc.RpcMethodHandler[Any, Any]:
        allowed = METHOD_ROLES.get(method, frozenset())
        admit = functools.partial(self._admit, method, allowed)
        # The handlers of a grpc.aio server are coroutine functions (a server stream's, an
        # async generator function), whatever the stubs say.
        if handler.unary_unary is not None or handler.stream_stream is not None:
            behavior = cast(_Behavior, handler.unary_unary or handler.stream_stream)

            async def checked(request: Any, context: grpc.aio.ServicerContext[Any, Any]
                              ) -> Any:
                token = CALLER.set(await admit(context))
                try:
                    return await behavior(request, context)
                finally:
                    CALLER.reset(token)

            make = (grpc.unary_unary_rpc_method_handler if handler.unary_unary is not None
                    else grpc.stream_stream_rpc_method_handler)
            return make(checked, request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            streamed = cast(_StreamBehavior, handler.unary_stream)

            async def checked_stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]
                                     ) -> AsyncIterator[Any]:
                token = CALLER.set(await admit(context))
                try:
                    async for response in streamed(request, context):
                        yield response
                finally:
                    CALLER.reset(token)

            return grpc.unary_stream_rpc_method_handler(
                checked_stream, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        raise TypeError(f"{method}: client streams are not served")

    async def _admit(self, method: str, allowed: frozenset[Role],
                     context: grpc.aio.ServicerContext[Any, Any]) -> Identity:
        """The caller, if it may call ``method``; else the call ends, saying why."""
        identity = self._security.identify(context.invocation_metadata() or (),
                                           context.auth_context())
        if identity is None:
            logger.warning("refused %s from %s: unknown or no credentials", method,
                           context.peer())
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                "no credentials, or credentials this controller does "
                                "not know: give a client certificate its CA signed "
                                "or a token of its access file")
        if not identity.roles & allowed:
            logger.warning("refused %s from %s: %s has roles %s", method,
                           context.peer(), identity.name, sorted(identity.roles))
            needed = " or ".join(sorted(allowed)) or "a role no one has"
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"{identity.name} may not call {method}: it needs "
                                f"{needed}, and has {', '.join(sorted(identity.roles))}")
        return identity


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    """How a client (an agent, ``trainguard status``, ``trainguard faults send``) proves
    itself to the controller and checks it is talking to the controller."""

    ca: bytes | None = None
    """CA certificates (PEM) that signed the controller's certificate: TLS."""
    certificate: bytes | None = None
    """This client's certificate chain (PEM), with ``key``: for mutual TLS."""
    key: bytes | None = None
    token: str | None = None
    insecure: bool = False
    """Plain text: the controller was started with --insecure."""

    def __post_init__(self) -> None:
        if (self.certificate is None) != (self.key is None):
            raise AccessError("--tls-cert and --tls-key go together")
        if self.insecure and (self.ca is not None or self.certificate is not None):
            raise AccessError("--insecure speaks plain text; it cannot be used with --tls-ca "
                              "or --tls-cert")
        if not self.insecure and self.ca is None:
            raise AccessError("the controller is reached over TLS: give --tls-ca (the CA that "
                              "signed its certificate), or --insecure if it serves plain text")

    @classmethod
    def from_files(cls, *, ca: Path | None = None, certificate: Path | None = None,
                   key: Path | None = None, token_file: Path | None = None,
                   insecure: bool = False) -> ClientSecurity:
        """Read the files the flags name (the token file's first line is the token).

        Raises:
            AccessError: a file cannot be read, or the flags do not go together.
        """
        token = _read(token_file, "--token-file")
        return cls(ca=_read(ca, "--tls-ca"), certificate=_read(certificate, "--tls-cert"),
                   key=_read(key, "--tls-key"),
                   token=token.decode().strip() if token is not None else None,
                   insecure=insecure)

    def channel(self, address: str,
                options: list[tuple[str, Any]] | None = None) -> grpc.aio.Channel:
        """A channel to the controller at ``address`` (not yet connected)."""
        if self.insecure:
            return grpc.aio.insecure_channel(address, options=options)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.certificate)
        return grpc.aio.secure_channel(address, credentials, options=options)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """What each call carries: the bearer token, if any."""
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()
