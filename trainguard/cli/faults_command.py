"""``trainguard faults explain``, ``replay``, ``check-message`` and ``send``: the fault engine
for operators, and the operator's client of the controller's PubFault service."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from trainguard.cli import controller_access
from trainguard.clock import iso_utc
from trainguard.controller import fault_config
from trainguard.faults import explain
from trainguard.faults.device import device_health, replay
from trainguard.faults.public import public_messages
from trainguard.proto import grpc_channel, pubfault_messages

__all__ = ["faults_app"]

faults_app = typer.Typer(help="Fault codes and levels: explain a code, replay a timeline; "
                              "check and send public faults.", no_args_is_help=True)

ConfigDir = Annotated[Path | None, typer.Option(
    help="A directory with your faultCode.json, faultCustomization.json, SwitchFaultCode.json, "
         "NodeDConfiguration.json, publicFaultConfiguration.json or publicCustomization.json "
         "(default: the shipped ones, which are the original's).",
    exists=True, file_okay=False)]


def _config(directory: Path | None) -> fault_config.FaultConfig:
    if directory is None:
        return fault_config.FaultConfig()
    config = fault_config.FaultConfigDirectory(directory)
    _, problems = config.poll()
    for problem in problems:
        typer.echo(f"trainguard: {problem.describe()}", err=True)
    return config.config


@faults_app.command("explain")
def explain_code(
    code: Annotated[str, typer.Argument(help="A device code (80E01801, XID-79), a public fault "
                                        "code (9 digits) or a switch code ([0x...,...]).")],
    config_dir: ConfigDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Say what a fault code means here: its level, where that comes from, its reset policy,
    and the rules that can raise it. Exit code 1: no table knows the code; 2: not a code."""
    config = _config(config_dir)
    explanation = explain.explain(code, codes=config.codes, customization=config.customization,
                                  public=config.public, switch=config.switch, node=config.node)
    if as_json:
        typer.echo(json.dumps(explanation.to_data()))
    else:
        typer.echo(explanation.code)
        width = max(len(label) for label, _ in explanation.lines)
        for label, text in explanation.lines:
            typer.echo(f"  {label.ljust(width)}  {text}")
    if not explanation.valid:
        raise typer.Exit(2)
    if not explanation.known:
        raise typer.Exit(1)


@faults_app.command("replay")
def replay_timeline(
    events_file: Annotated[Path, typer.Argument(
        metavar="EVENTS.jsonl", exists=True, dir_okay=False,
        help="One JSON object per line, in time order: {\"time\": 0, \"device\": \"npu-0\", "
             "\"code\": \"81078603\", \"assertion\": \"occur\"}; also {\"time\": T, \"device\": "
             "D, \"release\": true} (an operator clears ManuallySeparateNPU), {\"time\": T, "
             "\"customization\": {...}} (a new faultCustomization.json) and {\"time\": T}. "
             "time: seconds or ISO-8601.")],
    config_dir: ConfigDir = None,
    period: Annotated[float, typer.Option(
        help="Seconds between evaluations when no event comes, as a device plugin polls.",
        min=0.001)] = 1.0,
    until: Annotated[str | None, typer.Option(
        help="Go on evaluating until this time (seconds or ISO-8601) after the last event.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per change.")] = False,
) -> None:
    """Replay a timeline of device fault events and print every level change and why."""
    config = _config(config_dir)
    try:
        with events_file.open(encoding="utf-8") as lines:
            records = replay.parse_timeline(lines)
    except (replay.TimelineError, UnicodeDecodeError) as error:
        typer.echo(f"trainguard: {events_file}: {error}", err=True)
        raise typer.Exit(2) from error
    end = _until(until) if until is not None else None
    for record in records:
        for problem in record.problems:
            typer.echo(f"trainguard: {problem.describe()}", err=True)
    engine = device_health.FaultEngine(table=config.codes, customization=config.customization)
    dated = any(record.time > 10**9 for record in records[:1])
    start = records[0].time if records else 0.0
    count = 0
    for change in replay.replay(records, engine=engine, period=period, until=end):
        count += 1
        if as_json:
            typer.echo(json.dumps(change.to_data()))
            continue
        when = iso_utc(change.time) if dated else _elapsed(change.time - start)
        reasons = "".join(f"  +{r.upgrade_type} {r.fault_code}" for r in change.added)
        reasons += "".join(f"  -{r.upgrade_type} {r.fault_code}" for r in change.removed)
        part = f" {change.fault_type}" if change.fault_type else ""
        typer.echo(f"{when}  {change.device}  {change.before} -> {change.after}{part} "
                   f"(policy {change.reset_policy}){reasons}  [{change.cause}]")
    if not as_json:
        typer.echo(f"{len(records)} records, {count} changes")


