"""``trainguard devices separate | release NODE DEVICE``: an operator takes a device out of use
until released, or puts it back (the controller's fault centre; role operator).

A separated device is ManuallySeparateNPU: the job on it moves its rank off, and no job uses it
until it is released. Release also clears a ManuallySeparateNPU the device's fault history gave
it (a fault repeated within its window), so that a new job may use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from trainguard.cli import controller_access
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel, grpc_security

__all__ = ["devices_app"]

devices_app = typer.Typer(help="Separate a device from use, or release it (needs the operator "
                               "role at the controller).", no_args_is_help=True)

Node = Annotated[str, typer.Argument(metavar="NODE",
                                     help="The host's node name (its --node-name).")]
Device = Annotated[int, typer.Argument(min=0, metavar="DEVICE",
                                       help="The device's physical id on that host.")]
Controller = Annotated[str, typer.Option(help="HOST:PORT of the trainguard controller.")]
Reason = Annotated[str, typer.Option(help="Why, for the controller's log.")]


def _command(*, separate: bool) -> Callable[..., None]:
    def command(
        node: Node, device: Device, *, controller: Controller = "127.0.0.1:29400",
        reason: Reason = "",
        tls_ca: controller_access.ClientCa = None,
        tls_cert: controller_access.ClientCert = None,
        tls_key: controller_access.ClientKey = None,
        token_file: controller_access.TokenFile = None,
        insecure: controller_access.ClientInsecure = False,
    ) -> None:
        _ask(node, device, reason=reason, separate=separate, controller=controller,
             security=controller_access.client_security(
                 tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token_file=token_file,
                 insecure=insecure))
    return command


devices_app.command("separate", help=(
    "Take DEVICE of NODE out of use until released: the job on it moves its rank off. Exit "
    "code 0: separated (or already); 1: refused (unknown node or device, no access)."))(
    _command(separate=True))
devices_app.command("release", help=(
    "Put a separated DEVICE of NODE back in use for new jobs. Exit code 0: released; 1: "
    "refused (unknown node or device, not separated, no access)."))(_command(separate=False))


def _ask(node: str, device: int, *, reason: str, separate: bool, controller: str,
         security: grpc_security.ClientSecurity) -> None:
    request = pb.DeviceRequest(node=node, device=device, reason=reason)
    answer = controller_access.ask(grpc_channel.device_request(
        controller, request, separate=separate, timeout=10.0, security=security))
    if not answer.ok:
        typer.echo(f"trainguard: {answer.text}", err=True)
        raise typer.Exit(1)
    typer.echo(answer.text)
