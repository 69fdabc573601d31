"""The node document ``mindx-dl-nodeinfo-<node>`` from the BMC's alarms and the host's memory and
disk pressure (SPEC D6).

Timing, as the original's NodeD:

* the BMC is read every ``bmc_period`` (60 s); a read that differs from the last report is
  reported at once (the next tick, within ``tick`` = 0.5 s), and an unchanged one is reported
  again ``report_interval`` (30 min) after the last report;
* the document changes at most every ``refresh_interval`` (5 s): a change sooner waits for it.

Without a readable BMC (no ``ipmitool``, no BMC driver) the document shows node health only,
built from host pressure, and the detector's status says why; the BMC is tried again every
period.

Host pressure enters the document as two devices with codes of our own, in the IPMI OEM sensor
type range (0xF1), so that no BMC code can clash: ``F1000001`` host memory and ``F1000002``
host disk, both PreSeparateFault unless the configuration lists them: a node short of memory or
disk should take no new work, while what runs there goes on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

import psutil

from trainguard import names
from trainguard.clock import Clock
from trainguard.detect import node_bmc, periodic
from trainguard.detect.detector_status import DetectorStatus, StatusRecorder
from trainguard.faults.node.node_faults import (
    NodeCodeTable,
    NodeFaultDevice,
    NodeFaultLevel,
    NodeInfo,
    default_node_table,
    node_info,
)

__all__ = ["HOST_DISK_CODE", "HOST_MEMORY_CODE", "Bmc", "NodeDetector", "NodeReport",
           "NodeSettings", "with_host_codes"]

HOST_MEMORY_CODE = "F1000001"
HOST_DISK_CODE = "F1000002"


def with_host_codes(table: NodeCodeTable) -> NodeCodeTable:
    """``table`` with the host pressure codes at PreSeparateFault, unless it lists them."""
    levels = dict(table.levels)
    for code in (HOST_MEMORY_CODE, HOST_DISK_CODE):
        levels.setdefault(code, NodeFaultLevel.PRE_SEPARATE_FAULT)
    return NodeCodeTable(levels)


@dataclasses.dataclass(frozen=True)
class NodeSettings:
    node: str
    """The node's name (a DNS-1123 subdomain): the document is ``mindx-dl-nodeinfo-<node>``."""
    bmc_period: float = 60.0
    """Seconds between two reads of the BMC (> 0); 60 s as the original's."""
    report_interval: float = 1800.0
    """Seconds after which an unchanged document is reported again (> 0); 30 min as the
    original's."""
    refresh_interval: float = 5.0
    """Shortest seconds between two reports (>= 0); 5 s as the original's."""
    host_period: float = 5.0
    """Seconds between two reads of memory and disk use (> 0)."""
    tick: float = 0.5
    """Seconds between two looks at what is due (> 0): a change is reported this late at most,
    once ``refresh_interval`` allows."""
    memory_threshold: float = 95.0
    """Percent of host memory in use (psutil's, cache excluded) from which the host is short
    of memory (0 < x <= 100). 95: the kernel's OOM killer acts near 100, and 5% of a training
    host's memory (tens of GB) is time enough to act before it does."""
    disk_threshold: float = 95.0
    """Percent of a disk in use from which it is short (0 < x <= 100). 95: ext4 keeps 5% for
    root by default, so at 95% a job's non-root writes (checkpoints, logs) already fail."""
    disk_paths: tuple[str, ...] = ("/",)
    """The filesystems whose use is watched."""

    def __post_init__(self) -> None:
        names.node_name(self.node)
        for name in ("bmc_period", "report_interval", "host_period", "tick"):
            if not getattr(self, name) > 0:
                raise ValueError(f"node {name} must be > 0 seconds, got {getattr(self, name)}")
        if self.refresh_interval < 0:
            raise ValueError(f"node refresh_interval must be >= 0 seconds, got "
                             f"{self.refresh_interval}")
        for name in ("memory_threshold", "disk_threshold"):
            if not 0 < getattr(self, name) <= 100:
                raise ValueError(f"node {name} must be in (0, 100] percent, got "
                                 f"{getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class NodeReport:
    """One report of the node document."""

    node: str
    info: NodeInfo
    time: float  # wall seconds

    @property
    def document_name(self) -> str:
        return f"mindx-dl-nodeinfo-{self.node}"

    def to_data(self) -> dict[str, object]:
        """The document's content: ``{"NodeInfo": ..., "CheckCode": ...}``."""
        return self.info.to_data()


class Bmc(Protocol):
    async def read(self) -> tuple[NodeFaultDevice, ...]:
        """The current alarms; raises :class:`.node_bmc.BmcUnavailableError`."""
        ...


def _memory_percent() -> float:
    return float(psutil.virtual_memory().percent)


def _disk_percent(path: str) -> float:
    return float(psutil.disk_usage(path).percent)


class NodeDetector:
    """Builds and reports the node document; ``on_report`` gets each report."""

    def __init__(self, settings: NodeSettings, *, clock: Clock,
                 on_report: Callable[[NodeReport], None], bmc: Bmc | None = None,
                 table: NodeCodeTable | None = None,
                 memory_percent: Callable[[], float] = _memory_percent,
                 disk_percent: Callable[[str], float] = _disk_percent) -> None:
        self._settings = settings
        self._clock = clock
        self._on_report = on_report
        self._bmc: Bmc = bmc or node_bmc.IpmitoolBmc()
        self._table = with_host_codes(table or default_node_table())
        self._memory_percent = memory_percent
        self._disk_percent = disk_percent
        self._bmc_devices: tuple[NodeFaultDevice, ...] = ()
        self._host_devices: tuple[NodeFaultDevice, ...] = ()
        self._next_bmc: float | None = None  # monotonic; None: now
        self._next_host: float | None = None
        self._reported: NodeReport | None = None
        self._reported_at = 0.0  # monotonic
        self._recorder = StatusRecorder(
            "node", clock=clock,
            mode=f"reads the BMC every {settings.bmc_period:g} s and host memory and disk "
                 f"every {settings.host_period:g} s")

    @property
    def status(self) -> DetectorStatus:
        return self._recorder.status

    @property
    def last_report(self) -> NodeReport | None:
        return self._reported

    async def poll(self) -> NodeReport | None:
        """Do what is due now: read the BMC and the host when their periods are up, and report
        the document when it changed or is due again (and the refresh interval allows)."""
        now = self._clock.monotonic()
        if self._next_bmc is None or now >= self._next_bmc:
            self._next_bmc = now + self._settings.bmc_period
            await self._read_bmc()
        if self._next_host is None or now >= self._next_host:
            self._next_host = now + self._settings.host_period
            self._read_host()
        info = node_info((*self._bmc_devices, *self._host_devices), table=self._table)
        last = self._reported
        since = now - self._reported_at
        due = (last is None or info != last.info
               or since >= self._settings.report_interval)
        if not due or (last is not None and since < self._settings.refresh_interval):
            return None
        report = NodeReport(self._settings.node, info, self._clock.wall())
        self._reported, self._reported_at = report, now
        self._on_report(report)
        return report

    async def run(self) -> None:
        """Report until cancelled."""
        await periodic.every(self._settings.tick, self.poll, clock=self._clock)

    async def _read_bmc(self) -> None:
        try:
            self._bmc_devices = await self._bmc.read()
        except node_bmc.BmcUnavailableError as error:
            self._bmc_devices = ()
            self._recorder.failed(str(error))
        else:
            self._recorder.succeeded()

    def _read_host(self) -> None:
        devices: list[NodeFaultDevice] = []
        if self._memory_percent() >= self._settings.memory_threshold:
            devices.append(NodeFaultDevice("HostMemory", 0, (HOST_MEMORY_CODE,)))
        full = [index for index, path in enumerate(self._settings.disk_paths)
                if self._disk_in_use(path) >= self._settings.disk_threshold]
        devices += [NodeFaultDevice("HostDisk", index, (HOST_DISK_CODE,)) for index in full]
        self._host_devices = tuple(devices)

    def _disk_in_use(self, path: str) -> float:
        try:
            return self._disk_percent(path)
        except OSError as error:
            self._recorder.failed(f"disk use of {path}: {error}")
            return 0.0
