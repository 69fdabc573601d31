"""The backend interface's values: a host's inventory, super pod values, and how polls become
events."""

from __future__ import annotations

import pytest

from trainguard.detect.devices import backend
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.device.fault_codes import Severity


def test_super_pod_values_follow_the_seed() -> None:
    assert backend.super_pod_value(None) == -2  # cannot be queried
    assert backend.super_pod_value(0xFFFFFFFF) == -1  # the driver says "none"
    assert backend.super_pod_value(3) == 3


def test_inventory_sorts_by_physical_id_and_refuses_repeats() -> None:
    inventory = backend.Inventory((backend.DeviceIdentity(2, 0), backend.DeviceIdentity(0, 1)))
    assert inventory.names == ("device-0", "device-2")
    assert inventory.device("device-2") == backend.DeviceIdentity(2, 0)
    with pytest.raises(KeyError, match="'device-1' is not a device of this host"):
        inventory.device("device-1")
    assert (inventory.super_pod_id, inventory.server_index) == (-2, -2)
    with pytest.raises(ValueError, match=r"devices: physical ids repeat: \[1, 1\]"):
        backend.Inventory((backend.DeviceIdentity(1, 0), backend.DeviceIdentity(1, 1)))
    with pytest.raises(ValueError, match="super_pod_id: -3 is below -2"):
        backend.Inventory((), super_pod_id=-3)


def test_presence_turns_readings_into_occur_and_recover_events() -> None:
    presence = backend.Presence()
    first = backend.Reading(10.0, {"device-1": frozenset({"80E01801", "81078603"})},
                            {"device-1": Severity.MAJOR})
    assert presence.changes(first) == [
        DeviceFaultEvent("device-1", "80E01801", Assertion.OCCUR, 10.0, Severity.MAJOR),
        DeviceFaultEvent("device-1", "81078603", Assertion.OCCUR, 10.0, Severity.MAJOR)]
    notice = DeviceFaultEvent("device-0", "80E3A201", Assertion.ONCE, 19.0)
    second = backend.Reading(20.0, {"device-1": frozenset({"81078603"}),
                                    "device-2": frozenset({"80E01801"})}, notices=(notice,))
    assert presence.changes(second) == [
        DeviceFaultEvent("device-1", "80E01801", Assertion.RECOVER, 20.0),
        DeviceFaultEvent("device-2", "80E01801", Assertion.OCCUR, 20.0), notice]
    assert presence.changes(backend.Reading(30.0, {})) == [
        DeviceFaultEvent("device-1", "81078603", Assertion.RECOVER, 30.0),
        DeviceFaultEvent("device-2", "80E01801", Assertion.RECOVER, 30.0)]
    assert presence.changes(backend.Reading(40.0, {})) == []


def test_a_backend_error_names_the_backend() -> None:
    error = backend.BackendError("nvml", "libnvidia-ml.so.1 not found")
    assert str(error) == "nvml: libnvidia-ml.so.1 not found"
    assert (error.backend, error.reason) == ("nvml", "libnvidia-ml.so.1 not found")
