"""Domain types to control-protocol messages and back, and the envelope they travel in.

Only what both ends share lives here (faults, outcomes, a worker's leaving); each end builds
its own messages from its own objects (the agent's generation, the controller's views).
"""

from __future__ import annotations

from trainguard.faults import process
from trainguard.faults.levels import Level
from trainguard.ipc import messages
from trainguard.proto import control_pb2 as pb
from trainguard.proto.versioned import ProtocolError, parse

__all__ = [
    "fault_from_pb",
    "fault_to_pb",
    "left_from_pb",
    "left_to_pb",
    "outcome_from_pb",
    "outcome_to_pb",
    "unpack",
]

def unpack(data: bytes) -> pb.Envelope:
    """Raises:
        ProtocolError: not an envelope, one of another protocol version, or one without body.
    """
    envelope = parse(pb.Envelope, data)
    if envelope.WhichOneof("body") is None:
        raise ProtocolError("a control message with no body")
    return envelope


def fault_to_pb(fault: process.ProcessFault) -> pb.Fault:
    message = pb.Fault(rank=fault.rank, pid=fault.pid, kind=str(fault.kind),
                       detected_at=fault.detected_at, detail=fault.detail,
                       error_excerpt=fault.error_excerpt, code=fault.code, alive=fault.alive,
                       device=fault.device, level=str(fault.level or ""))
    if fault.returncode is not None:
        message.returncode = fault.returncode
    if fault.last_step is not None:
        message.last_step = fault.last_step
    if fault.occurred_at is not None:
        message.occurred_at = fault.occurred_at
    if fault.injected is not None:
        message.injected = fault.injected
    return message


def fault_from_pb(message: pb.Fault) -> process.ProcessFault:
    """Raises:
        ProtocolError: a kind or level this end does not know.
    """
    try:
        kind = process.ProcessFaultKind(message.kind)
        level = Level(message.level) if message.level else None
    except ValueError as error:
        raise ProtocolError(f"fault of rank {message.rank}: {error}") from error
    return process.ProcessFault(
        rank=message.rank, pid=message.pid, kind=kind, detected_at=message.detected_at,
        returncode=message.returncode if message.HasField("returncode") else None,
        last_step=message.last_step if message.HasField("last_step") else None,
        occurred_at=message.occurred_at if message.HasField("occurred_at") else None,
        injected=message.injected if message.HasField("injected") else None,
        detail=message.detail, error_excerpt=message.error_excerpt, code=message.code,
        alive=message.alive, device=message.device, level=level)


def outcome_to_pb(outcome: process.GenerationOutcome) -> pb.Outcome:
    message = pb.Outcome(kind=str(outcome.kind), detail=outcome.detail)
    if outcome.fault is not None:
        message.fault.CopyFrom(fault_to_pb(outcome.fault))
    return message


def outcome_from_pb(message: pb.Outcome) -> process.GenerationOutcome:
    """Raises:
        ProtocolError: an outcome kind this end does not know.
    """
    try:
        kind = process.OutcomeKind(message.kind)
    except ValueError as error:
        raise ProtocolError(f"generation outcome: {error}") from error
    fault = fault_from_pb(message.fault) if message.HasField("fault") else None
    return process.GenerationOutcome(kind, fault=fault, detail=message.detail)


def left_to_pb(left: messages.LeftGeneration) -> pb.Left:
    message = pb.Left(generation=left.generation, error=left.error, code=left.code,
                      time=left.time)
    if left.step is not None:
        message.step = left.step
    return message


def left_from_pb(message: pb.Left) -> messages.LeftGeneration:
    return messages.LeftGeneration(
        generation=message.generation, step=message.step if message.HasField("step") else None,
        error=message.error, code=message.code, time=message.time)
