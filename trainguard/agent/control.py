"""Client side of the agent's control requests (``trainguard fault inject``, tests)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from trainguard.agent import node_agent
from trainguard.faults.device.device_events import Assertion
from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec

__all__ = ["ControlError", "inject_device_fault", "inject_fault", "switch_profiling"]


class ControlError(RuntimeError):
    """The agent is not running there, or refused the request (the message says why)."""


def inject_fault(run_dir: Path, *, rank: int, kind: messages.InjectionKind,
                 at_step: int | None = None, timeout: float = 10.0) -> str:
    """Ask the running job in ``run_dir`` to cause a real fault; returns what the agent did.

    Raises:
        ControlError: no job is running in ``run_dir``, or the injection is impossible.
    """
    return _ask(run_dir, messages.InjectRequest(request_id=1, rank=rank, kind=kind,
                                                at_step=at_step), timeout=timeout)


def inject_device_fault(run_dir: Path, *, device: int, code: str, assertion: Assertion,
                        timeout: float = 10.0) -> str:
    """Give a simulated device of the job in ``run_dir`` a fault event (as its driver would);
    returns what the agent did.

    Raises:
        ControlError: no job is running in ``run_dir``, its devices are not simulated, or
            there is no such device or code.
    """
    return _ask(run_dir, messages.DeviceFaultRequest(request_id=1, device=device, code=code,
                                                     assertion=assertion), timeout=timeout)


def switch_profiling(run_dir: Path, setting: str, *, timeout: float = 10.0) -> str:
    """Switch the lightweight profiling of the running job in ``run_dir`` (a preset's name or
    the original's profilingSwitch JSON; empty: only ask); returns what it is now.

    Raises:
        ControlError: no job is running in ``run_dir``, or ``setting`` cannot be read.
    """
    return _ask(run_dir, messages.ProfilingRequest(request_id=1, switch=setting),
                timeout=timeout)


def _ask(run_dir: Path, request: messages.Message, *, timeout: float) -> str:
    try:
        agent = json.loads((run_dir / node_agent.AGENT_FILE).read_text())
    except (OSError, ValueError) as error:
        raise ControlError(f"no running job in {run_dir} (no readable "
                           f"{node_agent.AGENT_FILE}: {error})") from error
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout)
            connection.connect(messages.socket_name(str(agent["address"])))
            connection.sendall(versioned.frame(worker_codec.encode(request)))
            data = versioned.read_frame(connection.makefile("rb"), limit=worker_codec.FRAME_LIMIT)
        reply = worker_codec.decode(data) if data is not None else None
    except (OSError, messages.MessageError, versioned.ProtocolError) as error:
        raise ControlError(f"the job in {run_dir} does not answer: {error}") from error
    if reply is None:
        raise ControlError(f"the job in {run_dir} closed the connection without an answer")
    if not isinstance(reply, messages.ControlReply) or not reply.ok:
        raise ControlError(getattr(reply, "detail", f"unexpected answer {reply!r}"))
    return reply.detail
