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

from trainguard.agent import device_watch
from trainguard.cli import controller_access, runs
from trainguard.cli.run_command import DEFAULT_RUN_ROOT
from trainguard.controller import device_reports
from trainguard.detect.devices import device_info
from trainguard.faults.levels import Level, health, most_serious
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
    devices: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """The host's devices as its device document says: node, device, level, health, codes."""
    detectors: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """Each detector's state by ``<node>/<detector>``, as the agent publishes it."""
    nodes: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """Each node document's ``NodeInfo`` (NodeStatus, FaultDevList) by node."""

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
            "devices": self.devices, "detectors": self.detectors, "nodes": self.nodes,
        }


def read_status(choice: runs.RunChoice) -> JobStatus:
    """Raises: api.StoreError when the run's store cannot be read."""
    store = sqlite.SqliteStore.open(choice.directory / STORE_NAME, read_only=True)
    try:
        job = choice.directory.name
        state = store.get_document(f"job-status-{job}")
        document = store.get_document(live.document_name(job))
        devices = [row for found in store.documents(device_info.PREFIX)
                   for row in device_rows(found.name.removeprefix(device_info.PREFIX), found.data)]
        detectors = {f"{found.name.removeprefix(device_watch.DETECTORS)}/{name}": dict(state_data)
                     for found in store.documents(device_watch.DETECTORS)
                     for name, state_data in found.data.items() if isinstance(state_data, dict)}
        nodes = {found.name.removeprefix(device_reports.NODE_INFO): found.data.get("NodeInfo", {})
                 for found in store.documents(device_reports.NODE_INFO)}
    finally:
        store.close()
    ranks = None
    if document is not None:
        try:
            ranks = live.LiveDocument.from_data(document.data)
        except ValueError:
            ranks = None  # written by another trainguard version: show the job's state only
    return JobStatus(choice=choice, state=state.data if state else {}, ranks=ranks,
                     updated=document.updated if document else None, devices=devices,
                     detectors=detectors, nodes=nodes)


def device_rows(node: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    """A device document's devices, each at its most serious fault's level (NormalNPU
    without one); nothing for a document that cannot be read (another version's)."""
    try:
        listed = json.loads(data["DeviceInfoCfg"])["DeviceInfo"]["DeviceList"]
        faults: list[dict[str, Any]] = next((json.loads(value) for key, value in listed.items()
                                             if key.endswith("-Fault")), [])
        names = [name for key, value in listed.items() if "-" not in key.rpartition("/")[2]
                 for name in value.split(",") if name]
        unhealthy = {name for key, value in listed.items()
                     if key.endswith(("-Unhealthy", "-NetworkUnhealthy"))
                     for name in value.split(",") if name}
        worst: dict[str, tuple[Level, list[str]]] = {}
        for fault in faults:
            level = Level(fault["fault_level"])
            before, codes = worst.get(fault["npu_name"], (Level.NORMAL_NPU, []))
            codes = codes + [code for code in fault["fault_code"].split(",") if code]
            worst[fault["npu_name"]] = (most_serious((before, level)), codes)
    except (KeyError, TypeError, ValueError, AttributeError):
        return []
    rows = []
    for name in sorted({*names, *unhealthy, *worst}, key=_device_order):
        level, codes = worst.get(name, (Level.NORMAL_NPU, []))
        rows.append({"node": node, "device": name, "level": str(level),
                     "health": health(level), "codes": codes})
    return rows


def _device_order(name: str) -> tuple[str, int]:
    prefix, _, number = name.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (name, -1)


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
    for node, info in status.nodes.items():
        alarms = "; ".join(f"{device.get('DeviceType')} {device.get('DeviceId')}: "
                           f"{','.join(device.get('FaultCode', []))} ({device.get('FaultLevel')})"
                           for device in info.get("FaultDevList", []))
        parts.append(Text(f"node {node}: {info.get('NodeStatus', '-')}"
                          + (f" ({alarms})" if alarms else "")))
    if status.devices:
        devices = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for column in ("host", "device", "level", "codes"):
            devices.add_column(column, no_wrap=column == "level")
        for row in status.devices:
            devices.add_row(Text(row["node"]), row["device"],
                            f"{row['health']} ({row['level']})", ", ".join(row["codes"]) or "-")
        parts += [Text("devices:"), devices]
    if status.detectors:
        watching = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for column in ("detector", "state", "how", "last error"):
            watching.add_column(column)
        for name, seen in status.detectors.items():
            working = seen.get("status", "working" if seen.get("working") else "failing")
            watching.add_row(Text(name), str(working), Text(str(seen.get("mode") or "-")),
                             Text(str(seen.get("last_error") or "-")))
        parts += [Text("detectors:"), watching]
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
