"""The flags that say how a command reaches the controller's gRPC server, and how the
controller authenticates its callers: one definition for ``trainguard controller``,
``trainguard run`` (argparse, torchrun's parser), ``trainguard status`` and
``trainguard faults send``, ``trainguard devices``, ``trainguard profiling``; and how those
commands take its answer (:func:`ask`). See README "Deploying securely" and
:mod:`trainguard.proto.grpc_security`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from trainguard.proto import grpc_channel, grpc_security

__all__ = ["ENVIRONMENT", "ClientCa", "ClientCert", "ClientInsecure", "ClientKey", "TokenFile",
           "add_client_arguments", "ask", "client_from_arguments", "client_security"]

T = TypeVar("T")

_HELP = {
    "tls_ca": "The CA certificate (PEM) that signed the controller's certificate: the "
              "controller is reached over TLS and must prove it is the controller.",
    "tls_cert": "This client's certificate (PEM), signed by the controller's --tls-ca, for "
                "mutual TLS: its common name is the identity the controller's access file "
                "gives roles to.",
    "tls_key": "The private key (PEM) of --tls-cert.",
    "token_file": "A file whose first line is a bearer token of the controller's access file "
                  "(a file, so the token is not in the process list).",
    "insecure": "Reach the controller over plain text (it was started with --insecure): "
                "nothing is encrypted, and the controller is not verified.",
}
_ENV = {name: f"TRAINGUARD_{name.upper()}" for name in _HELP}
ENVIRONMENT = frozenset({*_ENV.values(), "TRAINGUARD_ACCESS_FILE",
                         "TRAINGUARD_CONTROLLER_TLS_CERT", "TRAINGUARD_CONTROLLER_TLS_KEY",
                         "TRAINGUARD_CONTROLLER_TLS_CA"})
"""Every variable these flags, and the controller's (its own names: a host may run both), read."""

ClientCa = Annotated[Path | None, typer.Option(
    "--tls-ca", help=_HELP["tls_ca"], envvar=_ENV["tls_ca"], dir_okay=False)]
ClientCert = Annotated[Path | None, typer.Option(
    "--tls-cert", help=_HELP["tls_cert"], envvar=_ENV["tls_cert"], dir_okay=False)]
ClientKey = Annotated[Path | None, typer.Option(
    "--tls-key", help=_HELP["tls_key"], envvar=_ENV["tls_key"], dir_okay=False)]
TokenFile = Annotated[Path | None, typer.Option(
    "--token-file", help=_HELP["token_file"], envvar=_ENV["token_file"], dir_okay=False)]
ClientInsecure = Annotated[bool, typer.Option(
    "--insecure", help=_HELP["insecure"], envvar=_ENV["insecure"])]


def client_security(*, tls_ca: Path | None, tls_cert: Path | None, tls_key: Path | None,
                    token_file: Path | None, insecure: bool) -> grpc_security.ClientSecurity:
    """The client's credentials from its flags.

    Raises:
        typer.BadParameter: a file cannot be read, or the flags do not go together.
    """
    try:
        return grpc_security.ClientSecurity.from_files(
            ca=tls_ca, certificate=tls_cert, key=tls_key, token_file=token_file,
            insecure=insecure)
    except grpc_security.AccessError as error:
        raise typer.BadParameter(str(error)) from error


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    """The same flags for an argparse parser (``trainguard run``), in their own section."""
    group = parser.add_argument_group(
        "controller access", "How a host reaches `trainguard controller` (--nnodes > 1).")
    for name in ("tls_ca", "tls_cert", "tls_key", "token_file"):
        group.add_argument(f"--{name.replace('_', '-')}", dest=f"access__{name}", type=Path,
                           metavar="FILE", default=os.environ.get(_ENV[name]),
                           help=f"{_HELP[name]} [env {_ENV[name]}]")
    group.add_argument("--insecure", dest="access__insecure", action="store_true",
                       default=os.environ.get(_ENV["insecure"], "").lower() in ("1", "true"),
                       help=f"{_HELP['insecure']} [env {_ENV['insecure']}]")


def client_from_arguments(arguments: argparse.Namespace) -> grpc_security.ClientSecurity:
    """The credentials of :func:`add_client_arguments`' flags.

    Raises:
        grpc_security.AccessError: a file cannot be read, or the flags do not go together.
    """
    def path(name: str) -> Path | None:
        value = getattr(arguments, f"access__{name}")
        return Path(value) if value is not None else None

    return grpc_security.ClientSecurity.from_files(
        ca=path("tls_ca"), certificate=path("tls_cert"), key=path("tls_key"),
        token_file=path("token_file"), insecure=arguments.access__insecure)


def ask(call: Coroutine[Any, Any, T]) -> T:
    """The controller's answer to ``call``; a call it refused, or one that did not reach it,
    ends the command with exit code 1, saying why."""
    try:
        return asyncio.run(call)
    except grpc_channel.CallRefusedError as error:
        typer.echo(f"trainguard: {error}", err=True)
        raise typer.Exit(1) from error
