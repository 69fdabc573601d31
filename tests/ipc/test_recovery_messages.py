"""The messages of process-level recovery: the worker leaving and rejoining generations, and
restore plans that take a rank's state from a data-parallel replica."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec
from trainguard.proto import worker_pb2 as pb

NEW_MESSAGES: list[messages.Message] = [
    messages.RecoverySupported(strategies=["retry", "recover-in-place", "recover"]),
    messages.RecoverySupported(strategies=[]),
    messages.LeftGeneration(generation=3, step=41, error="RuntimeError: UCE\n  line 2",
                            code="80E01801", time=12.5),
    messages.LeftGeneration(generation=0, step=None, error="", code="", time=0.0),
    messages.LeftGeneration(generation=0, step=0, error="", code="", time=0.0),
    messages.Abort(generation=7),
    messages.Abort(generation=0),
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


def _envelope(**body: Any) -> bytes:
    return pb.Envelope(version=versioned.PROTOCOL_VERSION, **body).SerializeToString()


@pytest.mark.parametrize("message", NEW_MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(message: messages.Message) -> None:
    decoded = worker_codec.decode(worker_codec.encode(message))

    assert decoded == message
    assert type(decoded) is type(message)


def test_wire_names() -> None:
    assert [cls.TYPE for cls in (messages.RecoverySupported, messages.LeftGeneration,
                                 messages.Abort, messages.Rejoin)] == [
        "recovery_supported", "left", "abort", "rejoin"]
    assert [str(kind) for kind in messages.InjectionKind] == [
        "crash", "hang", "exception", "memory-error", "link-error", "device-error"]
    assert messages.RestoreSource("peer") is messages.RestoreSource.PEER


def test_encode_writes_every_field_by_name() -> None:
    rejoin = pb.Envelope.FromString(worker_codec.encode(messages.Rejoin(
        generation=2, master_addr="h", master_port=29500, restart_count=1)))

    assert rejoin.WhichOneof("body") == "rejoin"
    assert rejoin.rejoin == pb.Rejoin(generation=2, master_addr="h", master_port=29500,
                                      restart_count=1)


def test_restore_plan_defaults_to_no_peer_and_no_receivers() -> None:
    plan = messages.RestorePlan(request_id=1, source=messages.RestoreSource.DISK, step=2,
                                path="/ckpt", next_slot=0, slot_paths=[], note="")

    assert (plan.peer, plan.send_to) == (None, [])
    body = pb.Envelope.FromString(worker_codec.encode(plan)).restore_plan
    assert not body.HasField("peer")
    assert list(body.send_to) == []


def test_a_peer_restore_plan_decodes_to_members() -> None:
    decoded = worker_codec.decode(_envelope(restore_plan=pb.RestorePlan(
        request_id=1, source="peer", step=4, slot_paths=["a", "b"], peer=2)))

    assert isinstance(decoded, messages.RestorePlan)
    assert decoded.source is messages.RestoreSource.PEER
    assert decoded.peer == 2


def test_a_left_generation_at_no_step_differs_from_one_at_step_zero() -> None:
    def left(step: int | None) -> int | None:
        decoded = worker_codec.decode(worker_codec.encode(messages.LeftGeneration(
            generation=1, step=step, error="", code="", time=5.0)))
        assert isinstance(decoded, messages.LeftGeneration)
        return decoded.step

    assert [left(None), left(0)] == [None, 0]


def test_defaulted_lists_are_not_shared_between_decoded_plans() -> None:
    data = _envelope(restore_plan=pb.RestorePlan(request_id=1, source="peer", step=4))
    first = worker_codec.decode(data)
    second = worker_codec.decode(data)

    assert isinstance(first, messages.RestorePlan)
    assert isinstance(second, messages.RestorePlan)
    first.send_to.append(9)
    assert second.send_to == []


def test_a_bad_injection_kind_lists_the_new_ones() -> None:
    with pytest.raises(messages.MessageError) as caught:
        worker_codec.decode(_envelope(inject=pb.InjectFault(kind="memory_error")))

    assert caught.value.field == "kind"
    assert str(caught.value) == (
        "inject: field 'kind' is 'memory_error', expected one of crash, hang, exception, "
        "memory-error, link-error, device-error")


def test_a_bad_restore_source_lists_peer_and_replica() -> None:
    with pytest.raises(messages.MessageError) as caught:
        worker_codec.decode(_envelope(restore_plan=pb.RestorePlan(source="neighbour")))

    assert caught.value.field == "source"
    assert str(caught.value) == ("restore_plan: field 'source' is 'neighbour', expected one of "
                                 "memory, peer, replica, disk, none")


@pytest.mark.parametrize(("message", "field"), [
    (messages.LeftGeneration(generation=1, step=2**63, error="", code="", time=0.0), "step"),
    (messages.Rejoin(generation=1, master_addr="h", master_port=2**31, restart_count=0),
     "master_port"),
    (messages.RestorePlan(request_id=1, source=messages.RestoreSource.PEER, step=4, path="",
                          next_slot=0, slot_paths=[], note="", peer=2**31), "peer"),
    (messages.RestorePlan(request_id=1, source=messages.RestoreSource.PEER, step=4, path="",
                          next_slot=0, slot_paths=[], note="", send_to=[1, -(2**31) - 1]),
     "send_to"),
])
def test_a_value_out_of_its_fields_range_names_the_field(message: messages.Message,
                                                         field: str) -> None:
    with pytest.raises(messages.MessageError, match="Value out of range") as caught:
        worker_codec.encode(message)

    assert caught.value.field == field


int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
texts = st.text()


@given(generation=int64s, step=st.none() | int64s, error=texts, code=texts,
       time=st.floats(allow_nan=False))
def test_left_generation_round_trip_property(generation: int, step: int | None, error: str,
                                             code: str, time: float) -> None:
    message = messages.LeftGeneration(generation=generation, step=step, error=error, code=code,
                                      time=time)

    assert worker_codec.decode(worker_codec.encode(message)) == message


@given(strategies=st.lists(texts), generation=int64s, port=int32s, restarts=int64s)
def test_recovery_messages_round_trip_property(strategies: list[str], generation: int, port: int,
                                               restarts: int) -> None:
    for message in (messages.RecoverySupported(strategies=strategies),
                    messages.Abort(generation=generation),
                    messages.Rejoin(generation=generation, master_addr=strategies[0]
                                    if strategies else "", master_port=port,
                                    restart_count=restarts)):
        assert worker_codec.decode(worker_codec.encode(message)) == message


@given(source=st.sampled_from(messages.RestoreSource), peer=st.none() | int32s,
       send_to=st.lists(int32s), slot_paths=st.lists(texts, max_size=2))
def test_restore_plan_round_trip_property(source: messages.RestoreSource, peer: int | None,
                                          send_to: list[int], slot_paths: list[str]) -> None:
    message = messages.RestorePlan(request_id=1, source=source, step=3, path="p", next_slot=1,
                                   slot_paths=slot_paths, note="n", peer=peer, send_to=send_to)

    decoded = worker_codec.decode(worker_codec.encode(message))

    assert decoded == message
    assert isinstance(decoded, messages.RestorePlan)
    assert decoded.source is source
