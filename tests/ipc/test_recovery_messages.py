"""The messages of process-level recovery: the worker leaving and rejoining generations, and
restore plans that take a rank's state from a data-parallel replica."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.ipc import messages

NEW_MESSAGES: list[messages.Message] = [
    messages.RecoverySupported(strategies=["retry", "recover-in-place", "recover"]),
    messages.RecoverySupported(strategies=[]),
    messages.LeftGeneration(generation=3, step=41, error="RuntimeError: UCE\n  line 2",
                            code="80E01801", time=12.5),
    messages.LeftGeneration(generation=0, step=None, error="", code="", time=0.0),
    messages.Abort(generation=7),
    messages.Rejoin(generation=8, master_addr="10.0.0.2", master_port=29517, restart_count=2),
    messages.RestorePlan(request_id=5, source=messages.RestoreSource.PEER, step=40, path="",
                         next_slot=0, slot_paths=["/dev/shm/a", ""], note="from rank 0",
                         peer=0, send_to=[]),
    messages.RestorePlan(request_id=6, source=messages.RestoreSource.MEMORY, step=40,
                         path="/dev/shm/r0-s1", next_slot=0, slot_paths=["", "/dev/shm/r0-s1"],
                         note="", peer=None, send_to=[1, 3]),
    messages.InjectFault(kind=messages.InjectionKind.MEMORY_ERROR, at_step=3),
    messages.InjectFault(kind=messages.InjectionKind.LINK_ERROR, at_step=None),
    messages.InjectRequest(request_id=9, rank=1, kind=messages.InjectionKind.DEVICE_ERROR,
                           at_step=12),
    messages.FaultInjected(kind=messages.InjectionKind.DEVICE_ERROR, step=12, time=3.0),
]


def _line(**body: Any) -> bytes:
    return json.dumps(body).encode() + b"\n"


@pytest.mark.parametrize("message", NEW_MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(message: messages.Message) -> None:
    decoded = messages.decode(messages.encode(message))

    assert decoded == message
    assert type(decoded) is type(message)


def test_wire_names() -> None:
    assert [cls.TYPE for cls in (messages.RecoverySupported, messages.LeftGeneration,
                                 messages.Abort, messages.Rejoin)] == [
        "recovery-supported", "left", "abort", "rejoin"]
    assert [str(kind) for kind in messages.InjectionKind] == [
        "crash", "hang", "exception", "memory-error", "link-error", "device-error"]
    assert messages.RestoreSource("peer") is messages.RestoreSource.PEER


def test_encode_writes_every_field() -> None:
    assert messages.encode(messages.Rejoin(generation=2, master_addr="h", master_port=29500,
                                           restart_count=1)) == (
        b'{"type":"rejoin","generation":2,"master_addr":"h","master_port":29500,'
        b'"restart_count":1}\n')
    assert messages.encode(messages.Abort(generation=4)) == b'{"type":"abort","generation":4}\n'


def test_restore_plan_defaults_to_no_peer_and_no_receivers() -> None:
    plan = messages.RestorePlan(request_id=1, source=messages.RestoreSource.DISK, step=2,
                                path="/ckpt", next_slot=0, slot_paths=[], note="")

    assert (plan.peer, plan.send_to) == (None, [])
    body = json.loads(messages.encode(plan))
    assert body["peer"] is None
    assert body["send_to"] == []


def test_a_peer_restore_plan_decodes_to_members() -> None:
    decoded = messages.decode(_line(type="restore-plan", request_id=1, source="peer", step=4,
                                    path="", next_slot=1, slot_paths=["a", "b"], note="",
                                    peer=2, send_to=[]))

    assert isinstance(decoded, messages.RestorePlan)
    assert decoded.source is messages.RestoreSource.PEER
    assert decoded.peer == 2


def test_left_generation_with_a_float_time_given_as_int() -> None:
    decoded = messages.decode(_line(type="left", generation=1, step=None, error="", code="",
                                    time=5))

    assert isinstance(decoded, messages.LeftGeneration)
    assert type(decoded.time) is float


@pytest.mark.parametrize(("body", "field", "text"), [
    ({"type": "recovery-supported", "strategies": "retry"}, "strategies",
     "recovery-supported: field 'strategies' is 'retry', expected list"),
    ({"type": "recovery-supported", "strategies": ["retry", 1]}, "strategies",
     "recovery-supported: field 'strategies' is 1, expected str"),
    ({"type": "left", "generation": 1, "step": "3", "error": "", "code": "", "time": 1.0},
     "step", "left: field 'step' is '3', expected int"),
    ({"type": "left", "generation": 1.0, "step": 3, "error": "", "code": "", "time": 1.0},
     "generation", "left: field 'generation' is 1.0, expected int"),
    ({"type": "left", "generation": 1, "step": 3, "error": None, "code": "", "time": 1.0},
     "error", "left: field 'error' is None, expected str"),
    ({"type": "left", "generation": 1, "step": 3, "error": "", "code": 80, "time": 1.0},
     "code", "left: field 'code' is 80, expected str"),
    ({"type": "abort", "generation": True}, "generation",
     "abort: field 'generation' is True, expected int"),
    ({"type": "rejoin", "generation": 1, "master_addr": "h", "master_port": "29500",
      "restart_count": 0},
     "master_port", "rejoin: field 'master_port' is '29500', expected int"),
    ({"type": "rejoin", "generation": 1, "master_addr": "h", "master_port": 29500,
      "restart_count": None},
     "restart_count", "rejoin: field 'restart_count' is None, expected int"),
])
def test_a_bad_field_type_names_the_field(body: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(**body))

    assert caught.value.field == field
    assert str(caught.value) == text


_PLAN = {"type": "restore-plan", "request_id": 1, "source": "peer", "step": 4, "path": "",
         "next_slot": 0, "slot_paths": [], "note": ""}


@pytest.mark.parametrize(("changes", "field", "text"), [
    ({"peer": "0", "send_to": []}, "peer", "restore-plan: field 'peer' is '0', expected int"),
    ({"peer": False, "send_to": []}, "peer", "restore-plan: field 'peer' is False, expected int"),
    ({"peer": None, "send_to": [1, "2"]}, "send_to",
     "restore-plan: field 'send_to' is '2', expected int"),
    ({"peer": None, "send_to": 1}, "send_to",
     "restore-plan: field 'send_to' is 1, expected list"),
    ({"peer": None, "send_to": None}, "send_to",
     "restore-plan: field 'send_to' is None, expected list"),
])
def test_a_bad_peer_field_names_it(changes: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(**_PLAN, **changes))

    assert caught.value.field == field
    assert str(caught.value) == text


def test_a_restore_plan_without_the_peer_fields_gets_their_defaults() -> None:
    # A sender that predates the peer fields: they are optional on the wire.
    decoded = messages.decode(_line(**dict(_PLAN, source="disk")))

    assert isinstance(decoded, messages.RestorePlan)
    assert (decoded.peer, decoded.send_to) == (None, [])


def test_a_restore_plan_with_only_one_peer_field() -> None:
    decoded = messages.decode(_line(**dict(_PLAN, send_to=[2, 3])))

    assert isinstance(decoded, messages.RestorePlan)
    assert (decoded.peer, decoded.send_to) == (None, [2, 3])


def test_defaulted_lists_are_not_shared_between_decoded_plans() -> None:
    first = messages.decode(_line(**_PLAN))
    second = messages.decode(_line(**_PLAN))

    assert isinstance(first, messages.RestorePlan)
    assert isinstance(second, messages.RestorePlan)
    first.send_to.append(9)
    assert second.send_to == []


@pytest.mark.parametrize("missing", ["generation", "master_addr", "master_port", "restart_count"])
def test_a_required_field_of_rejoin_is_still_required(missing: str) -> None:
    body = {"type": "rejoin", "generation": 1, "master_addr": "h", "master_port": 29500,
            "restart_count": 0}
    del body[missing]

    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(**body))

    assert caught.value.field == missing
    assert str(caught.value) == f"rejoin: missing field {missing!r}"


def test_a_bad_injection_kind_lists_the_new_ones() -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(type="inject", kind="memory_error", at_step=None))

    assert caught.value.field == "kind"
    assert str(caught.value) == (
        "inject: field 'kind' is 'memory_error', expected one of crash, hang, exception, "
        "memory-error, link-error, device-error")


def test_a_bad_restore_source_lists_peer_and_replica() -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(**dict(_PLAN, source="neighbour", peer=None, send_to=[])))

    assert caught.value.field == "source"
    assert str(caught.value) == ("restore-plan: field 'source' is 'neighbour', expected one of "
                                 "memory, peer, replica, disk, none")


def test_an_extra_field_on_abort_is_named() -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(_line(type="abort", generation=1, reason="x"))

    assert caught.value.field == "reason"


ints = st.integers(min_value=-(2**63), max_value=2**64)
texts = st.text()


@given(generation=ints, step=st.none() | ints, error=texts, code=texts,
       time=st.floats(allow_nan=False, allow_infinity=False))
def test_left_generation_round_trip_property(generation: int, step: int | None, error: str,
                                             code: str, time: float) -> None:
    message = messages.LeftGeneration(generation=generation, step=step, error=error, code=code,
                                      time=time)

    assert messages.decode(messages.encode(message)) == message


@given(strategies=st.lists(texts), generation=ints, port=ints, restarts=ints)
def test_recovery_messages_round_trip_property(strategies: list[str], generation: int, port: int,
                                               restarts: int) -> None:
    for message in (messages.RecoverySupported(strategies=strategies),
                    messages.Abort(generation=generation),
                    messages.Rejoin(generation=generation, master_addr=strategies[0]
                                    if strategies else "", master_port=port,
                                    restart_count=restarts)):
        assert messages.decode(messages.encode(message)) == message


@given(source=st.sampled_from(messages.RestoreSource), peer=st.none() | ints,
       send_to=st.lists(ints), slot_paths=st.lists(texts, max_size=2))
def test_restore_plan_round_trip_property(source: messages.RestoreSource, peer: int | None,
                                          send_to: list[int], slot_paths: list[str]) -> None:
    message = messages.RestorePlan(request_id=1, source=source, step=3, path="p", next_slot=1,
                                   slot_paths=slot_paths, note="n", peer=peer, send_to=send_to)

    decoded = messages.decode(messages.encode(message))

    assert decoded == message
    assert isinstance(decoded, messages.RestorePlan)
    assert decoded.source is source
