"""``trainguard status``: each rank's step, rate, heartbeat and snapshot, and the job's tally.

Reads two documents of the run's state store: ``job-status-<job>`` (the controller's: state,
restarts) and ``job-ranks-<job>`` (the live document, :mod:`trainguard.telemetry.live`, replaced
about once a second while the job runs). ``--watch`` redraws in place until the job ends or
Ctrl-C.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import time
from typing import Annotated, Any

import typer
from google.protobuf import json_format
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from trainguard.cli import controller_access, runs
from trainguard.cli.run_command import DEFAULT_RUN_ROOT
from trainguard.launcher import STORE_NAME
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel, grpc_security
from trainguard.store import api, sqlite
from trainguard.telemetry import live

__all__ = ["JobStatus", "read_status", "render", "render_cluster", "status"]

_PIPED_WIDTH = 1000


@dataclasses.dataclass(frozen=True)
class JobStatus:
    choice: runs.RunChoice
    state: dict[str, Any]  # the job-status document's fields ({} when there is none)
    ranks: live.LiveDocument | None
    updated: str | None  # when the live document was written

    def to_data(self, *, now: float) -> dict[str, Any]:
        ranks = self.ranks
        return {
            "run": self.choice.directory.name, "run_dir": str(self.choice.directory),
            "running": self.choice.running, "chosen": self.choice.why,
            "state": self.state.get("state"), "reason": self.state.get("reason"),
            "generation": ranks.generation if ranks else self.state.get("generation"),
            "restarts_used": self.state.get("restarts_used"),
            "restarts_left": ranks.restarts_left if ranks else self.state.get("restarts_left"),
            "faults": ranks.faults if ranks else None,
            "persisted_step": ranks.persisted_step if ranks else None,
            "persisted_age_seconds": _age(ranks.persisted_at, now) if ranks else None,
            "updated": self.updated,
            "ranks": [{**dataclasses.asdict(rank),
                       "heartbeat_age_seconds": _age(rank.heartbeat_at, now),
                       "snapshot_age_seconds": _age(rank.snapshot_at, now)}
                      for rank in (ranks.ranks if ranks else ())],
        }


def read_status(choice: runs.RunChoice) -> JobStatus:
    """Raises: api.StoreError when the run's store cannot be read."""
    store = sqlite.SqliteStore.open(choice.directory / STORE_NAME, read_only=True)
    try:
        job = choice.directory.name
        state = store.get_document(f"job-status-{job}")
        document = store.get_document(live.document_name(job))
    finally:
        store.close()
    ranks = None
    if document is not None:
        try:
            ranks = live.LiveDocument.from_data(document.data)
        except ValueError:
            ranks = None  # written by another trainguard version: show the job's state only
    return JobStatus(choice=choice, state=state.data if state else {}, ranks=ranks,
                     updated=document.updated if document else None)


def _age(iso: str | None, now: float) -> float | None:
    if iso is None:
        return None
    return max(0.0, now - datetime.datetime.fromisoformat(iso).timestamp())


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _shown(value: Any) -> str:
    return "-" if value is None else str(value)


def render(status: JobStatus, *, now: float) -> Group:
    """The job's lines and a table of its ranks."""
    data = status.to_data(now=now)
    restarts = (f"{_shown(data['restarts_used'])} used, {_shown(data['restarts_left'])} left")
    state = _shown(data["state"]) + (f" ({data['reason']})" if data["reason"] else "")
    persisted = ("-" if data["persisted_step"] is None else
                 f"step {data['persisted_step']}, {_ago(data['persisted_age_seconds'])}")
    lines = [
        status.choice.describe(),
        f"job: {state}; generation {_shown(data['generation'])}; restarts {restarts}; "
        f"faults {_shown(data['faults'])}",
        f"last persisted checkpoint: {persisted}",
    ]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("rank", "pid", "device", "step", "steps/s", "heartbeat", "snapshot"):
        table.add_column(column, justify="right" if column != "snapshot" else "left")
    for rank in data["ranks"]:
        rate = rank["steps_per_second"]
        snapshot = ("-" if rank["snapshot_step"] is None else
                    f"step {rank['snapshot_step']}, {_ago(rank['snapshot_age_seconds'])}")
        table.add_row(str(rank["rank"]), _shown(rank["pid"]), str(rank["device"]),
                      _shown(rank["step"]), "-" if rate is None else f"{rate:.1f}",
                      _ago(rank["heartbeat_age_seconds"]), snapshot)
    parts: list[Any] = [Text(line) for line in lines]
    if data["ranks"]:
        parts.append(table)
    elif status.ranks is None:
        parts.append(Text("no live status recorded for this run"))
    return Group(*parts)