@faults_app.command("check-message")
def check_message(
    message_file: Annotated[Path, typer.Argument(
        metavar="MESSAGE.json", exists=True, dir_okay=False,
        help="A public fault message, as a sender sends it (the PublicFault JSON).")],
    config_dir: ConfigDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Check a public fault message as the cluster would receive it: each fault accepted, with
    the level its code is configured at, and each one dropped, with the reason. Exit code 0:
    all accepted; 1: some faults dropped; 2: the message is rejected."""
    config = _config(config_dir)
    try:
        document = json.loads(message_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        typer.echo(f"trainguard: {message_file}: not valid JSON ({error})", err=True)
        raise typer.Exit(2) from error
    message, reasons = public_messages.validate_message(document, config=config.public)
    accepted = [] if message is None else [
        {"faultId": fault.fault_id, "faultCode": fault.fault_code, "level": str(fault.level),
         "assertion": str(fault.assertion),
         "influence": {i.node_name: list(i.device_ids) for i in fault.influence}}
        for fault in message.faults]
    if as_json:
        typer.echo(json.dumps({"accepted": accepted, "dropped": reasons,
                               "rejected": message is None}))
    else:
        for fault in message.faults if message is not None else ():
            where = "; ".join(f"{i.node_name} devices {','.join(map(str, i.device_ids))}"
                              for i in fault.influence)
            typer.echo(f"accepted {fault.fault_id}: {fault.fault_code} {fault.level} "
                       f"{fault.assertion} on {where}")
        for reason in reasons:
            typer.echo(f"trainguard: {message_file}: {reason}", err=True)
    if message is None:
        raise typer.Exit(2)
    if reasons:
        raise typer.Exit(1)


_FAULT_TYPES = ("NPU", "Node", "Network", "Storage")  # by a public code's digit 1


@faults_app.command("send")
def send(
    *,
    message_file: Annotated[Path | None, typer.Argument(
        metavar="[MESSAGE.json]", dir_okay=False, exists=True,
        help="A public fault message (the PublicFault JSON) to send as it is. Without it, "
             "one fault is built from --resource, --code, --node and --device.")] = None,
    controller: Annotated[str, typer.Option(
        help="HOST:PORT of the trainguard controller.")] = "127.0.0.1:29400",
    resource: Annotated[str | None, typer.Option(
        help="The sender (one of publicFaultResource), for a built message.")] = None,
    code: Annotated[str | None, typer.Option(
        help="The 9-digit public fault code, for a built message.")] = None,
    node: Annotated[str | None, typer.Option(
        help="The node (the host's --node-name) the fault is on, for a built message.")
    ] = None,
    device: Annotated[list[int] | None, typer.Option(
        help="A device index on --node; repeatable.")] = None,
    assertion: Annotated[str, typer.Option(
        help="occur, recover or once, for a built message.")] = "occur",
    description: Annotated[str, typer.Option(help="Free text, for a built message.")] = "",
    tls_ca: controller_access.ClientCa = None,
    tls_cert: controller_access.ClientCert = None,
    tls_key: controller_access.ClientKey = None,
    token_file: controller_access.TokenFile = None,
    insecure: controller_access.ClientInsecure = False,
) -> None:
    """Send a public fault to the controller (PubFault.SendPublicFault), as an operator or a
    public-fault sender, and print its answer: code 0 taken in, 409 refused by the message
    checks, 410 over the sender's rate. Exit code 0: taken in; 1: refused, by the controller
    or before (credentials, role, size); 2: the message cannot be read."""
    security = controller_access.client_security(
        tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token_file=token_file,
        insecure=insecure)
    if message_file is not None:
        try:
            document: Any = json.loads(message_file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            typer.echo(f"trainguard: {message_file}: not valid JSON ({error})", err=True)
            raise typer.Exit(2) from error
    else:
        document = _built(resource=resource, code=code, node=node, devices=device or [],
                          assertion=assertion, description=description)
    try:
        request = pubfault_messages.from_document(document)
    except ValueError as error:
        typer.echo(f"trainguard: {message_file or 'the message'}: {error}", err=True)
        raise typer.Exit(2) from error
    answer = controller_access.ask(grpc_channel.send_public_fault(
        controller, request, timeout=10.0, security=security))
    typer.echo(f"code {answer.code}: {answer.info}")
    if answer.code != 0:
        raise typer.Exit(1)


def _built(*, resource: str | None, code: str | None, node: str | None, devices: list[int],
           assertion: str, description: str) -> dict[str, Any]:
    """One fault, now, with fresh ids (faultId, message id)."""
    missing = [flag for flag, value in (("--resource", resource), ("--code", code),
                                        ("--node", node), ("--device", devices)) if not value]
    if missing or code is None:
        raise typer.BadParameter(f"without MESSAGE.json, give {', '.join(missing)} to build "
                                 "one")
    now = int(time.time() * 1000)
    kind = _FAULT_TYPES[int(code[0])] if code[:1] in "0123" and code else "NPU"
    return {"id": f"trainguard-{uuid.uuid4().hex}", "timestamp": now, "version": "1.0",
            "resource": resource, "faults": [{
                "faultId": f"trainguard-{uuid.uuid4().hex}", "faultType": kind,
                "faultCode": code, "faultTime": now, "assertion": assertion,
                "influence": [{"nodeName": node, "deviceIds": devices}],
                "description": description}]}


def _until(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return replay.parse_time(text, line=0)
    except replay.TimelineError:
        raise typer.BadParameter(f"{text!r} is neither seconds nor an ISO-8601 time",
                                 param_hint="--until") from None


def _elapsed(seconds: float) -> str:
    """``+1d02:03:04.5``: time since the timeline's first record."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, rest = divmod(rest, 60)
    day = f"{int(days)}d" if days else ""
    return f"+{day}{int(hours):02d}:{int(minutes):02d}:{rest:04.1f}"
