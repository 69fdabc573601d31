"""Public fault messages: their checks, the rate limit per sender, the active faults (SPEC D8)."""

from __future__ import annotations

import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.faults.device.device_events import Assertion
from trainguard.faults.levels import Level
from trainguard.faults.public.public_faults import PublicFaultConfig
from trainguard.faults.public.public_messages import (
    Influence,
    NodePublicFault,
    PublicFault,
    PublicFaultCache,
    PublicFaultMessage,
    PublicFaultType,
    RateLimiter,
    validate_message,
)

CONFIG = PublicFaultConfig.default()
JAN_2025_MS = 1_735_689_600_000
"""2025-01-01T00:00:00Z in milliseconds: the earliest time a message may carry."""
ABSENT = object()
"""A field value that removes the field."""


def fault_document(**changes: object) -> dict[str, object]:
    document: dict[str, object] = {
        "faultId": "fault-0001", "faultType": "Network", "faultCode": "220001001",
        "faultTime": JAN_2025_MS, "assertion": "occur", "faultLocation": {"port": "1"},
        "influence": [{"nodeName": "node-1", "deviceIds": [0, 1]}],
        "description": "HCCS link down"}
    document.update(changes)
    return {key: value for key, value in document.items() if value is not ABSENT}


def message_document(*faults: dict[str, object], **changes: object) -> dict[str, object]:
    document: dict[str, object] = {
        "id": "message-0001", "timestamp": JAN_2025_MS, "version": "1.0", "resource": "CCAE",
        "faults": list(faults) or [fault_document()]}
    document.update(changes)
    return {key: value for key, value in document.items() if value is not ABSENT}


def influence(**changes: object) -> list[dict[str, object]]:
    entry: dict[str, object] = {"nodeName": "node-1", "deviceIds": [0], **changes}
    return [{key: value for key, value in entry.items() if value is not ABSENT}]


def checked(document: object, **options: Any) -> PublicFaultMessage:
    message, reasons = validate_message(document, config=CONFIG, **options)
    assert message is not None, reasons
    return message


def rejection(document: object) -> list[str]:
    message, reasons = validate_message(document, config=CONFIG)
    assert message is None
    return reasons


def fault_kept(**changes: object) -> bool:
    """Whether a fault with these changes is kept, beside a valid one."""
    message = checked(message_document(fault_document(faultId="other-fault"),
                                       fault_document(**changes)))
    return len(message.faults) == 2


# --- a valid message ----------------------------------------------------------------------------

def test_a_valid_message_is_read_in_full() -> None:
    message, reasons = validate_message(message_document(), config=CONFIG)

    assert reasons == []
    assert message == PublicFaultMessage(
        id="message-0001", timestamp_ms=JAN_2025_MS, version="1.0", resource="CCAE",
        faults=(PublicFault(
            fault_id="fault-0001", fault_type=PublicFaultType.NETWORK, fault_code="220001001",
            fault_time_ms=JAN_2025_MS, assertion=Assertion.OCCUR,
            location=types.MappingProxyType({"port": "1"}),
            influence=(Influence("node-1", "", (0, 1)),), description="HCCS link down",
            level=Level.SEPARATE_NPU),))


def test_a_nodeds_storage_fault_is_pre_separate() -> None:
    # NodeD reports DTFS process faults as resource dtfsStorage, type Node (NOTES §2.5).
    message = checked(message_document(fault_document(faultType="Node", faultCode="110001022"),
                                       resource="dtfsStorage"))

    assert message.faults[0].level is Level.PRE_SEPARATE_NPU


def test_unknown_keys_are_ignored_and_absent_optional_fields_are_empty() -> None:
    fault = fault_document(faultLocation=ABSENT, description=None, extra="x")

    message = checked(message_document(fault, extra={"nested": True}))

    assert message.faults[0].location == {}
    assert message.faults[0].description == ""


# --- the message's own fields: a failing one rejects the message --------------------------------

