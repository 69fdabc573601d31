"""Device backends by name: ``sim`` (the default), ``nvml`` and ``npu``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainguard import clock as clocks
from trainguard.detect.devices import backend, npu, nvml, sim

__all__ = ["BACKENDS", "BackendSettings", "create_backend"]

BACKENDS = ("sim", "nvml", "npu")


@dataclasses.dataclass(frozen=True)
class BackendSettings:
    name: str = "sim"
    """Which backend: one of :data:`BACKENDS`. sim: simulated devices, what tests use."""
    devices: int = 8
    """sim: how many simulated devices (>= 1); 8, a typical host's."""
    timeline: Path | None = None
    """sim: a timeline file of faults (JSON lines, :mod:`.sim`); none: faults only by
    injection."""
    subscription: bool = True
    """sim: push events (True) or wait to be polled (False), to try the polling path."""
    npu_smi: str = "npu-smi"
    """npu: the command-line tool, found on PATH."""

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise ValueError(f"device backend {self.name!r} is not one of "
                             f"{', '.join(BACKENDS)}")
        if self.devices < 1:
            raise ValueError(f"devices: expected at least 1 simulated device, got "
                             f"{self.devices}")


def create_backend(settings: BackendSettings, *, clock: clocks.Clock) -> backend.DeviceBackend:
    """The backend the settings name; its driver loads when the detector opens it.

    Raises:
        TimelineError: the sim timeline cannot be read, or has a bad line.
    """
    if settings.name == "nvml":
        return nvml.NvmlBackend(clock=clock)
    if settings.name == "npu":
        return npu.NpuBackend(clock=clock, command=settings.npu_smi)
    if settings.timeline is not None:
        return sim.SimBackend.from_file(settings.timeline, devices=settings.devices, clock=clock,
                                        subscription=settings.subscription)
    return sim.SimBackend(devices=settings.devices, clock=clock,
                          subscription=settings.subscription)
