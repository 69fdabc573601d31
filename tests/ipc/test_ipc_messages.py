"""The wire schema between training processes, control clients and the node agent: the
messages of ipc/messages.py as worker.proto's envelope (proto/worker_codec.py)."""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import given
from hypothesis import strategies as st

from trainguard.faults.device.device_events import Assertion
from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec
from trainguard.proto import worker_pb2 as pb

EVERY_MESSAGE: list[messages.Message] = [
    messages.Hello(rank=3, local_rank=1, pid=4242, generation=2, secret="3f2a"),
    messages.StepMark(step=17, phase=messages.StepPhase.BEGIN, time=12.5),
    messages.StepMark(step=17, phase=messages.StepPhase.END, time=12.75),
    messages.Activity(kind=messages.ActivityKind.CHECKPOINT, active=True, time=3.25),
    messages.Activity(kind=messages.ActivityKind.USER, active=False, time=4.0),
    messages.SnapshotCommitted(step=40, slot=1, seq=8, nbytes=1 << 33, copy_seconds=0.125,
                               time=99.5),
    messages.FaultInjected(kind=messages.InjectionKind.HANG, step=5, time=1.5),
    messages.WorkerFailing(error="RuntimeError: CUDA error: out of memory\nline 2", time=7.0),
    messages.StopRequested(time=8.5),
    messages.Finished(time=9.5),
    messages.ReserveSlot(request_id=11, slot=0, nbytes=4096),
    messages.RestorePlanRequest(request_id=12),
    messages.SlotGranted(request_id=11, slot=0, path="/dev/shm/tg-job-r3-s0", capacity=8192),
    messages.RestorePlan(request_id=12, source=messages.RestoreSource.MEMORY, step=40,
                         path="/dev/shm/tg-job-r3-s1", next_slot=0,
                         slot_paths=["/dev/shm/tg-job-r3-s0", ""], note="from rank 3's memory"),
    messages.RestorePlan(request_id=13, source=messages.RestoreSource.NONE, step=0, path="",
                         next_slot=0, slot_paths=[], note=""),
    messages.RequestFailed(request_id=12, error="slot 2 does not exist; use 0 or 1"),
    messages.InjectFault(kind=messages.InjectionKind.EXCEPTION, at_step=9),
    messages.InjectFault(kind=messages.InjectionKind.CRASH, at_step=None),
    messages.InjectFault(kind=messages.InjectionKind.CRASH, at_step=0),
    messages.StopAt(step=123),
    messages.StopAt(step=0),  # a body of defaults only is still that message
    messages.RecoverySupported(strategies=["retry", "recover-in-place"]),
    messages.ReplicasDiffer(detail="replica groups [[0, 1, 2]] at dp-size 3", time=12.5),
    messages.LeftGeneration(generation=2, step=17, error="DeviceError: device fault 80E01801",
                            code="80E01801", time=13.0),
    messages.LeftGeneration(generation=2, step=None, error="", code="", time=13.5),
    messages.Abort(generation=2),
    messages.Rejoin(generation=3, master_addr="127.0.0.1", master_port=29511,
                    restart_count=1),
    messages.SnapshotInterval(every=4, from_step=42),
    messages.CompleteShares(request_id=5, holder=2),
    messages.Profiling(switch='{"Step": "on"}'),
    messages.ProfilingRequest(request_id=3, switch="light"),
    messages.RestorePlan(request_id=14, source=messages.RestoreSource.PEER, step=40, path="",
                         next_slot=0, slot_paths=["", ""], note="", peer=0, send_to=[]),
    messages.RestorePlan(request_id=15, source=messages.RestoreSource.REPLICA, step=40, path="",
                         next_slot=1, slot_paths=["a", "b"], note="", peer=2, send_to=[1, 3],
                         holder_paths=["", "/dev/shm/r1", "/dev/shm/r2"]),
    messages.InjectRequest(request_id=1, rank=0, kind=messages.InjectionKind.CRASH, at_step=None),
    messages.DeviceFaultRequest(request_id=2, device=3, code="80E01801",
                                assertion=Assertion.RECOVER),
    messages.ControlReply(request_id=1, ok=False, detail="rank 7 is not running (ünïcode ✓)"),
]

MESSAGE_CLASSES = [
    cls for name in messages.__all__
    if isinstance(cls := getattr(messages, name), type)
    and issubclass(cls, messages.Message) and cls is not messages.Message
]


def _envelope(**body: Any) -> bytes:
    """The bytes of an envelope of this end's version, built field by field by hand."""
    return pb.Envelope(version=versioned.PROTOCOL_VERSION, **body).SerializeToString()