def status(
    *,
    run_dir: runs.RunDir = None,
    run_root: runs.RunRoot = DEFAULT_RUN_ROOT,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object, for scripts.")
                       ] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help=(
        "Redraw in place every --interval until the job ends or Ctrl-C."))] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between redraws with "
                                            "--watch.")] = 1.0,
    controller: Annotated[str | None, typer.Option(
        help="HOST:PORT of a trainguard controller: its jobs across hosts, each host's ranks "
             "and state (holding ranks, spare, lost), and the generation; every host's "
             "devices, their levels, separations and jobs. Asking needs the operator role.")
    ] = None,
    tls_ca: controller_access.ClientCa = None,
    tls_cert: controller_access.ClientCert = None,
    tls_key: controller_access.ClientKey = None,
    token_file: controller_access.TokenFile = None,
    insecure: controller_access.ClientInsecure = False,
) -> None:
    """Show a job's ranks (step, steps/s, heartbeat, snapshot, pid) and its tally.

    Without --run-dir: the newest running run under --run-root, else the newest run. With
    --controller: the jobs across hosts that controller runs.
    """
    if controller is not None:
        security = controller_access.client_security(
            tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token_file=token_file,
            insecure=insecure)
        _cluster_status(controller, as_json=as_json, watch=watch, interval=interval,
                        security=security)
        return
    choice = runs.choose(run_dir, run_root)
    try:
        if as_json:
            typer.echo(json.dumps(read_status(choice).to_data(now=time.time())))
            return
        console = Console(highlight=False)
        if not console.is_terminal:
            console.width = _PIPED_WIDTH  # rich's 80 would cut the rows of a pipe or a file
        if not watch:
            console.print(render(read_status(choice), now=time.time()))
            return
        _watch(choice, console, interval)
    except api.StoreError as error:
        typer.echo(f"trainguard: {error}", err=True)
        raise typer.Exit(1) from error


def _cluster_status(address: str, *, as_json: bool, watch: bool, interval: float,
                    security: grpc_security.ClientSecurity) -> None:
    def ask() -> pb.ClusterStatus:
        try:
            return asyncio.run(grpc_channel.cluster_status(address, timeout=10.0,
                                                           security=security))
        except ConnectionError as error:
            typer.echo(f"trainguard: {error}", err=True)
            raise typer.Exit(1) from error

    if as_json:
        typer.echo(json.dumps(json_format.MessageToDict(
            ask(), preserving_proto_field_name=True, always_print_fields_with_no_presence=True)))
        return
    console = Console(highlight=False)
    if not watch:
        console.print(render_cluster(ask(), address))
        return
    with Live(render_cluster(ask(), address), console=console, auto_refresh=False) as display:
        try:
            while True:
                time.sleep(interval)
                display.update(render_cluster(ask(), address), refresh=True)
        except KeyboardInterrupt:
            return


def render_cluster(status: pb.ClusterStatus, address: str) -> Group:
    """The controller's jobs, each with a table of its hosts, then every reported host's
    devices: level (in words, the original's name beside), separation, codes, job."""
    parts: list[Any] = []
    if not status.jobs:
        parts.append(Text(f"controller {address}: no jobs"))
    for job in status.jobs:
        generation = job.generation if job.HasField("generation") else "-"
        parts.append(Text(f"job {job.job}: {job.state}, generation {generation}, "
                          f"{job.nnodes} hosts of {job.nproc_per_node} ranks"))
        table = Table(box=box.SIMPLE_HEAD)
        for column in ("node", "host", "state", "ranks"):
            table.add_column(column)
        for host in job.hosts:
            ranks = ", ".join(str(rank) for rank in host.ranks) or "-"
            table.add_row(str(host.place), Text(host.host), host.state, ranks)
        parts.append(table)
    if status.nodes:
        parts.append(Text("devices (trainguard devices separate|release NODE DEVICE):"))
        table = Table(box=box.SIMPLE_HEAD)
        for column in ("host", "device", "level", "separated", "codes", "job"):
            table.add_column(column, no_wrap=column == "level")
        for node in status.nodes:
            for device in node.devices:
                table.add_row(Text(node.node), str(device.device),
                              f"{device.health} ({device.level})",
                              "yes" if device.separated else "", ", ".join(device.codes) or "-",
                              Text(device.job or "-"))
        parts.append(table)
    return Group(*parts)


def _watch(choice: runs.RunChoice, console: Console, interval: float) -> None:
    with Live(render(read_status(choice), now=time.time()), console=console,
              auto_refresh=False) as display:
        try:
            while choice.running:
                time.sleep(interval)
                if not runs.is_running(choice.directory):
                    choice = dataclasses.replace(choice, running=False,
                                                 why=f"{choice.why}; it ended while watched")
                display.update(render(read_status(choice), now=time.time()), refresh=True)
        except KeyboardInterrupt:
            return
