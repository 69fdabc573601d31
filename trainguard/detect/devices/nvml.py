"""NVIDIA GPUs through NVML (``pynvml``, from nvidia-ml-py: ``pip install 'trainguard[nvidia]'``)
(SPEC D1).

Subscription: Xid errors, which NVML pushes as ``nvmlEventTypeXidCriticalError`` events
(``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents``, then ``nvmlEventSetWait_v2`` on a thread
of its own, waking every ``wait_ms`` to see whether it should stop). Each is a ``once`` event
``XID-<n>``: NVML never says an Xid is over; what stays wrong is in the state below.

Polled at the detector's period, even while subscribed (the driver pushes none of it), as
codes present now (``gpuFaultCode.json``):

* ``ROW-REMAP-PENDING``: ``nvmlDeviceGetRemappedRows`` says a remapping waits for a reset, or
  ``nvmlDeviceGetRetiredPagesPendingStatus`` says retired pages do (GPUs before Ampere): both
  need a reset when the GPU is idle;
* ``ROW-REMAP-FAILURE``: a remapping failed;
* ``XID-48``: the volatile uncorrected ECC count (``nvmlDeviceGetTotalEccErrors``) is above
  zero on a GPU without row remapping: a double-bit error since the last reset, which only a
  reset clears (Ampere and later report such errors through Xid 94/95 and row remapping);
* ``NVLINK-DOWN``: a link ``nvmlDeviceGetNvLinkState`` saw enabled since the backend opened is
  disabled now;
* ``XID-79``: a query answers ``NVML_ERROR_GPU_IS_LOST`` (the GPU fell off the bus).

A query the GPU does not support (or forbids) is skipped; any other NVML error stops the
backend, and the detector opens it again. Physical id = the GPU's minor number (its
``/dev/nvidia<N>``), logic id = its NVML index (what ``nvidia-smi`` and ``CUDA_VISIBLE_DEVICES``
count with). NVML has no super pod: SuperPodID and ServerIndex are -2.

Written against NVML's documented API and tested with a fake ``pynvml`` that replays recorded
answers; it has not run on a GPU.
"""

from __future__ import annotations

import importlib
import logging
import threading
from types import ModuleType
from typing import Any

from trainguard import clock as clocks
from trainguard.detect.devices import backend
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent

__all__ = ["NvmlBackend"]

logger = logging.getLogger(__name__)

_SKIPPED = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION",
            "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT")
"""Answers that mean "this GPU cannot tell": the query is skipped."""


class _GpuLostError(Exception):
    """A query answered NVML_ERROR_GPU_IS_LOST."""


