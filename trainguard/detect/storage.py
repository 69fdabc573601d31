"""Shared-storage faults of the node (SPEC D6): a configured mount that stops answering or
stops accepting writes.

Every ``period`` seconds each mount is probed: ``stat`` it, then create, write, ``fsync`` and
remove a small probe file in it. The probe runs in a thread of its own and is waited for at most
``timeout`` seconds, so a mount that hangs (a dead NFS server, a FUSE daemon that stopped) never
hangs the detector: the mount is reported unresponsive, and no new probe of it starts while the
stuck one has not returned (at most one stuck thread per mount). When it returns, the next probe
says whether the mount is back.

What it reports (decided from NOTES §2.5): the original's NodeD reports storage client faults as
public faults of type ``Node`` from the senders ``dpcStorage`` and ``dtfsStorage``. A mount that
does not answer, or fails with anything but a refusal, is the client's link to its storage
failing: DTFS's link code ``110001023``. A mount that refuses writes (read-only, permission,
full) leaves the job unable to checkpoint just the same, so it takes the same code; the
description says which. ``publicFaultConfiguration.json`` puts ``110001023`` at PreSeparateNPU:
the node takes no new work, and a job running there goes on until it needs the storage.
:func:`public_fault_message` writes the changes as the public-fault message NodeD would send,
for the agent to hand to the public-fault intake.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import errno
import hashlib
import itertools
import os
import threading
from collections.abc import Callable, Sequence

from trainguard import names
from trainguard.clock import Clock
from trainguard.detect import periodic
from trainguard.detect.detector_status import DetectorStatus, StatusRecorder

__all__ = ["STORAGE_FAULT_CODE", "STORAGE_SENDER", "MountState", "StorageChange",
           "StorageDetector", "StorageSettings", "probe_mount", "public_fault_message"]

STORAGE_FAULT_CODE = "110001023"
"""The original's DTFS storage link fault (PreSeparateNPU in publicFaultConfiguration.json)."""
STORAGE_SENDER = "dtfsStorage"
"""The public-fault sender (``resource``) the original's NodeD uses for that code."""
_REFUSALS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT})
PROBE_FILE = f".trainguard-probe-{os.uname().nodename}-{os.getpid()}"


class MountState(enum.StrEnum):
    HEALTHY = "healthy"
    UNRESPONSIVE = "unresponsive"  # the probe did not return within its timeout
    FAILING = "failing"  # the probe failed with an error other than a refusal
    REFUSES_WRITES = "refuses writes"  # read-only, permission denied, or full

    @property
    def is_fault(self) -> bool:
        return self is not MountState.HEALTHY


