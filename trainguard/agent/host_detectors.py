"""What watches a host besides its workers (SPEC D1, D4-D6), from the run's settings: the device
backend, the training interfaces' network plane, the switch, the node (BMC, memory, disk) and
shared-storage mounts, all joined in one :class:`~trainguard.agent.device_watch.DeviceWatch`.

A storage mount that stops answering or refuses writes is a fault of every device of the host
(the original's NodeD reports it as public fault 110001023, DTFS link, PreSeparateNPU, on the
host's devices); it goes with the devices' events, at that level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainguard import clock as clocks
from trainguard.agent import device_watch
from trainguard.detect import network, storage, switch, switch_nvlink
from trainguard.detect import node as node_detector
from trainguard.detect.devices import naming, registry
from trainguard.faults.device import customization as customizations
from trainguard.faults.device import device_health, fault_codes, replay
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level
from trainguard.faults.node.node_faults import NodeCodeTable
from trainguard.faults.node.switch_faults import NodeStatus, SwitchCodeTable, SwitchFault
from trainguard.job import events

__all__ = ["STORAGE_CODE", "DetectorSettings", "DetectorSettingsError", "build"]

STORAGE_CODE = f"public:{storage.STORAGE_FAULT_CODE}"
"""A storage fault's code among the devices' (a public fault's, as the controller spells it)."""
SWITCH_SOURCES = ("none", "sim", "nvlink")


class DetectorSettingsError(ValueError):
    """A detector setting that cannot be used; the message names the flag."""


@dataclasses.dataclass(frozen=True)
class DetectorSettings:
    device_backend: str = "sim"
    """What watches this host's devices: sim (simulated devices, one per rank and spare device;
    faults from --device-timeline or trainguard fault inject --device), nvml (NVIDIA GPUs
    through NVML) or npu (Ascend NPUs through npu-smi). A backend that fails to load is
    retried while the job runs."""
    device_timeline: Path | None = None
    """sim: a file of device faults to play, one JSON object per line: {"time": seconds after
    the start, "device": id, "code": "80E01801", "assertion": "occur|recover|once"}."""
    device_names: Path | None = None
    """A deviceNameCustomization.json: the devices' public type and names in the device
    document (the original's format); unset: Ascend910-<id> (npu, sim) or gpu-<id> (nvml)."""
    training_interfaces: str = ""
    """The network plane to watch (D4), as INTERFACE=DEVICE,DEVICE;...: each interface's
    gateway is probed every 2.5 s and its link watched; a failure is a link-down fault
    (81078603) of the devices listed. Unset: not watched."""
    switch_source: str = "none"
    """Where the switch's faults come from (D5): sim (from --switch-timeline), nvlink (NVLink
    states through NVML, read every 5 minutes) or none."""
    switch_timeline: Path | None = None
    """switch-source sim: a file of switch events, one JSON object per line with the switch
    document's field names and "time" (seconds after the start)."""
    storage_mounts: str = ""
    """Shared-storage mounts to probe every 5 s (D6), comma-separated absolute paths: one that
    stops answering or refuses writes is a fault of every device of this host. Unset: none."""
    node_health: bool = True
    """Watch the node (D6): BMC alarms through ipmitool when present, host memory and disk,
    published as mindx-dl-nodeinfo-<node>."""
    bmc_period: float = 60.0
    """Seconds between two reads of the BMC's alarms (> 0); 60 as the original's NodeD. A
    change is reported within a second of the read that finds it."""
    slow_node: Path | None = None
    """Detect ranks whose steps grow slower than their own baseline (D11), as the original's
    FeatConf in this JSON file says ({} for its defaults: 20 steps of baseline, 3 in a row 30%
    slower, every 30 s); turns light profiling on, whose step marks it reads."""

    def __post_init__(self) -> None:
        if self.device_backend not in registry.BACKENDS:
            raise DetectorSettingsError(
                f"device-backend must be one of {', '.join(registry.BACKENDS)}, got "
                f"{self.device_backend!r}")
        if self.switch_source not in SWITCH_SOURCES:
            raise DetectorSettingsError(
                f"switch-source must be one of {', '.join(SWITCH_SOURCES)}, got "
                f"{self.switch_source!r}")
        if not self.bmc_period > 0:
            raise DetectorSettingsError(f"bmc-period must be > 0 seconds, got {self.bmc_period}")
        self.interfaces()
        self.mounts()

    def interfaces(self) -> tuple[network.TrainingInterface, ...]:
        """Raises: DetectorSettingsError naming the interface that cannot be read."""
        found = []
        for part in filter(None, (p.strip() for p in self.training_interfaces.split(";"))):
            name, equals, devices = part.partition("=")
            try:
                if not equals:
                    raise ValueError("expected INTERFACE=DEVICE,DEVICE")
                found.append(network.TrainingInterface(name.strip(), tuple(
                    int(device) for device in devices.split(","))))
            except ValueError as error:
                raise DetectorSettingsError(f"training-interfaces {part!r}: {error}") from None
        return tuple(found)

    def mounts(self) -> tuple[str, ...]:
        """Raises: DetectorSettingsError naming the mount."""
        found = tuple(filter(None, (m.strip() for m in self.storage_mounts.split(","))))
        if found:
            try:
                storage.StorageSettings(found)
            except ValueError as error:
                raise DetectorSettingsError(f"storage-mounts: {error}") from None
        return found


def build(settings: DetectorSettings, *, node: str, job: str, devices: int,
          table: fault_codes.CodeTable | None,
          customization: customizations.Customization | None,
          node_table: NodeCodeTable | None = None, switch_table: SwitchCodeTable | None = None,
          send: device_watch.ReportSink, record: Callable[[events.Event], object],
          publish: Callable[[str, dict[str, Any]], None], clock: clocks.Clock,
          node_unhealthy: Callable[[str], object] = lambda why: None
          ) -> device_watch.DeviceWatch:
    """The host's watch, every detector the settings ask for joined in, grading with the
    tables given (None: the shipped ones); ``node_unhealthy`` is told why when the node
    document first says UnHealthy (a SeparateFault alarm).

    Raises:
        DetectorSettingsError: a timeline that cannot be read (the message names it).
    """
    try:
        backend = registry.create_backend(registry.BackendSettings(
            name=settings.device_backend, devices=devices, timeline=settings.device_timeline),
            clock=clock)
    except replay.TimelineError as error:
        raise DetectorSettingsError(f"device-timeline {error}") from error
    default = naming.default_naming(settings.device_backend)
    names, problems = (naming.DeviceNaming.load(settings.device_names, default=default)
                       if settings.device_names is not None else (default, []))
    watch = device_watch.DeviceWatch(
        backend, node=node, engine=device_health.FaultEngine(table=table,
                                                             customization=customization),
        names=names, send=send, publish=publish, record=record, clock=clock, job=job)
    for problem in problems:
        record(events.FaultConfigLoaded(job=job, directory=str(settings.device_names),
                                        reloaded=False, problems=[problem.describe()]))
    interfaces = settings.interfaces()
    if interfaces:
        plane = network.NetworkDetector(interfaces, clock=clock,
                                        on_events=watch.network_events)
        watch.add(device_watch.Detector("network", plane.run, lambda: plane.status))
    if settings.node_health:
        told = False

        def reported(report: node_detector.NodeReport) -> None:
            nonlocal told
            watch.node_document(report.document_name, report.info)
            if report.info.node_status is NodeStatus.UNHEALTHY and not told:
                told = True
                node_unhealthy(report.info.describe(node))

        host = node_detector.NodeDetector(
            node_detector.NodeSettings(node, bmc_period=settings.bmc_period), clock=clock,
            on_report=reported, table=node_table)
        watch.add(device_watch.Detector("node", host.run, lambda: host.status))
    source = _switch_source(settings, clock)
    if source is not None:
        switches = switch.SwitchDetector(source, clock=clock, on_change=watch.switch_document,
                                         table=switch_table)
        watch.add(device_watch.Detector("switch", switches.run, lambda: switches.status))
    mounts = settings.mounts()
    if mounts:
        def stored(changes: list[storage.StorageChange]) -> None:
            for change in changes:
                assertion = Assertion.OCCUR if change.state.is_fault else Assertion.RECOVER
                for device in range(devices):
                    watch.detector.feed(DeviceFaultEvent(
                        f"device-{device}", STORAGE_CODE, assertion, change.time,
                        level=Level.PRE_SEPARATE_NPU))

        probes = storage.StorageDetector(storage.StorageSettings(mounts), clock=clock,
                                         on_changes=stored)
        watch.add(device_watch.Detector("storage", probes.run, lambda: probes.status))
    return watch


def _switch_source(settings: DetectorSettings, clock: clocks.Clock
                   ) -> switch.SwitchSource | None:
    if settings.switch_source == "nvlink":
        return switch_nvlink.NvLinkSource(clock=clock)
    if settings.switch_source == "none":
        return None
    timeline: list[tuple[float, SwitchFault]] = []
    if settings.switch_timeline is not None:
        try:
            timeline = switch.parse_switch_timeline(
                settings.switch_timeline.read_text().splitlines())
        except (OSError, ValueError) as error:
            raise DetectorSettingsError(
                f"switch-timeline {settings.switch_timeline}: {error}") from error
    return switch.SimSwitchSource(clock=clock, timeline=timeline)