class NvmlBackend(backend.DeviceBackend):
    name = "nvml"
    polls_while_subscribed = True

    def __init__(self, *, clock: clocks.Clock, nvml: ModuleType | None = None,
                 wait_ms: int = 1000) -> None:
        """``nvml``: a stand-in for ``pynvml`` (tests); ``wait_ms``: how long one wait for an
        event may block, which bounds how long :meth:`close` takes."""
        self._clock = clock
        self._module = nvml
        self._nvml: Any = None
        self._wait_ms = wait_ms
        self._handles: dict[str, Any] = {}
        self._remaps: dict[str, bool] = {}  # whether the GPU has row remapping
        self._links: dict[str, dict[int, bool]] = {}  # link -> seen enabled since open
        self._event_set: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._initialized = False

    def open(self) -> backend.Inventory:
        nvml = self._nvml = self._module or self._import()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            if error.value == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
                raise backend.BackendError(
                    "nvml", "libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)"
                ) from error
            raise backend.BackendError("nvml", f"nvmlInit failed: {error}") from error
        self._initialized = True
        self._stop.clear()
        try:
            devices = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                identity = backend.DeviceIdentity(nvml.nvmlDeviceGetMinorNumber(handle), index)
                devices.append(identity)
                self._handles[identity.name] = handle
                self._links[identity.name] = {}
                for link in range(nvml.NVML_NVLINK_MAX_LINKS):
                    state = self._ask(nvml.nvmlDeviceGetNvLinkState, handle, link)
                    if state is not None:
                        self._links[identity.name][link] = state == nvml.NVML_FEATURE_ENABLED
        except (nvml.NVMLError, _GpuLostError) as error:
            raise backend.BackendError("nvml", f"listing the GPUs failed: {error}") from error
        return backend.Inventory(tuple(devices))

    def subscribe(self, events: backend.EventSink, failed: backend.FailureSink) -> bool:
        nvml = self._nvml
        xid = nvml.nvmlEventTypeXidCriticalError
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as error:
            if self._skipped(error):
                return False
            raise backend.BackendError("nvml", f"nvmlEventSetCreate failed: {error}") from error
        registered = 0
        for name, handle in self._handles.items():
            try:
                if nvml.nvmlDeviceGetSupportedEventTypes(handle) & xid:
                    nvml.nvmlDeviceRegisterEvents(handle, xid, event_set)
                    registered += 1
            except nvml.NVMLError as error:
                if not self._skipped(error):
                    nvml.nvmlEventSetFree(event_set)
                    raise backend.BackendError("nvml", f"registering {name} for Xid events "
                                               f"failed: {error}") from error
        if not registered:
            nvml.nvmlEventSetFree(event_set)
            return False
        try:
            names = {nvml.nvmlDeviceGetMinorNumber(handle): name
                     for name, handle in self._handles.items()}
        except nvml.NVMLError as error:
            nvml.nvmlEventSetFree(event_set)
            raise backend.BackendError("nvml", f"reading minor numbers failed: {error}"
                                       ) from error
        self._event_set = event_set
        self._thread = threading.Thread(target=self._listen, args=(names, events, failed),
                                        name="trainguard-nvml-events", daemon=True)
        self._thread.start()
        return True

    def poll(self) -> backend.Reading:
        nvml = self._nvml
        present = {}
        for name, handle in self._handles.items():
            try:
                codes = self._conditions(name, handle)
            except _GpuLostError:
                codes = {"XID-79"}
            except nvml.NVMLError as error:
                raise backend.BackendError("nvml", f"reading {name} failed: {error}") from error
            if codes:
                present[name] = frozenset(codes)
        return backend.Reading(self._clock.wall(), present)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._wait_ms / 1000 + 5.0)
            self._thread = None
        nvml = self._nvml
        if self._event_set is not None:
            try:
                nvml.nvmlEventSetFree(self._event_set)
            except nvml.NVMLError as error:
                logger.warning("nvml: freeing the event set failed: %s", error)
            self._event_set = None
        if self._initialized:
            self._initialized = False
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError as error:
                logger.warning("nvml: nvmlShutdown failed: %s", error)
        self._handles.clear()
        self._links.clear()
        self._remaps.clear()

    @staticmethod
    def _import() -> ModuleType:
        try:
            return importlib.import_module("pynvml")
        except ImportError as error:
            raise backend.BackendError(
                "nvml", "the nvidia-ml-py package is not installed "
                "(pip install 'trainguard[nvidia]')") from error

    def _skipped(self, error: Any) -> bool:
        nvml = self._nvml
        return bool(error.value in {getattr(nvml, name) for name in _SKIPPED})

    def _ask(self, query: Any, *args: Any) -> Any:
        """A query's answer; None when the GPU cannot tell.

        Raises:
            _GpuLostError: the GPU is gone.
            NVMLError: anything else went wrong.
        """
        nvml = self._nvml
        try:
            return query(*args)
        except nvml.NVMLError as error:
            if error.value == nvml.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLostError(str(error)) from error
            if self._skipped(error):
                return None
            raise

    def _conditions(self, name: str, handle: Any) -> set[str]:
        """The codes the GPU's state gives now."""
        nvml = self._nvml
        codes = set()
        rows = self._ask(nvml.nvmlDeviceGetRemappedRows, handle)
        remaps = self._remaps.setdefault(name, rows is not None)
        if rows is not None:
            _, _, pending, failure = rows
            if pending:
                codes.add("ROW-REMAP-PENDING")
            if failure:
                codes.add("ROW-REMAP-FAILURE")
        retired = self._ask(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        if retired == nvml.NVML_FEATURE_ENABLED:
            codes.add("ROW-REMAP-PENDING")
        if not remaps:
            uncorrected = self._ask(nvml.nvmlDeviceGetTotalEccErrors, handle,
                                    nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                    nvml.NVML_VOLATILE_ECC)
            if uncorrected:
                codes.add("XID-48")
        links = self._links[name]
        for link, seen_enabled in links.items():
            state = self._ask(nvml.nvmlDeviceGetNvLinkState, handle, link)
            if state == nvml.NVML_FEATURE_ENABLED:
                links[link] = True
            elif state is not None and seen_enabled:
                codes.add("NVLINK-DOWN")
        return codes

    def _listen(self, names: dict[int, str], events: backend.EventSink,
                failed: backend.FailureSink) -> None:
        """The event thread: each Xid to ``events`` until closed; a failure to ``failed``.
        ``names``: device names by minor number (an event names its GPU by handle)."""
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(self._event_set, self._wait_ms)
                physical_id = nvml.nvmlDeviceGetMinorNumber(data.device)
            except nvml.NVMLError as error:
                if error.value == nvml.NVML_ERROR_TIMEOUT:
                    continue
                if not self._stop.is_set():
                    failed(backend.BackendError("nvml", f"waiting for Xid events failed: "
                                                f"{error}"))
                return
            name = names.get(physical_id)
            if name is None or not data.eventType & nvml.nvmlEventTypeXidCriticalError:
                logger.warning("nvml: event %#x for GPU minor %s ignored", data.eventType,
                               physical_id)
                continue
            events(DeviceFaultEvent(name, f"XID-{data.eventData}", Assertion.ONCE,
                                    self._clock.wall()))
