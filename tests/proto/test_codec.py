"""Faults, outcomes and a worker's leaving cross the protocol unchanged; bytes that are not
an envelope of this version are refused, naming why."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.faults import process
from trainguard.faults.levels import Level
from trainguard.ipc import messages
from trainguard.proto import codec, versioned
from trainguard.proto import control_pb2 as pb

_maybe_int = st.none() | st.integers(min_value=-(2**31), max_value=2**31 - 1)
_maybe_step = st.none() | st.integers(min_value=0, max_value=2**62)
_seconds = st.floats(min_value=0, max_value=1e9, allow_nan=False)

faults = st.builds(
    process.ProcessFault, rank=st.integers(0, 4096), pid=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(process.ProcessFaultKind), detected_at=_seconds,
    returncode=_maybe_int, last_step=_maybe_step, occurred_at=st.none() | _seconds,
    injected=st.none() | st.sampled_from(["crash", "hang", ""]), detail=st.text(),
    error_excerpt=st.text(), code=st.text(max_size=12), alive=st.booleans(),
    device=st.text(max_size=12), level=st.none() | st.sampled_from(Level))


@given(faults)
def test_a_fault_round_trips(fault: process.ProcessFault) -> None:
    assert codec.fault_from_pb(codec.fault_to_pb(fault)) == fault


@given(st.sampled_from(process.OutcomeKind), st.none() | faults, st.text())
def test_an_outcome_round_trips(kind: process.OutcomeKind, fault: process.ProcessFault | None,
                                detail: str) -> None:
    outcome = process.GenerationOutcome(kind, fault=fault, detail=detail)
    assert codec.outcome_from_pb(codec.outcome_to_pb(outcome)) == outcome


@given(st.integers(0, 1000), _maybe_step, st.text(), st.text(max_size=12), _seconds)
def test_leaving_round_trips(generation: int, step: int | None, error: str, code: str,
                             time: float) -> None:
    left = messages.LeftGeneration(generation, step, error, code, time)
    assert codec.left_from_pb(codec.left_to_pb(left)) == left


def test_an_envelope_round_trips_with_its_version() -> None:
    data = versioned.serialize(pb.Envelope(command=pb.Command(id=7, settle=pb.Settle(timeout=2.5))))
    envelope = codec.unpack(data)
    assert envelope.version == versioned.PROTOCOL_VERSION
    assert envelope.command.id == 7
    assert envelope.command.settle.timeout == 2.5


def test_another_protocol_version_is_refused_naming_both() -> None:
    envelope = pb.Envelope(version=versioned.PROTOCOL_VERSION + 1, ack=pb.Ack(command_id=1))
    with pytest.raises(versioned.ProtocolError, match=rf"Envelope of protocol version "
                       rf"{versioned.PROTOCOL_VERSION + 1}; "
                       rf"this end speaks version {versioned.PROTOCOL_VERSION}"):
        codec.unpack(envelope.SerializeToString())


def test_bytes_that_are_no_envelope_are_refused() -> None:
    with pytest.raises(versioned.ProtocolError, match="unreadable Envelope"):
        codec.unpack(b"\xff\xff\xff\xff")


def test_an_envelope_without_a_body_is_refused() -> None:
    with pytest.raises(versioned.ProtocolError, match="no body"):
        codec.unpack(pb.Envelope(version=versioned.PROTOCOL_VERSION).SerializeToString())


def test_an_unknown_fault_kind_is_refused_naming_the_rank() -> None:
    with pytest.raises(versioned.ProtocolError, match="fault of rank 3"):
        codec.fault_from_pb(pb.Fault(rank=3, kind="melted"))
