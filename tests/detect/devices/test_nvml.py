"""The nvml backend through the backend interface, against a stand-in for ``pynvml`` that
answers each NVML call with recorded answers (the last one repeats)."""

from __future__ import annotations

import dataclasses
import queue
import sys
import threading
import types
from typing import Any

import pytest

from tests.detect.devices.conftest import FakeClock
from trainguard.detect.devices import backend, nvml
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent

NOT_SUPPORTED, TIMEOUT, LIBRARY_NOT_FOUND, GPU_IS_LOST, UNKNOWN = 3, 10, 12, 15, 999


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {NOT_SUPPORTED: "Not Supported", GPU_IS_LOST: "GPU is lost",
                UNKNOWN: "Unknown Error"}.get(self.value, f"error {self.value}")


@dataclasses.dataclass(frozen=True)
class Fails:
    code: int


@dataclasses.dataclass(frozen=True)
class Handle:
    index: int
    minor: int


@dataclasses.dataclass(frozen=True)
class EventData:  # pynvml's c_nvmlEventData_t, as far as the backend reads it
    device: Handle
    eventType: int  # noqa: N815 - NVML's field name
    eventData: int  # noqa: N815


class FakeNvml:
    """NVML as recorded on a host: ``answers[(call, gpu index[, link])]`` in order."""

    def __init__(self, minors: list[int], answers: dict[tuple[Any, ...], list[Any]]) -> None:
        self.handles = [Handle(index, minor) for index, minor in enumerate(minors)]
        self.answers = answers
        self.events: queue.Queue[EventData | Fails] = queue.Queue()
        self.calls: list[str] = []
        module = self.module = types.ModuleType("pynvml")
        module.__dict__.update(
            NVMLError=NVMLError, NVML_ERROR_NOT_SUPPORTED=NOT_SUPPORTED,
            NVML_ERROR_NO_PERMISSION=4, NVML_ERROR_INVALID_ARGUMENT=2,
            NVML_ERROR_FUNCTION_NOT_FOUND=13, NVML_ERROR_TIMEOUT=TIMEOUT,
            NVML_ERROR_LIBRARY_NOT_FOUND=LIBRARY_NOT_FOUND, NVML_ERROR_GPU_IS_LOST=GPU_IS_LOST,
            NVML_FEATURE_ENABLED=1, NVML_NVLINK_MAX_LINKS=3, nvmlEventTypeXidCriticalError=8,
            NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0)
        for name, call in {
            "nvmlInit": lambda: self._answer(("init",), None),
            "nvmlShutdown": lambda: self.calls.append("shutdown"),
            "nvmlDeviceGetCount": lambda: len(self.handles),
            "nvmlDeviceGetHandleByIndex": lambda index: self.handles[index],
            "nvmlDeviceGetMinorNumber": lambda handle: handle.minor,
            "nvmlDeviceGetNvLinkState": lambda handle, link: self._answer(
                ("link", handle.index, link), Fails(NOT_SUPPORTED)),
            "nvmlDeviceGetRemappedRows": lambda handle: self._answer(
                ("rows", handle.index), (0, 0, 0, 0)),
            "nvmlDeviceGetRetiredPagesPendingStatus": lambda handle: self._answer(
                ("retired", handle.index), Fails(NOT_SUPPORTED)),
            "nvmlDeviceGetTotalEccErrors": lambda handle, kind, counter: self._answer(
                ("ecc", handle.index, kind, counter), 0),
            "nvmlEventSetCreate": lambda: self._answer(("event set",), "set"),
            "nvmlDeviceGetSupportedEventTypes": lambda handle: self._answer(
                ("event types", handle.index), 0xFF),
            "nvmlDeviceRegisterEvents": lambda handle, kinds, event_set: self.calls.append(
                f"register {handle.index} {kinds:#x}"),
            "nvmlEventSetWait_v2": self._wait,
            "nvmlEventSetFree": lambda event_set: self.calls.append("free"),
        }.items():
            setattr(module, name, call)

    def _answer(self, key: tuple[Any, ...], otherwise: Any) -> Any:
        recorded = self.answers.get(key)
        answer = otherwise if not recorded else (
            recorded.pop(0) if len(recorded) > 1 else recorded[0])
        if isinstance(answer, Fails):
            raise NVMLError(answer.code)
        return answer

    def _wait(self, event_set: str, timeout_ms: int) -> EventData:
        try:
            data = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError(TIMEOUT) from None
        if isinstance(data, Fails):
            raise NVMLError(data.code)
        return data


def _backend(fake: FakeNvml, clock: FakeClock) -> nvml.NvmlBackend:
    return nvml.NvmlBackend(clock=clock, nvml=fake.module, wait_ms=10)


def test_inventory_numbers_gpus_by_minor_number_and_index(clock: FakeClock) -> None:
    fake = FakeNvml([4, 1], {})
    inventory = _backend(fake, clock).open()
    assert inventory.devices == (backend.DeviceIdentity(1, 1), backend.DeviceIdentity(4, 0))
    assert (inventory.super_pod_id, inventory.server_index) == (-2, -2)