@pytest.mark.parametrize(("changes", "reason"), [
    ({"id": "a" * 7}, "id: 'aaaaaaa' must be 8 to 128 letters, digits, '-', '_' or '.'"),
    ({"id": "a" * 129}, f"id: '{'a' * 56}... must"),
    ({"id": "message 0001"}, "id: 'message 0001' must be"),
    ({"id": "message/0001"}, "id: 'message/0001' must be"),
    ({"id": "message-0001\n"}, "id: 'message-0001\\n' must be"),
    ({"id": "message-000\u0661"}, "id: 'message-000\u0661' must be"),
    ({"id": 12345678}, "id: 12345678 is not a string"),
    ({"id": ABSENT}, "id: '' must be"),
    ({"timestamp": JAN_2025_MS - 1}, "timestamp: 1735689599999 is before 2025-01-01T00:00:00Z"),
    ({"timestamp": 10**13}, "timestamp: 10000000000000 is not 13 digits of milliseconds"),
    ({"timestamp": 10**12 - 1}, "timestamp: 999999999999 is not 13 digits"),
    ({"timestamp": JAN_2025_MS // 1000}, "timestamp: 1735689600 is not 13 digits"),
    ({"timestamp": float(JAN_2025_MS)}, "timestamp: 1735689600000.0 is not 13 digits"),
    ({"timestamp": str(JAN_2025_MS)}, "timestamp: '1735689600000' is not 13 digits"),
    ({"timestamp": True}, "timestamp: True is not 13 digits"),
    ({"timestamp": -JAN_2025_MS}, "timestamp: -1735689600000 is not 13 digits"),
    ({"timestamp": ABSENT}, "timestamp: 0 is not 13 digits"),
    ({"version": "1"}, "version: '1' is not 1.0"),
    ({"version": "1.00"}, "version: '1.00' is not 1.0"),
    ({"version": 1.0}, "version: 1.0 is not a string"),
    ({"resource": "ccae"}, "resource: 'ccae' is not an allowed sender (publicFaultResource: "
                           "CCAE, Netmind, dpcStorage, dtfsStorage, fd-online, pingmesh)"),
    ({"resource": ABSENT}, "resource: '' is not an allowed sender"),
    ({"faults": []}, "faults: 0 entries; there must be 1 to 100"),
    ({"faults": [fault_document()] * 101}, "faults: 101 entries; there must be 1 to 100"),
    ({"faults": ABSENT}, "faults: 0 entries"),
    ({"faults": {"0": fault_document()}}, "faults: {'0': {"),
])
def test_a_message_failing_a_check_is_rejected_with_the_field_named(
        changes: dict[str, object], reason: str) -> None:
    reasons = rejection(message_document(**changes))

    assert len(reasons) == 1
    assert reasons[0].startswith(reason)
    assert reasons[0].endswith("; message rejected")


@pytest.mark.parametrize("document", [None, [], "message", 3, [1, 2]])
def test_a_message_that_is_not_an_object_is_rejected(document: object) -> None:
    assert rejection(document) == [f"message: {document!r} is not a JSON object; message "
                                   "rejected"]


@pytest.mark.parametrize("changes", [
    {"id": "a" * 8}, {"id": "a" * 128}, {"id": "Az09-_.x"},
    {"timestamp": JAN_2025_MS}, {"timestamp": 10**13 - 1},
    *({"resource": resource} for resource in sorted(CONFIG.resources)),
    {"faults": [fault_document(faultId=f"fault-{index:04d}") for index in range(100)]},
])
def test_a_message_at_a_limit_is_accepted(changes: dict[str, object]) -> None:
    checked(message_document(**changes))


# --- a fault's fields: a failing one drops the fault --------------------------------------------

def test_each_failing_fault_is_dropped_with_its_own_reason() -> None:
    message, reasons = validate_message(message_document(
        fault_document(faultId="fault-0a", faultCode="999999999"),
        fault_document(faultId="fault-0b"),
        fault_document(faultId="fault-0c", influence=influence(deviceIds=[32]))), config=CONFIG)

    assert message is not None
    assert [fault.fault_id for fault in message.faults] == ["fault-0b"]
    assert reasons == [
        "faults[0].faultCode: 999999999 is not a configured public fault code; fault dropped",
        "faults[2].influence[0].deviceIds: 32 is outside 0..31; fault dropped",
    ]


def test_a_message_left_without_a_fault_is_rejected() -> None:
    reasons = rejection(message_document(faults=[fault_document(faultType="Chip"), "not a fault"]))

    assert reasons == [
        "faults[0].faultType: 'Chip' is not one of NPU, Node, Network, Storage; fault dropped",
        "faults[1]: 'not a fault' is not a JSON object; fault dropped",
        "faults: no valid fault is left; message rejected",
    ]


@pytest.mark.parametrize(("changes", "reason"), [
    ({"faultId": "short"}, "faults[1].faultId: 'short' must be 8 to 128 letters"),
    ({"faultId": "f" * 129}, "faults[1].faultId:"),
    ({"faultId": ABSENT}, "faults[1].faultId: '' must be"),
    ({"faultType": "npu"}, "faults[1].faultType: 'npu' is not one of NPU, Node, Network, "
                           "Storage"),
    ({"faultType": ABSENT}, "faults[1].faultType: '' is not one of"),
    ({"faultCode": "22000100"}, "faults[1].faultCode: '22000100' must have 9 characters"),
    ({"faultCode": "2200010010"}, "faults[1].faultCode: '2200010010' must have 9 characters"),
    ({"faultCode": "999999999"}, "faults[1].faultCode: 999999999 is not a configured public "
                                 "fault code"),
    ({"faultCode": "420001001"}, "is not a configured public fault code"),
    ({"faultCode": 220001001}, "faults[1].faultCode: 220001001 is not a string"),
    ({"faultTime": JAN_2025_MS - 1}, "faults[1].faultTime: 1735689599999 is before "
                                     "2025-01-01T00:00:00Z"),
    ({"faultTime": 10**13}, "faults[1].faultTime: 10000000000000 is not 13 digits"),
    ({"faultTime": JAN_2025_MS // 1000}, "faults[1].faultTime: 1735689600 is not 13 digits"),
    ({"assertion": "Occur"}, "faults[1].assertion: 'Occur' is not one of occur, recover, once"),
    ({"assertion": ABSENT}, "faults[1].assertion: '' is not one of"),
    ({"faultLocation": {f"k{index}": "v" for index in range(11)}},
     "faults[1].faultLocation: 11 entries; at most 10"),
    ({"faultLocation": {"k" * 17: "v"}}, "faults[1].faultLocation: 'kkkkkkkkkkkkkkkkk': a key "
                                         "has at most 16 bytes and a value at most 128"),
    ({"faultLocation": {"\u00e9" * 9: "v"}}, "a key has at most 16 bytes"),
    ({"faultLocation": {"k": "v" * 129}}, "a key has at most 16 bytes and a value at most 128"),
    ({"faultLocation": {"k": 1}}, "faults[1].faultLocation: 'k': 1 is not a string entry"),
    ({"faultLocation": ["k"]}, "faults[1].faultLocation: ['k'] is not a JSON object"),
    ({"influence": []}, "faults[1].influence: 0 entries; there must be 1 to 1000"),
    ({"influence": influence() * 1001}, "faults[1].influence: 1001 entries"),
    ({"influence": ABSENT}, "faults[1].influence: 0 entries"),
    ({"influence": ["node-1"]}, "faults[1].influence[0]: 'node-1' is not a JSON object"),
    ({"influence": influence(nodeName="Node-1")},
     "faults[1].influence[0].nodeName: 'Node-1' is not a node name (lower-case letters, "
     "digits, '-' and '.', at most 253)"),
    ({"influence": influence(nodeName="-node")}, "'-node' is not a node name"),
    ({"influence": influence(nodeName="node-")}, "'node-' is not a node name"),
    ({"influence": influence(nodeName="node_1")}, "'node_1' is not a node name"),
    ({"influence": influence(nodeName="a" * 254)}, "is not a node name"),
    ({"influence": influence(nodeName=ABSENT)}, "faults[1].influence[0].nodeSN: nodeName is "
                                                "empty and '' is not the serial number of a "
                                                "known node"),
    ({"influence": influence(nodeName="", nodeSN="SN-unknown")}, "'SN-unknown' is not the "
                                                                 "serial number"),
    ({"influence": influence(deviceIds=[])}, "faults[1].influence[0].deviceIds: 0 entries; "
                                             "there must be 1 to 32"),
    ({"influence": influence(deviceIds=[*range(32), 0])}, "deviceIds: 33 entries"),
    ({"influence": influence(deviceIds=[-1])}, "deviceIds: -1 is outside 0..31"),
    ({"influence": influence(deviceIds=[32])}, "deviceIds: 32 is outside 0..31"),
    ({"influence": influence(deviceIds=[True])}, "deviceIds: True is outside 0..31"),
    ({"influence": influence(deviceIds=["0"])}, "deviceIds: '0' is outside 0..31"),
    ({"influence": influence(deviceIds=[3, 3])}, "deviceIds: [3, 3] has duplicates"),
    ({"influence": influence(deviceIds=ABSENT)}, "deviceIds: 0 entries"),
    ({"influence": [*influence(), *influence(deviceIds=[40])]}, "influence[1].deviceIds: 40"),
    ({"description": "d" * 513}, "faults[1].description: 'ddddddddddddddddddddddddddddddddddd"
                                 "ddddddddddddddddddddd... must be at most 512 printable "
                                 "characters"),
    ({"description": "line\nbreak"}, "must be at most 512 printable characters"),
    ({"description": "tab\there"}, "must be at most 512 printable characters"),
    ({"description": "bell\x07"}, "must be at most 512 printable characters"),
    ({"description": 5}, "faults[1].description: 5 is not a string"),
])
def test_a_fault_failing_a_check_is_dropped_with_the_field_named(
        changes: dict[str, object], reason: str) -> None:
    message, reasons = validate_message(message_document(
        fault_document(faultId="other-fault"), fault_document(**changes)), config=CONFIG)

    assert message is not None
    assert [fault.fault_id for fault in message.faults] == ["other-fault"]
    assert len(reasons) == 1
    assert reason in reasons[0]
    assert reasons[0].startswith("faults[1]")
    assert reasons[0].endswith("; fault dropped")


@pytest.mark.parametrize("changes", [
    {"faultId": "f" * 8}, {"faultId": "f" * 128},
    *({"faultType": fault_type.value} for fault_type in PublicFaultType),
    *({"assertion": assertion.value} for assertion in Assertion),
    {"faultCode": "110001022", "faultType": "NPU"},  # the type need not match digit 1
    {"faultTime": JAN_2025_MS}, {"faultTime": 10**13 - 1},
    {"faultLocation": {f"key{index}": "v" for index in range(10)}},
    {"faultLocation": {"k" * 16: "v" * 128}},
    {"faultLocation": {"\u00e9" * 8: "\u00e9" * 64}},  # 16 and 128 bytes
    {"faultLocation": {}},
    {"influence": influence() * 1000},
    {"influence": influence(nodeName="a")},
    {"influence": influence(nodeName="a" * 253)},
    {"influence": influence(nodeName="rack1.node-2.example")},
    {"influence": influence(deviceIds=[31])},
    {"influence": influence(deviceIds=list(range(32)))},
    {"description": "d" * 512},
    {"description": ""},
    {"description": "spaces are fine, and 故障 too"},
])
def test_a_fault_at_a_limit_is_kept(changes: dict[str, object]) -> None:
    assert fault_kept(**changes)


def test_a_node_may_be_given_by_its_serial_number() -> None:
    document = message_document(fault_document(influence=influence(nodeName=ABSENT,
                                                                   nodeSN="SN-0042")))

    message = checked(document, node_names_by_sn={"SN-0042": "node-42"})

    assert message.faults[0].influence == (Influence("node-42", "SN-0042", (0,)),)


def test_a_node_name_wins_over_a_serial_number() -> None:
    document = message_document(fault_document(influence=influence(nodeSN="SN-0042")))

    message = checked(document, node_names_by_sn={"SN-0042": "node-42"})

    assert message.faults[0].influence == (Influence("node-1", "", (0,)),)


def test_an_empty_serial_number_names_no_node() -> None:
    message, reasons = validate_message(
        message_document(fault_document(influence=influence(nodeName="", nodeSN=""))),
        config=CONFIG, node_names_by_sn={"": "node-0"})

    assert message is None
    assert "nodeSN: nodeName is empty" in reasons[0]


def test_the_level_comes_from_the_configuration_given() -> None:
    config, _ = PublicFaultConfig.from_document(
        {"publicFaultCode": {"NotHandleFaultCodes": ["220001001"]},
         "publicFaultResource": ["CCAE"]}, file="custom.json")

    message, _ = validate_message(message_document(), config=config)

    assert message is not None
    assert message.faults[0].level is Level.NOT_HANDLE_FAULT


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20)
FIELD = st.sampled_from(["id", "timestamp", "version", "resource", "faults", "faultId",
                         "faultType", "faultCode", "faultTime", "assertion", "faultLocation",
                         "influence", "description", "nodeName", "nodeSN", "deviceIds"])


@given(JSON)
def test_validation_never_raises_on_any_json(document: object) -> None:
    message, reasons = validate_message(document, config=CONFIG)

    assert (message is None) == any(reason.endswith("message rejected") for reason in reasons)


@settings(max_examples=200)
@given(FIELD, JSON, st.booleans())
def test_validation_never_raises_when_a_field_holds_any_json(field: str, value: object,
                                                              in_influence: bool) -> None:
    fault = fault_document()
    if in_influence:
        fault["influence"] = [{"nodeName": "node-1", "deviceIds": [0], field: value}]
    else:
        fault[field] = value
    document = message_document(fault_document(faultId="other-fault"), fault, **(
        {field: value} if field in ("id", "timestamp", "version", "resource") else {}))

    message, reasons = validate_message(document, config=CONFIG)

    if message is not None:
        assert len(message.faults) + len(reasons) == 2


# --- the rate limit -----------------------------------------------------------------------------

def test_a_sender_gets_100_messages_in_a_second_and_no_more() -> None:
    limiter = RateLimiter(["CCAE"])

    assert all(limiter.allow("CCAE", 0.0) for _ in range(100))
    assert not limiter.allow("CCAE", 0.0)
    assert not limiter.allow("CCAE", 0.999)
    assert all(limiter.allow("CCAE", 1.0) for _ in range(100))
    assert not limiter.allow("CCAE", 1.0)


def test_the_window_slides_message_by_message() -> None:
    limiter = RateLimiter(["CCAE"])
    assert all(limiter.allow("CCAE", index / 100) for index in range(100))  # 0.00 .. 0.99

    assert limiter.allow("CCAE", 1.0)  # the one of 0.00 has left the window
    assert not limiter.allow("CCAE", 1.0)
    assert limiter.allow("CCAE", 1.01)


def test_refused_messages_do_not_count() -> None:
    limiter = RateLimiter(["CCAE"])
    for _ in range(500):
        limiter.allow("CCAE", 0.5)

    assert sum(limiter.allow("CCAE", 1.5) for _ in range(200)) == 100


def test_each_sender_has_its_own_limit() -> None:
    limiter = RateLimiter(["CCAE", "pingmesh"])
    for _ in range(100):
        limiter.allow("CCAE", 0.0)

    assert limiter.allow("pingmesh", 0.0)
    assert not limiter.allow("CCAE", 0.0)


def test_a_sender_not_allowed_is_refused() -> None:
    assert not RateLimiter(["CCAE"]).allow("someone", 0.0)


# --- the active faults --------------------------------------------------------------------------

def send(cache: PublicFaultCache, now: float, assertion: str = "occur", *,
         fault_id: str = "fault-0001", resource: str = "CCAE",
         nodes: tuple[str, ...] = ("node-1",)) -> list[str]:
    fault = fault_document(faultId=fault_id, assertion=assertion,
                           influence=[{"nodeName": node, "deviceIds": [0, 1]} for node in nodes])
    return cache.apply(checked(message_document(fault, resource=resource)), now)


def active(cache: PublicFaultCache, node: str = "node-1") -> list[tuple[str, str]]:
    return [(fault.resource, fault.fault_id) for fault in cache.current(node)]


def test_an_occurred_fault_is_active_with_its_level_and_devices() -> None:
    cache = PublicFaultCache()

    assert send(cache, 10.0) == []

    assert cache.current("node-1") == [NodePublicFault(
        resource="CCAE", fault_id="fault-0001", fault_type=PublicFaultType.NETWORK,
        fault_code="220001001", level=Level.SEPARATE_NPU, fault_time_ms=JAN_2025_MS,
        device_ids=(0, 1))]
    assert cache.nodes() == ["node-1"]
    assert cache.current("node-2") == []
    assert cache.next_expiry() is None


@pytest.mark.parametrize("delay", [5.0, 5.001, 3600.0])
def test_a_recover_5_seconds_or_more_after_the_occur_removes_it_at_once(delay: float) -> None:
    cache = PublicFaultCache()
    send(cache, 10.0)

    send(cache, 10.0 + delay, "recover")

    assert active(cache) == []
    assert cache.nodes() == []


def test_an_occur_is_kept_5_seconds_before_its_recover_takes_effect() -> None:
    cache = PublicFaultCache()
    send(cache, 10.0)
    send(cache, 12.0, "recover")

    assert cache.next_expiry() == 15.0
    assert not cache.expire(14.999)
    assert active(cache) == [("CCAE", "fault-0001")]
    assert cache.expire(15.0)
    assert active(cache) == []
    assert cache.next_expiry() is None


def test_a_repeated_occur_keeps_the_first_time() -> None:
    cache = PublicFaultCache()
    send(cache, 10.0)
    send(cache, 14.0)

    send(cache, 15.0, "recover")

    assert active(cache) == []


def test_a_recover_that_overtook_its_occur_removes_it_within_5_seconds() -> None:
    cache = PublicFaultCache()
    send(cache, 10.0, "recover")
    send(cache, 11.0)

    assert active(cache) == [("CCAE", "fault-0001")]
    cache.expire(15.0)
    assert active(cache) == []


def test_an_occur_more_than_5_seconds_after_a_lone_recover_stays() -> None:
    cache = PublicFaultCache()
    send(cache, 10.0, "recover")

    send(cache, 15.5)

    assert active(cache) == [("CCAE", "fault-0001")]


def test_a_pending_removal_takes_a_fault_that_occurred_again_as_the_original_does() -> None:
    cache = PublicFaultCache()
    send(cache, 10.0)
    send(cache, 11.0, "recover")
    send(cache, 12.0)  # still active: ignored

    cache.expire(15.0)

    assert active(cache) == []


@pytest.mark.parametrize("delay", [0.0, 4.999])
def test_a_once_fault_is_active_for_5_seconds(delay: float) -> None:
    cache = PublicFaultCache()
    send(cache, 10.0, "once")

    cache.expire(10.0 + delay)
    assert active(cache) == [("CCAE", "fault-0001")]
    assert cache.expire(15.0)
    assert active(cache) == []


def test_a_once_fault_while_active_changes_nothing() -> None:
    cache = PublicFaultCache()
    send(cache, 10.0)

    send(cache, 11.0, "once")

    assert cache.next_expiry() is None
    assert not cache.expire(100.0)
    assert active(cache) == [("CCAE", "fault-0001")]


def test_removals_due_are_carried_out_before_a_message_is_taken_in() -> None:
    cache = PublicFaultCache()
    send(cache, 10.0, "once")

    send(cache, 16.0, "once")  # the first one was due at 15: this one is new

    assert active(cache) == [("CCAE", "fault-0001")]
    assert cache.next_expiry() == 21.0


def test_a_fault_is_known_by_its_sender_and_id_on_each_node() -> None:
    cache = PublicFaultCache()
    send(cache, 10.0, nodes=("node-1", "node-2"))
    send(cache, 10.0, resource="pingmesh")
    send(cache, 10.0, fault_id="fault-0002")

    send(cache, 20.0, "recover", nodes=("node-1",))

    assert active(cache) == [("CCAE", "fault-0002"), ("pingmesh", "fault-0001")]
    assert active(cache, "node-2") == [("CCAE", "fault-0001")]
    assert cache.nodes() == ["node-1", "node-2"]


def test_a_full_cache_refuses_new_faults() -> None:
    cache = PublicFaultCache(capacity=2)

    refused = send(cache, 10.0, nodes=("node-1", "node-2", "node-3"))

    assert refused == ["CCAE fault-0001 on node-3: the cache holds 2 faults; not stored"]
    assert cache.nodes() == ["node-1", "node-2"]
    send(cache, 20.0, "recover", nodes=("node-1",))
    assert send(cache, 20.0, nodes=("node-3",)) == []


def test_a_full_cache_refuses_a_once_it_cannot_store_and_schedules_nothing() -> None:
    cache = PublicFaultCache(capacity=1)
    send(cache, 10.0)

    assert send(cache, 10.0, "once", fault_id="fault-0002") != []
    assert cache.next_expiry() is None


def test_lone_recovers_are_held_up_to_the_capacity() -> None:
    cache = PublicFaultCache(capacity=2)

    refused = send(cache, 10.0, "recover", nodes=("node-1", "node-2", "node-3"))

    assert refused == ["CCAE fault-0001 on node-3: 2 removals are pending; this recover is not "
                       "kept"]
    send(cache, 11.0, nodes=("node-1", "node-3"))
    cache.expire(15.0)
    assert active(cache) == []
    assert active(cache, "node-3") == [("CCAE", "fault-0001")]
