"""The wire schema between training processes, control clients and the node agent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.ipc import messages

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
    messages.StopAt(step=123),
    messages.RecoverySupported(strategies=["retry", "recover-in-place"]),
    messages.LeftGeneration(generation=2, step=17, error="DeviceError: device fault 80E01801",
                            code="80E01801", time=13.0),
    messages.LeftGeneration(generation=2, step=None, error="", code="", time=13.5),
    messages.Abort(generation=2),
    messages.Rejoin(generation=3, master_addr="127.0.0.1", master_port=29511,
                    restart_count=1),
    messages.SnapshotInterval(every=4, from_step=42),
    messages.RestorePlan(request_id=14, source=messages.RestoreSource.PEER, step=40, path="",
                         next_slot=0, slot_paths=["", ""], note="", peer=0, send_to=[]),
    messages.InjectRequest(request_id=1, rank=0, kind=messages.InjectionKind.CRASH, at_step=None),
    messages.ControlReply(request_id=1, ok=False, detail="rank 7 is not running (ünïcode ✓)"),
]


def _line(**body: Any) -> bytes:
    return json.dumps(body).encode() + b"\n"


def test_every_message_type_is_covered() -> None:
    covered = {type(message).TYPE for message in EVERY_MESSAGE}
    declared = {
        getattr(messages, name).TYPE
        for name in messages.__all__
        if isinstance(getattr(messages, name), type)
        and issubclass(getattr(messages, name), messages.Message)
        and getattr(messages, name) is not messages.Message
    }
    assert covered == declared
    assert len(declared) == 22


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_round_trip(message: messages.Message) -> None:
    line = messages.encode(message)

    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    decoded = messages.decode(line)
    assert decoded == message
    assert type(decoded) is type(message)


def test_encode_is_one_compact_json_object_with_type() -> None:
    line = messages.encode(messages.StepMark(step=3, phase=messages.StepPhase.END, time=1.5))

    assert line == b'{"type":"step","step":3,"phase":"end","time":1.5}\n'


def test_decode_converts_enums_to_their_members() -> None:
    decoded = messages.decode(_line(type="restore-plan", request_id=1, source="disk", step=4,
                                    path="/ckpt/4", next_slot=1, slot_paths=["a", "b"], note=""))

    assert isinstance(decoded, messages.RestorePlan)
    assert decoded.source is messages.RestoreSource.DISK


def test_decode_accepts_an_int_for_a_float_field_and_makes_it_a_float() -> None:
    decoded = messages.decode(_line(type="stop-requested", time=5))

    assert isinstance(decoded, messages.StopRequested)
    assert decoded.time == 5.0
    assert type(decoded.time) is float


def test_decode_accepts_line_without_newline() -> None:
    assert messages.decode(b'{"type":"stop-at","step":2}') == messages.StopAt(step=2)


finite_floats = st.floats(allow_nan=False, allow_infinity=False)
ints = st.integers(min_value=-(2**63), max_value=2**64)


@given(step=ints, phase=st.sampled_from(messages.StepPhase), time=finite_floats)
def test_step_mark_round_trip_property(step: int, phase: messages.StepPhase, time: float) -> None:
    message = messages.StepMark(step=step, phase=phase, time=time)

    decoded = messages.decode(messages.encode(message))

    assert decoded == message
    assert isinstance(decoded, messages.StepMark)
    assert decoded.phase is phase


@given(step=ints, slot=st.integers(0, 1), seq=ints, nbytes=st.integers(0, 2**50),
       copy_seconds=finite_floats, time=finite_floats)
def test_snapshot_committed_round_trip_property(
    step: int, slot: int, seq: int, nbytes: int, copy_seconds: float, time: float
) -> None:
    message = messages.SnapshotCommitted(step=step, slot=slot, seq=seq, nbytes=nbytes,
                                         copy_seconds=copy_seconds, time=time)

    assert messages.decode(messages.encode(message)) == message


@given(request_id=ints, rank=ints, kind=st.sampled_from(messages.InjectionKind),
       at_step=st.none() | ints)
def test_inject_request_round_trip_property(
    request_id: int, rank: int, kind: messages.InjectionKind, at_step: int | None
) -> None:
    message = messages.InjectRequest(request_id=request_id, rank=rank, kind=kind,
                                     at_step=at_step)

    decoded = messages.decode(messages.encode(message))

    assert decoded == message
    assert isinstance(decoded, messages.InjectRequest)
    assert decoded.kind is kind
    assert decoded.at_step == at_step


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [b"not json", b'{"type": "step"', b"\xff\xfe\x00garbage", b""])
def test_decode_rejects_what_is_not_json(line: bytes) -> None:
    with pytest.raises(messages.MessageError, match="not a JSON message") as caught:
        messages.decode(line)

    assert caught.value.field is None
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("line", "kind"), [(b"[1, 2]", "list"), (b'"step"', "str"),
                                            (b"42", "int"), (b"null", "NoneType")])
def test_decode_rejects_json_that_is_not_an_object(line: bytes, kind: str) -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(line)

    assert str(caught.value) == f"a message must be a JSON object, got {kind}"
    assert caught.value.field is None


@pytest.mark.parametrize(("body", "shown"), [
    ({"type": "heartbeat", "step": 1}, "'heartbeat'"),
    ({"step": 1}, "None"),
    ({"type": 7}, "7"),
    ({"type": ""}, "''"),
])
def test_decode_rejects_unknown_type(body: dict[str, Any], shown: str) -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(**body))

    assert str(caught.value) == f"unknown message type {shown}"
    assert caught.value.field == "type"


def test_decode_rejects_missing_field_naming_it() -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(type="step", step=1, time=2.0))

    assert caught.value.field == "phase"
    assert str(caught.value) == "step: missing field 'phase'"


def test_missing_optional_field_is_still_missing() -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(type="inject", kind="crash"))

    assert caught.value.field == "at_step"
    assert "'at_step'" in str(caught.value)


def test_decode_rejects_extra_field_naming_it() -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(type="stop-at", step=1, rank=0))

    assert caught.value.field == "rank"
    assert str(caught.value) == "stop-at: unknown field(s) rank"


def test_decode_names_the_first_of_several_extra_fields() -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(type="stop-at", step=1, zeta=0, alpha=1))

    assert caught.value.field == "alpha"
    assert "unknown field(s) alpha, zeta" in str(caught.value)


@pytest.mark.parametrize(("body", "field", "text"), [
    ({"type": "stop-at", "step": True}, "step", "stop-at: field 'step' is True, expected int"),
    ({"type": "stop-at", "step": "5"}, "step", "stop-at: field 'step' is '5', expected int"),
    ({"type": "stop-at", "step": 5.0}, "step", "stop-at: field 'step' is 5.0, expected int"),
    ({"type": "stop-at", "step": None}, "step", "stop-at: field 'step' is None, expected int"),
    ({"type": "stop-requested", "time": False}, "time",
     "stop-requested: field 'time' is False, expected float"),
    ({"type": "stop-requested", "time": "1.5"}, "time",
     "stop-requested: field 'time' is '1.5', expected float"),
    ({"type": "control-reply", "request_id": 1, "ok": 1, "detail": ""}, "ok",
     "control-reply: field 'ok' is 1, expected bool"),
    ({"type": "control-reply", "request_id": 1, "ok": True, "detail": 3}, "detail",
     "control-reply: field 'detail' is 3, expected str"),
    ({"type": "inject", "kind": "crash", "at_step": "3"}, "at_step",
     "inject: field 'at_step' is '3', expected int"),
    ({"type": "inject", "kind": "crash", "at_step": False}, "at_step",
     "inject: field 'at_step' is False, expected int"),
])
def test_decode_rejects_wrong_type_naming_the_field(
    body: dict[str, Any], field: str, text: str
) -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(**body))

    assert caught.value.field == field
    assert str(caught.value) == text


def test_decode_rejects_a_list_field_that_is_not_a_list() -> None:
    body = {"type": "restore-plan", "request_id": 1, "source": "disk", "step": 4,
            "path": "", "next_slot": 1, "slot_paths": "a", "note": ""}

    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(**body))

    assert caught.value.field == "slot_paths"
    assert "field 'slot_paths' is 'a'" in str(caught.value)


def test_decode_rejects_a_wrong_list_element_naming_the_field() -> None:
    body = {"type": "restore-plan", "request_id": 1, "source": "disk", "step": 4,
            "path": "", "next_slot": 1, "slot_paths": ["a", 2], "note": ""}

    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(**body))

    assert caught.value.field == "slot_paths"
    assert str(caught.value) == "restore-plan: field 'slot_paths' is 2, expected str"


@pytest.mark.parametrize(("body", "field", "text"), [
    ({"type": "step", "step": 1, "phase": "middle", "time": 0.0}, "phase",
     "step: field 'phase' is 'middle', expected one of begin, end"),
    ({"type": "step", "step": 1, "phase": "BEGIN", "time": 0.0}, "phase",
     "step: field 'phase' is 'BEGIN', expected one of begin, end"),
    ({"type": "inject", "kind": "segfault", "at_step": None}, "kind",
     "inject: field 'kind' is 'segfault', expected one of crash, hang, exception, "
     "memory-error, link-error, device-error"),
    ({"type": "activity", "kind": 1, "active": True, "time": 0.0}, "kind",
     "activity: field 'kind' is 1, expected one of checkpoint, restore, user"),
    ({"type": "activity", "kind": ["user"], "active": True, "time": 0.0}, "kind",
     "activity: field 'kind' is ['user'], expected one of checkpoint, restore, user"),
])
def test_decode_rejects_bad_enum_value_listing_the_allowed_ones(
    body: dict[str, Any], field: str, text: str
) -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(**body))

    assert caught.value.field == field
    assert str(caught.value) == text


def test_a_snapshot_interval_below_one_step_is_refused_naming_the_field() -> None:
    with pytest.raises(messages.MessageError, match="'every' is 0") as raised:
        messages.decode(_line(type="snapshot-interval", every=0, from_step=3))
    assert raised.value.field == "every"