def test_xid_events_are_pushed_from_the_event_thread(clock: FakeClock) -> None:
    fake = FakeNvml([0, 1], {("event types", 0): [0x3]})  # GPU 0 reports no Xid events
    device = _backend(fake, clock)
    device.open()
    pushed: list[DeviceFaultEvent] = []
    arrived = threading.Event()

    def take(event: DeviceFaultEvent) -> None:
        pushed.append(event)
        arrived.set()

    assert device.subscribe(take, lambda error: None) is True
    assert fake.calls == ["register 1 0x8"]
    fake.events.put(EventData(fake.handles[1], 8, 79))
    assert arrived.wait(timeout=10.0)
    device.close()
    assert pushed == [DeviceFaultEvent("device-1", "XID-79", Assertion.ONCE, clock.wall())]
    assert fake.calls[-2:] == ["free", "shutdown"]


def test_a_host_without_xid_events_is_polled(clock: FakeClock) -> None:
    fake = FakeNvml([0], {("event types", 0): [0x0]})
    device = _backend(fake, clock)
    device.open()
    assert device.subscribe(lambda event: None, lambda error: None) is False
    assert fake.calls == ["free"]
    fake.answers[("event set",)] = [Fails(NOT_SUPPORTED)]
    assert device.subscribe(lambda event: None, lambda error: None) is False


def test_a_dying_event_wait_is_reported_once_to_the_failure_sink(clock: FakeClock) -> None:
    fake = FakeNvml([0], {})
    device = _backend(fake, clock)
    device.open()
    failures: list[backend.BackendError] = []
    failed = threading.Event()

    def fail(error: backend.BackendError) -> None:
        failures.append(error)
        failed.set()

    device.subscribe(lambda event: None, fail)
    fake.events.put(Fails(UNKNOWN))
    assert failed.wait(timeout=10.0)
    device.close()
    assert [str(error) for error in failures] == [
        "nvml: waiting for Xid events failed: Unknown Error"]


def test_polled_state_becomes_codes_present_now(clock: FakeClock) -> None:
    enabled, disabled = 1, 0
    fake = FakeNvml([0, 1, 2], {
        # GPU 0 (Ampere): a remapping pending, then failed; link 0 goes down, link 1 never up
        ("rows", 0): [(0, 1, 1, 0), (0, 2, 1, 1)],
        ("link", 0, 0): [enabled, enabled, disabled],
        ("link", 0, 1): [disabled],
        # GPU 1 (before Ampere): a double-bit error, retired pages pending
        ("rows", 1): [Fails(NOT_SUPPORTED)],
        ("retired", 1): [1],
        ("ecc", 1, 1, 0): [2],
        # GPU 2 falls off the bus at the second poll
        ("rows", 2): [(0, 0, 0, 0), Fails(GPU_IS_LOST)],
    })
    device = _backend(fake, clock)
    device.open()
    first = device.poll()
    assert first.time == clock.wall()
    assert first.present == {"device-0": frozenset({"ROW-REMAP-PENDING"}),
                             "device-1": frozenset({"ROW-REMAP-PENDING", "XID-48"})}
    assert device.poll().present == {
        "device-0": frozenset({"ROW-REMAP-PENDING", "ROW-REMAP-FAILURE", "NVLINK-DOWN"}),
        "device-1": frozenset({"ROW-REMAP-PENDING", "XID-48"}),
        "device-2": frozenset({"XID-79"})}


def test_an_nvml_failure_while_polling_stops_the_backend(clock: FakeClock) -> None:
    fake = FakeNvml([0], {("rows", 0): [(0, 0, 0, 0), Fails(UNKNOWN)]})
    device = _backend(fake, clock)
    device.open()
    device.poll()
    with pytest.raises(backend.BackendError, match="nvml: reading device-0 failed: Unknown"):
        device.poll()


@pytest.mark.parametrize(("answers", "message"), [
    ({("init",): [Fails(LIBRARY_NOT_FOUND)]},
     r"nvml: libnvidia-ml\.so\.1 not found \(is the NVIDIA driver installed\?\)"),
    ({("init",): [Fails(UNKNOWN)]}, "nvml: nvmlInit failed: Unknown Error"),
    ({("link", 0, 0): [Fails(GPU_IS_LOST)]}, "nvml: listing the GPUs failed: GPU is lost"),
])
def test_a_backend_that_cannot_load_says_why(clock: FakeClock,
                                             answers: dict[tuple[Any, ...], list[Any]],
                                             message: str) -> None:
    with pytest.raises(backend.BackendError, match=message):
        _backend(FakeNvml([0], answers), clock).open()


def test_without_nvidia_ml_py_the_message_says_what_to_install(
        clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # importing it raises ImportError
    with pytest.raises(backend.BackendError,
                       match=r"nvml: the nvidia-ml-py package is not installed \(pip install "
                             r"'trainguard\[nvidia\]'\)"):
        nvml.NvmlBackend(clock=clock).open()


def test_close_is_safe_twice(clock: FakeClock) -> None:
    fake = FakeNvml([0], {})
    device = _backend(fake, clock)
    device.open()
    device.close()
    device.close()
    assert fake.calls.count("shutdown") == 1