def test_every_message_type_is_covered() -> None:
    assert {type(message) for message in EVERY_MESSAGE} == set(MESSAGE_CLASSES)
    assert len(MESSAGE_CLASSES) == 27


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda cls: cls.__name__)
def test_each_message_is_the_proto_message_of_its_name_with_the_same_fields(
    cls: type[messages.Message],
) -> None:
    body = pb.Envelope.DESCRIPTOR.fields_by_name[cls.TYPE]
    assert body.containing_oneof is not None
    assert body.containing_oneof.name == "body"
    assert body.message_type is not None
    assert body.message_type.name == cls.__name__
    proto = body.message_type.fields_by_name
    hints = typing.get_type_hints(cls)
    fields = [field.name for field in dataclasses.fields(cls)]
    assert sorted(proto) == sorted(fields)
    for name in fields:
        hint = hints[name]
        assert proto[name].has_presence == (type(None) in typing.get_args(hint)), name
        assert proto[name].is_repeated == (typing.get_origin(hint) is list), name
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            assert proto[name].type == FieldDescriptor.TYPE_STRING, name


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_round_trip(message: messages.Message) -> None:
    decoded = worker_codec.decode(worker_codec.encode(message))

    assert decoded == message
    assert type(decoded) is type(message)
    for field in dataclasses.fields(message):
        assert type(getattr(decoded, field.name)) is type(getattr(message, field.name))


def test_encode_is_one_envelope_of_this_ends_version_with_the_fields_by_name() -> None:
    data = worker_codec.encode(messages.StepMark(step=3, phase=messages.StepPhase.END, time=1.5))

    assert pb.Envelope.FromString(data) == pb.Envelope(
        version=versioned.PROTOCOL_VERSION, step=pb.StepMark(step=3, phase="end", time=1.5))


def test_an_unset_optional_field_is_none_and_a_set_zero_is_zero() -> None:
    unset = worker_codec.decode(_envelope(inject=pb.InjectFault(kind="crash")))
    zero = worker_codec.decode(_envelope(inject=pb.InjectFault(kind="crash", at_step=0)))

    assert unset == messages.InjectFault(kind=messages.InjectionKind.CRASH, at_step=None)
    assert zero == messages.InjectFault(kind=messages.InjectionKind.CRASH, at_step=0)


def test_decode_converts_enums_to_their_members() -> None:
    decoded = worker_codec.decode(_envelope(restore_plan=pb.RestorePlan(
        request_id=1, source="disk", step=4, path="/ckpt/4", next_slot=1, slot_paths=["a", "b"])))

    assert isinstance(decoded, messages.RestorePlan)
    assert decoded.source is messages.RestoreSource.DISK
    assert (decoded.peer, decoded.send_to, decoded.holder_paths) == (None, [], [])


# --- every message, any values its fields can hold ------------------------------------------

_BOUNDS = {FieldDescriptor.TYPE_INT32: 31, FieldDescriptor.TYPE_INT64: 63}


def _values(cls: type[messages.Message], name: str) -> st.SearchStrategy[Any]:
    """What field ``name`` of ``cls`` can hold on the wire."""
    hint = typing.get_type_hints(cls)[name]
    message = pb.Envelope.DESCRIPTOR.fields_by_name[cls.TYPE].message_type
    assert message is not None
    proto = message.fields_by_name[name]
    strategy: st.SearchStrategy[Any]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        strategy = st.sampled_from(hint)
    elif proto.type in _BOUNDS:
        bits = _BOUNDS[proto.type]
        strategy = st.integers(-(2**bits), 2**bits - 1)
    else:
        strategy = {FieldDescriptor.TYPE_STRING: st.text(),
                    FieldDescriptor.TYPE_DOUBLE: st.floats(allow_nan=False),
                    FieldDescriptor.TYPE_BOOL: st.booleans()}[proto.type]
    if proto.is_repeated:
        return st.lists(strategy)
    return st.none() | strategy if proto.has_presence else strategy


def _any_message(cls: type[messages.Message]) -> st.SearchStrategy[messages.Message]:
    fields = {field.name: _values(cls, field.name) for field in dataclasses.fields(cls)}
    if cls is messages.SnapshotInterval:
        fields["every"] = st.integers(1, 2**63 - 1)  # fewer refuses to be made at all
    return st.builds(cls, **fields)


