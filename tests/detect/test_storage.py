from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.detect.detector_fixtures import FakeClock, need, need_root
from trainguard.clock import SystemClock
from trainguard.detect.storage import (
    STORAGE_FAULT_CODE,
    MountState,
    StorageChange,
    StorageDetector,
    StorageSettings,
    public_fault_message,
)
from trainguard.faults.device.device_events import Assertion
from trainguard.faults.levels import Level
from trainguard.faults.public.public_faults import PublicFaultConfig
from trainguard.faults.public.public_messages import validate_message


def test_settings_name_the_bad_field() -> None:
    with pytest.raises(ValueError, match="not an absolute path"):
        StorageSettings(("data",))
    with pytest.raises(ValueError, match="mounts is empty"):
        StorageSettings(())
    with pytest.raises(ValueError, match="timeout must be > 0"):
        StorageSettings(("/data",), timeout=0)


def test_errors_are_classified_and_recovery_is_seen() -> None:
    failures: dict[str, OSError | None] = {"/a": None, "/b": None}

    def probe(mount: str) -> None:
        if failures[mount] is not None:
            raise failures[mount]  # type: ignore[misc]

    seen: list[StorageChange] = []
    detector = StorageDetector(StorageSettings(("/a", "/b"), timeout=5.0), clock=FakeClock(),
                               on_changes=seen.extend, probe=probe)
    assert asyncio.run(detector.check()) == []
    failures["/a"] = OSError(errno.EROFS, "Read-only file system")
    failures["/b"] = OSError(errno.ESTALE, "Stale file handle")
    changes = asyncio.run(detector.check())
    assert [(c.mount, c.state) for c in changes] == [("/a", MountState.REFUSES_WRITES),
                                                      ("/b", MountState.FAILING)]
    assert changes[0].detail == "/a: Read-only file system"
    assert asyncio.run(detector.check()) == []
    failures["/a"] = None
    assert [(c.mount, c.state) for c in asyncio.run(detector.check())] == [
        ("/a", MountState.HEALTHY)]
    assert len(seen) == 3


def test_a_hung_probe_is_unresponsive_and_never_piles_up() -> None:
    release = threading.Event()
    calls: list[str] = []

    def probe(mount: str) -> None:
        calls.append(mount)
        release.wait(30)

    detector = StorageDetector(StorageSettings(("/hung",), timeout=0.05), clock=FakeClock(),
                               on_changes=lambda changes: None, probe=probe)
    change = asyncio.run(detector.check())[0]
    assert change.state is MountState.UNRESPONSIVE
    assert "did not return within 0.05 s" in change.detail
    assert asyncio.run(detector.check()) == []
    assert calls == ["/hung"]
    release.set()
    assert asyncio.run(detector.check())[0].state is MountState.HEALTHY
    assert calls == ["/hung"]  # the stuck probe's own result counted


def test_the_public_fault_message_is_accepted_at_pre_separate() -> None:
    changes = [StorageChange("/mnt/ckpt", MountState.UNRESPONSIVE, "no answer", 1.8e9),
               StorageChange("/mnt/data", MountState.HEALTHY, "", 1.8e9 + 1)]
    document = public_fault_message(changes, node="node-1", device_ids=[0, 1, 1])
    message, problems = validate_message(document, config=PublicFaultConfig.default())
    assert problems == []
    assert message is not None
    first, second = message.faults
    assert (first.fault_code, first.level, first.assertion) == (
        STORAGE_FAULT_CODE, Level.PRE_SEPARATE_NPU, Assertion.OCCUR)
    assert second.assertion is Assertion.RECOVER
    assert first.influence[0].device_ids == (0, 1)
    assert first.fault_id != second.fault_id
    assert first.fault_id == public_fault_message(changes, node="node-1", device_ids=[0])[
        "faults"][0]["faultId"]  # type: ignore[index]
    with pytest.raises(ValueError, match="device_ids"):
        public_fault_message(changes, node="node-1", device_ids=[])


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=10)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    need_root("mounting a tmpfs")
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    _run("mount", "-t", "tmpfs", "-o", "size=1m", "trainguard-test", str(mount))
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, timeout=10)


def test_real_tmpfs_remounted_read_only_refuses_writes_and_recovers(tmpfs: Path) -> None:
    detector = StorageDetector(StorageSettings((str(tmpfs),)), clock=SystemClock(),
                               on_changes=lambda changes: None)
    assert asyncio.run(detector.check()) == []
    _run("mount", "-o", "remount,ro", str(tmpfs))
    change = asyncio.run(detector.check())[0]
    assert change.state is MountState.REFUSES_WRITES
    assert "Read-only file system" in change.detail
    _run("mount", "-o", "remount,rw", str(tmpfs))
    assert asyncio.run(detector.check())[0].state is MountState.HEALTHY
    assert os.listdir(tmpfs) == []  # the probe file is gone


def test_real_fuse_mount_nobody_answers_is_unresponsive(tmp_path: Path) -> None:
    """A FUSE mount whose daemon never answers: this test holds /dev/fuse and reads nothing.
    Closing it aborts the connection (the stuck probe returns ENOTCONN); unmounted, the
    directory underneath answers again."""
    need_root("mounting a FUSE filesystem")
    need(os.path.exists("/dev/fuse"), "no /dev/fuse: a FUSE mount cannot be made")
    mount = tmp_path / "fuse"
    mount.mkdir()
    device = os.open("/dev/fuse", os.O_RDWR)
    mounted = False
    try:
        subprocess.run(["mount", "-t", "fuse", "-o",
                        f"fd={device},rootmode=40000,user_id=0,group_id=0",
                        "trainguard-test", str(mount)], check=True, pass_fds=[device],
                       capture_output=True, timeout=10)
        mounted = True
        detector = StorageDetector(StorageSettings((str(mount),), timeout=0.2),
                                   clock=SystemClock(), on_changes=lambda changes: None)
        assert asyncio.run(detector.check())[0].state is MountState.UNRESPONSIVE
        os.close(device)
        device = -1
        change = asyncio.run(detector.check())[0]
        assert change.state is MountState.FAILING
        assert "not connected" in change.detail
        subprocess.run(["umount", "-l", str(mount)], check=True, timeout=10)
        mounted = False
        assert asyncio.run(detector.check())[0].state is MountState.HEALTHY
    finally:
        if device >= 0:
            os.close(device)
        if mounted:
            subprocess.run(["umount", "-l", str(mount)], check=False, timeout=10)