@dataclasses.dataclass(frozen=True)
class StorageSettings:
    mounts: tuple[str, ...]
    """Absolute paths of the mounts to probe (a directory on each), at least one."""
    period: float = 5.0
    """Seconds between two probes of a mount (> 0); as often as the node document may change."""
    timeout: float = 10.0
    """Seconds a probe may take before its mount is unresponsive (> 0). A healthy shared
    filesystem writes and syncs a few bytes in milliseconds; 10 s leaves room for a loaded
    server without letting a hung one go unseen for long."""

    def __post_init__(self) -> None:
        if not self.mounts:
            raise ValueError("storage mounts is empty; name at least one mount to probe")
        for mount in self.mounts:
            if not os.path.isabs(mount):
                raise ValueError(f"storage mounts: {mount!r} is not an absolute path")
        if len(set(self.mounts)) != len(self.mounts):
            raise ValueError(f"storage mounts {list(self.mounts)}: a mount is listed twice")
        for name in ("period", "timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"storage {name} must be > 0 seconds, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class StorageChange:
    """A mount whose state changed, and when (wall seconds)."""

    mount: str
    state: MountState
    detail: str  # the error, or why it is unresponsive; "" when healthy
    time: float


def probe_mount(mount: str) -> None:
    """Stat ``mount``, then write, sync and remove a small file in it. Blocks as long as the
    mount does.

    Raises:
        OSError: the mount failed or refused the write.
    """
    os.stat(mount)
    path = os.path.join(mount, PROBE_FILE)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(descriptor, b"trainguard storage probe\n")
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.unlink(path)


class StorageDetector:
    """Probes each mount; ``on_changes`` gets the mounts whose state changed."""

    def __init__(self, settings: StorageSettings, *, clock: Clock,
                 on_changes: Callable[[list[StorageChange]], None],
                 probe: Callable[[str], None] = probe_mount) -> None:
        self._settings = settings
        self._clock = clock
        self._on_changes = on_changes
        self._probe = probe
        self._states = dict.fromkeys(settings.mounts, MountState.HEALTHY)
        self._pending: dict[str, concurrent.futures.Future[OSError | None]] = {}
        self._recorder = StatusRecorder(
            "storage", clock=clock,
            mode=f"probes {len(settings.mounts)} mount(s) every {settings.period:g} s, "
                 f"{settings.timeout:g} s each at most")

    @property
    def status(self) -> DetectorStatus:
        return self._recorder.status

    def states(self) -> dict[str, MountState]:
        return dict(self._states)

    async def check(self) -> list[StorageChange]:
        """Probe every mount once, concurrently; the changes."""
        results = await asyncio.gather(*(self._check_one(mount)
                                         for mount in self._settings.mounts))
        changes = [change for change in results if change is not None]
        self._recorder.succeeded()
        if changes:
            self._on_changes(changes)
        return changes

    async def run(self) -> None:
        """Probe until cancelled."""
        await periodic.every(self._settings.period, self.check, clock=self._clock)

    async def _check_one(self, mount: str) -> StorageChange | None:
        pending = self._pending.get(mount)
        if pending is None:
            pending = self._pending[mount] = self._start(mount)
        done, _ = await asyncio.wait({asyncio.wrap_future(pending)},
                                     timeout=self._settings.timeout)
        if not done:
            state, detail = MountState.UNRESPONSIVE, (
                f"a stat, write and fsync of {mount} did not return within "
                f"{self._settings.timeout:g} s")
        else:
            del self._pending[mount]
            error = pending.result()
            if error is None:
                state, detail = MountState.HEALTHY, ""
            else:
                state = (MountState.REFUSES_WRITES if error.errno in _REFUSALS
                         else MountState.FAILING)
                detail = f"{mount}: {error.strerror or error}"
        if state is self._states[mount]:
            return None
        self._states[mount] = state
        return StorageChange(mount, state, detail, self._clock.wall())

    def _start(self, mount: str) -> concurrent.futures.Future[OSError | None]:
        future: concurrent.futures.Future[OSError | None] = concurrent.futures.Future()

        def probe() -> None:
            try:
                self._probe(mount)
            except OSError as error:
                future.set_result(error)
            else:
                future.set_result(None)

        threading.Thread(target=probe, name=f"storage-probe {mount}", daemon=True).start()
        return future


_message_numbers = itertools.count(1)


def public_fault_message(changes: Sequence[StorageChange], *, node: str,
                         device_ids: Sequence[int]) -> dict[str, object]:
    """The public-fault message (NOTES §2.6) NodeD would send for ``changes``: one fault per
    mount, ``occur`` while it is faulty, ``recover`` when it is healthy again.

    Args:
        changes: at least one.
        node: the node's name (a DNS-1123 subdomain).
        device_ids: the node's devices, 1 to 32 of 0..31: a storage fault hits them all.
    """
    names.node_name(node)
    if not changes:
        raise ValueError("public_fault_message needs at least one change")
    if not 1 <= len(device_ids) <= 32 or not all(0 <= each <= 31 for each in device_ids):
        raise ValueError(f"device_ids {list(device_ids)}: 1 to 32 ids of 0..31 are needed")
    time_ms = round(max(change.time for change in changes) * 1000)
    faults = [{
        "faultId": "storage-" + hashlib.sha256(change.mount.encode()).hexdigest()[:16],
        "faultType": "Node", "faultCode": STORAGE_FAULT_CODE,
        "faultTime": round(change.time * 1000),
        "assertion": "occur" if change.state.is_fault else "recover",
        "faultLocation": {"mount": change.mount[-128:]},
        "influence": [{"nodeName": node, "deviceIds": sorted(set(device_ids))}],
        "description": (f"shared storage {change.state}: {change.detail}" if change.detail
                        else f"shared storage {change.state}")[:512],
    } for change in changes]
    return {"id": f"trainguard-storage-{time_ms}-{next(_message_numbers)}",
            "timestamp": time_ms, "version": "1.0", "resource": STORAGE_SENDER,
            "faults": faults}