@given(message=st.one_of(*(_any_message(cls) for cls in MESSAGE_CLASSES)))
def test_every_message_round_trips_whatever_its_values(message: messages.Message) -> None:
    decoded = worker_codec.decode(worker_codec.encode(message))

    assert decoded == message
    assert type(decoded) is type(message)


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "field", "text"), [
    ({"step": pb.StepMark(step=1, phase="middle")}, "phase",
     "step: field 'phase' is 'middle', expected one of begin, end"),
    ({"step": pb.StepMark(step=1, phase="BEGIN")}, "phase",
     "step: field 'phase' is 'BEGIN', expected one of begin, end"),
    ({"step": pb.StepMark(step=1)}, "phase",
     "step: field 'phase' is '', expected one of begin, end"),
    ({"inject": pb.InjectFault(kind="segfault")}, "kind",
     "inject: field 'kind' is 'segfault', expected one of crash, hang, exception, "
     "memory-error, link-error, device-error"),
    ({"activity": pb.Activity(kind="sleep", active=True)}, "kind",
     "activity: field 'kind' is 'sleep', expected one of checkpoint, restore, user"),
    ({"restore_plan": pb.RestorePlan(request_id=1, source="neighbour")}, "source",
     "restore_plan: field 'source' is 'neighbour', expected one of memory, peer, replica, "
     "disk, none"),
    ({"inject_request": pb.InjectRequest(request_id=1, kind="memory_error")}, "kind",
     "inject_request: field 'kind' is 'memory_error', expected one of crash, hang, exception, "
     "memory-error, link-error, device-error"),
])
def test_decode_rejects_a_bad_enum_value_naming_the_field_and_the_allowed_ones(
    body: dict[str, Any], field: str, text: str
) -> None:
    with pytest.raises(messages.MessageError) as caught:
        worker_codec.decode(_envelope(**body))

    assert caught.value.field == field
    assert str(caught.value) == text


@pytest.mark.parametrize("version", [0, versioned.PROTOCOL_VERSION + 1])
def test_decode_refuses_an_envelope_of_another_protocol_version(version: int) -> None:
    data = pb.Envelope(version=version, stop_at=pb.StopAt(step=2)).SerializeToString()

    with pytest.raises(messages.MessageError) as caught:
        worker_codec.decode(data)

    assert str(caught.value) == (f"Envelope of protocol version {version}; this end speaks "
                                 f"version {versioned.PROTOCOL_VERSION}")
    assert caught.value.field is None


@pytest.mark.parametrize("data", [
    b"not protobuf",
    b'{"type":"step","step":3,"phase":"end","time":1.5}\n',  # the JSON lines of before
    b"\xff\xff\xff\xff",
    b"\x08",  # cut inside the version
    _envelope(hello=pb.Hello(rank=1))[:-1],  # cut inside the body
    _envelope(failing=pb.WorkerFailing(error="x")).replace(b"x", b"\xff"),  # not UTF-8
])
def test_decode_refuses_garbage(data: bytes) -> None:
    with pytest.raises(messages.MessageError, match=r"^unreadable Envelope: ") as caught:
        worker_codec.decode(data)

    assert caught.value.field is None
    assert isinstance(caught.value, ValueError)


def test_decode_refuses_an_envelope_without_a_body_naming_it() -> None:
    with pytest.raises(messages.MessageError) as caught:
        worker_codec.decode(_envelope())

    assert caught.value.field == "body"
    assert str(caught.value) == "a message without a body this end knows (a newer peer's?)"


def test_decode_refuses_a_body_this_end_does_not_know() -> None:
    # What a newer peer's new message type looks like: the envelope's field 99 (tag 99 << 3 | 2,
    # a varint: 9a 06), 2 bytes long, holding its own field 1 = 1 (08 01).
    data = _envelope() + b"\x9a\x06\x02\x08\x01"

    with pytest.raises(messages.MessageError) as caught:
        worker_codec.decode(data)

    assert caught.value.field == "body"


def test_a_snapshot_interval_below_one_step_is_refused_naming_the_field() -> None:
    with pytest.raises(messages.MessageError, match="'every' is 0") as raised:
        worker_codec.decode(_envelope(snapshot_interval=pb.SnapshotInterval(every=0,
                                                                            from_step=3)))
    assert raised.value.field == "every"


@pytest.mark.parametrize(("message", "field", "text"), [
    (messages.StopAt(step=2**63), "step",
     "stop_at: field 'step' is 9223372036854775808: Value out of range"),
    (messages.SnapshotCommitted(step=1, slot=2**31, seq=0, nbytes=0, copy_seconds=0.0, time=0.0),
     "slot", "snapshot: field 'slot' is 2147483648: Value out of range"),
    (messages.StopAt(step=None), "step", "stop_at: field 'step' is None"),  # type: ignore[arg-type]
    (messages.StopAt(step="5"), "step", "stop_at: field 'step' is '5'"),  # type: ignore[arg-type]
    (messages.StopAt(step=True), "step", "stop_at: field 'step' is True"),
    (messages.ControlReply(request_id=1, ok=True, detail=3), "detail",  # type: ignore[arg-type]
     "control_reply: field 'detail' is 3"),
    (messages.RestorePlan(request_id=1, source=messages.RestoreSource.DISK, step=1, path="",
                          next_slot=0, slot_paths=["a", 2], note=""),  # type: ignore[list-item]
     "slot_paths", "restore_plan: field 'slot_paths' is ['a', 2]"),
])
def test_encode_refuses_a_value_its_field_cannot_hold_naming_the_field(
    message: messages.Message, field: str, text: str
) -> None:
    with pytest.raises(messages.MessageError) as caught:
        worker_codec.encode(message)

    assert caught.value.field == field
    assert str(caught.value).startswith(text)
