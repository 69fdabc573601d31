"""``trainguard controller``: the controller of jobs across hosts, until SIGINT or SIGTERM.

Each host runs ``trainguard run --nnodes N --rdzv-endpoint HOST:PORT --rdzv-id JOB ...``; the
controller forms the job when all N have joined, drives it, and prints its faults, decisions and
recoveries as ``trainguard run`` does on one host. Each job's events are kept in
``<run root>/<job>/state.db`` (``trainguard events --run-dir``). It serves TLS, and knows its
callers from an access file (README "Deploying securely"); plain text only with --insecure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from trainguard.cli import console as console_output
from trainguard.cli.run_command import DEFAULT_RUN_ROOT
from trainguard.controller import service
from trainguard.proto import grpc_security

__all__ = ["controller"]


def controller(
    *,
    listen: Annotated[str, typer.Option(
        help="HOST:PORT to serve agents on; the hosts' --rdzv-endpoint. Port 0 takes a free "
             "one (printed). 0.0.0.0 serves every interface.")] = "127.0.0.1:29400",
    run_root: Annotated[Path, typer.Option(
        help="Where each job's state store is kept: RUN_ROOT/JOB/state.db.")
    ] = DEFAULT_RUN_ROOT,
    host_lease: Annotated[float, typer.Option(
        help="Seconds a host's connection may stay silent before the host is lost (a cut "
             "link; a host that vanished outright is seen at once).")] = 2.0,
    host_wait: Annotated[float, typer.Option(
        help="Seconds a recovery waits for a spare host when a host is lost and none is "
             "ready (a takeover too, for hosts that did not register again); then the job "
             "fails, saying why.")] = 30.0,
    store: Annotated[str | None, typer.Option(
        help="Where the controller keeps what it must not lose (the devices' fault history, "
             "which escalation counts across restarts): sqlite:///PATH, or "
             "etcd://HOST:PORT,HOST:PORT/NAMESPACE with one or more members and an optional "
             "namespace (needs the etcd extra). Default: "
             "RUN_ROOT/controller.db. Controllers sharing a store elect one leader; the others "
             "stand by and take over when it dies.")] = None,
    leader_ttl: Annotated[float, typer.Option(
        help="Seconds the leader leads after its last word to the store: a standby takes "
             "over within about this long after the leader dies.")] = 2.0,
    tls_cert: Annotated[Path | None, typer.Option(
        help="The controller's certificate (PEM), naming the address clients dial (a SAN of "
             "its host name or IP address): it serves TLS.",
        envvar="TRAINGUARD_CONTROLLER_TLS_CERT", dir_okay=False)] = None,
    tls_key: Annotated[Path | None, typer.Option(
        help="The private key (PEM) of --tls-cert.", envvar="TRAINGUARD_CONTROLLER_TLS_KEY",
        dir_okay=False)] = None,
    tls_ca: Annotated[Path | None, typer.Option(
        help="The CA certificate (PEM) that signs clients' certificates: mutual TLS, every "
             "client must present one, its common name its identity in --access-file.",
        envvar="TRAINGUARD_CONTROLLER_TLS_CA", dir_okay=False)] = None,
    access_file: Annotated[Path | None, typer.Option(
        help="JSON, mode 600: the identities (certificate common names, bearer tokens) and "
             "their roles: agent (hosts of jobs), operator (status; public faults as any "
             "sender), public-fault-sender (public faults as its listed resources). Needed "
             "with TLS.", envvar="TRAINGUARD_ACCESS_FILE", dir_okay=False)] = None,
    fault_config_dir: Annotated[Path | None, typer.Option(
        help="A directory of the original's fault configuration files, each re-read when it "
             "changes: publicFaultConfiguration.json or publicCustomization.json (a symbolic "
             "link refused; public fault codes' levels and the allowed senders), and the fault "
             "centre's relationFaultCustomization.json, faultDuration.json and "
             "manually_separate_policy.conf (YAML). A file absent: the shipped one, the "
             "original's.",
        exists=True, file_okay=False)] = None,
    insecure: Annotated[bool, typer.Option(
        "--insecure", help="Serve plain text: anyone on the network can read the traffic, "
        "and without --access-file anyone who reaches the port may register hosts, read the "
        "cluster and send public faults. Warned at every start.")] = False,
) -> None:
    """Serve as the controller of jobs across hosts, and take public faults.

    Hosts join with trainguard run --nnodes N --rdzv-endpoint HOST:PORT; public faults come
    from trainguard faults send, or as documents in RUN_ROOT/public-faults."""
    observer = console_output.ConsoleObserver()
    try:
        security = grpc_security.ServerSecurity.from_files(
            certificate=tls_cert, key=tls_key, client_ca=tls_ca, access=access_file,
            insecure=insecure)
        settings = service.ControllerSettings(run_root=run_root, host_lease=host_lease,
                                              host_wait=host_wait, store=store,
                                              leader_ttl=leader_ttl, security=security,
                                              fault_config_dir=fault_config_dir)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    # Hosts joining and where each generation meets are what an operator watches for here.
    controller_log = logging.getLogger("trainguard.controller")
    if controller_log.getEffectiveLevel() > logging.INFO:
        controller_log.setLevel(logging.INFO)

    def standing_by(leader: str) -> None:
        typer.echo(f"trainguard controller standing by: the controller at {leader} leads "
                   f"(store {settings.store_url})")
        sys.stdout.flush()

    async def serve() -> None:
        controller = service.ControllerService(settings, on_event=observer.event)
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stopped.set)
        starting = asyncio.create_task(controller.start(listen, on_standby=standing_by))
        try:
            await asyncio.wait({starting, asyncio.create_task(stopped.wait())},
                               return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():  # stopped while standing by
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
                return
            try:
                port = starting.result()
            except OSError as error:
                observer.console.print(f"trainguard: {error}", style="bold red", markup=False)
                raise typer.Exit(1) from error
            host = listen.rpartition(":")[0]
            # Flushed at once: whoever started the controller may be waiting for its port.
            typer.echo(f"trainguard controller listening on {host}:{port}; job state under "
                       f"{run_root}, store {settings.store_url}")
            sys.stdout.flush()
            deposed = asyncio.create_task(controller.deposed.wait())
            await asyncio.wait({deposed, asyncio.create_task(stopped.wait())},
                               return_when=asyncio.FIRST_COMPLETED)
            if deposed.done():
                observer.console.print(
                    "trainguard: this controller no longer leads: "
                    f"{controller.deposed_reason}; stopping (its hosts go to the leader)",
                    style="bold red", markup=False)
                raise typer.Exit(1)
        finally:
            with contextlib.suppress(Exception):
                await controller.stop()

    asyncio.run(serve())
