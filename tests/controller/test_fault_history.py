"""The devices' fault history survives the controller: escalation counts what came before a
restart, waits out a store that cannot be reached, and forgets what no longer matters."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from trainguard.controller import fault_history
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.levels import Level
from trainguard.store import kv, sqlite_kv, trailing

UCE = "80E01801"  # a memory error: twice in 24 h -> ManuallySeparateNPU
DAY = 86400.0


def _uce(time: float, device: str = "host-a/device-0") -> DeviceFaultEvent:
    return DeviceFaultEvent(device, UCE, Assertion.ONCE, time)


async def _restarted(path: Path, before: list[DeviceFaultEvent],
                     after: DeviceFaultEvent) -> Level:
    """``before`` reported to one controller's history, ``after`` to the next one's."""
    store = sqlite_kv.SqliteKeyValueStore.open(path)
    first = await fault_history.DeviceFaultHistory.load(store)
    for event in before:
        first.report(event)
    await first.writer.flush()
    await store.close()
    store = sqlite_kv.SqliteKeyValueStore.open(path)
    try:
        second = await fault_history.DeviceFaultHistory.load(store)
        return second.report(after).level
    finally:
        await store.close()


def test_a_second_memory_error_after_a_restart_still_escalates(tmp_path: Path) -> None:
    level = asyncio.run(_restarted(tmp_path / "kv.db", [_uce(1000.0)], _uce(1060.0)))
    assert level is Level.MANUALLY_SEPARATE_NPU


def test_errors_of_other_devices_or_outside_the_window_do_not_count(tmp_path: Path) -> None:
    other = asyncio.run(_restarted(tmp_path / "a.db", [_uce(1000.0, "host-b/device-0")],
                                   _uce(1060.0)))
    late = asyncio.run(_restarted(tmp_path / "b.db", [_uce(1000.0)], _uce(1000.0 + DAY + 1)))
    assert other is not Level.MANUALLY_SEPARATE_NPU
    assert late is not Level.MANUALLY_SEPARATE_NPU


def test_a_release_by_the_operator_survives_the_restart(tmp_path: Path) -> None:
    async def scenario() -> tuple[Level, Level]:
        store = sqlite_kv.SqliteKeyValueStore.open(tmp_path / "kv.db")
        first = await fault_history.DeviceFaultHistory.load(store)
        first.report(_uce(1000.0))
        separated = first.report(_uce(1060.0)).level
        first.release("host-a/device-0", 2000.0)
        await first.writer.flush()
        second = await fault_history.DeviceFaultHistory.load(store)
        after = second.health("host-a/device-0", 2100.0).level
        await store.close()
        return separated, after

    separated, after = asyncio.run(scenario())
    assert separated is Level.MANUALLY_SEPARATE_NPU
    assert after is not Level.MANUALLY_SEPARATE_NPU


def test_a_device_with_nothing_to_remember_leaves_the_store(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        store = sqlite_kv.SqliteKeyValueStore.open(tmp_path / "kv.db")
        history = await fault_history.DeviceFaultHistory.load(store)
        history.report(_uce(1000.0))
        history.report(DeviceFaultEvent("host-a/device-1", "80E18005", Assertion.OCCUR, 1000.0))
        history.report(DeviceFaultEvent("host-a/device-1", "80E18005", Assertion.RECOVER, 1001.0))
        await history.writer.flush()
        held = [entry.key for entry in (await store.list(fault_history.PREFIX)).entries]
        # A day later the occurrences are out of the window: a new controller forgets them.
        later = await fault_history.DeviceFaultHistory.load(store)
        later.sweep(1000.0 + DAY + 10)
        await later.writer.flush()
        left = [entry.key for entry in (await store.list(fault_history.PREFIX)).entries]
        await store.close()
        return held, left

    held, left = asyncio.run(scenario())
    assert held == [fault_history.PREFIX + "host-a/device-0",
                    fault_history.PREFIX + "host-a/device-1"]
    assert left == []


class _Away(sqlite_kv.SqliteKeyValueStore):
    """A store that cannot be reached until ``back`` is set."""

    back = False

    async def put(self, key: str, value: bytes, *, expect: int | None = None,
                  lease: int = 0, fence: kv.Fence | None = None) -> int:
        if not self.back:
            raise kv.UnavailableError("no etcd member of 127.0.0.1:1 answered")
        return await super().put(key, value, expect=expect, lease=lease, fence=fence)


def test_history_waits_for_a_store_out_of_reach_and_catches_up(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trailing, "RETRY_SECONDS", 0.05)

    async def scenario() -> tuple[Level, int, list[dict[str, object]]]:
        store = _Away.open(":memory:")
        assert isinstance(store, _Away)
        history = await fault_history.DeviceFaultHistory.load(store)
        writer = asyncio.create_task(history.writer.run())
        history.report(_uce(1000.0))
        level = history.report(_uce(1060.0)).level  # the engine goes on meanwhile
        await asyncio.sleep(0.3)
        waiting = history.writer.unwritten
        store.back = True
        assert await history.writer.settle(5.0)
        writer.cancel()
        entry = await store.get(fault_history.PREFIX + "host-a/device-0")
        assert entry is not None
        return level, waiting, json.loads(entry.value)

    with caplog.at_level(logging.WARNING, logger=trailing.__name__):
        level, waiting, written = asyncio.run(scenario())
    assert level is Level.MANUALLY_SEPARATE_NPU
    assert waiting == 1
    assert [record["time"] for record in written] == [1000.0, 1060.0]
    messages = [record.getMessage() for record in caplog.records]
    assert any("cannot be reached" in message for message in messages)
    assert any("answers again" in message for message in messages)


def test_a_damaged_record_costs_only_its_device(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> Level:
        store = sqlite_kv.SqliteKeyValueStore.open(tmp_path / "kv.db")
        await store.put(fault_history.PREFIX + "host-b/device-0", b'[{"time": "x"}]')
        history = await fault_history.DeviceFaultHistory.load(store)
        history.report(_uce(1000.0))
        await history.writer.flush()
        again = await fault_history.DeviceFaultHistory.load(store)
        await store.close()
        return again.report(_uce(1060.0)).level

    with caplog.at_level(logging.WARNING, logger=fault_history.__name__):
        assert asyncio.run(scenario()) is Level.MANUALLY_SEPARATE_NPU
    assert "faults/devices/host-b/device-0[0]: could not convert" in caplog.text


def test_the_controller_takes_up_the_history_of_its_store(tmp_path: Path) -> None:
    """``trainguard controller --store``: a device separated before it started stays so."""
    from trainguard.controller import service  # noqa: PLC0415
    from trainguard.proto import grpc_security  # noqa: PLC0415

    async def scenario() -> Level:
        url = f"sqlite://{tmp_path}/elsewhere.db"
        store = sqlite_kv.SqliteKeyValueStore.open(tmp_path / "elsewhere.db")
        before = await fault_history.DeviceFaultHistory.load(store)
        before.report(_uce(1000.0))
        before.report(_uce(1060.0))
        await before.writer.flush()
        await store.close()
        controller = service.ControllerService(
            service.ControllerSettings(run_root=tmp_path / "runs", store=url,
                                       security=grpc_security.ServerSecurity(insecure=True)))
        await controller.start("127.0.0.1:0")
        try:
            assert controller._device_faults is not None
            level = controller._device_faults.health("host-a/device-0", 1100.0).level
        finally:
            await controller.stop()
        broken = service.ControllerService(
            service.ControllerSettings(run_root=tmp_path / "runs", store="etcd://nowhere",
                                       security=grpc_security.ServerSecurity(insecure=True)))
        with pytest.raises(OSError, match=r"^the store etcd://nowhere: store URL "
                           r"'etcd://nowhere': 'nowhere' is no HOST:PORT$"):
            await broken.start("127.0.0.1:0")
        return level

    assert asyncio.run(scenario()) is Level.MANUALLY_SEPARATE_NPU
