"""The device path of a snapshot, run on CPU through the same interfaces: copies that complete
later (as CUDA's side stream does), commit only after them, page-locking the slot, and tensors
going back to the device they were saved from."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch

from trainguard.ipc import snapshot_layout
from trainguard.train import device_copy, snapshot


class _Deferred:
    """Copies that land only when waited on, as a side stream's do when its event completes;
    ``fail`` makes the wait raise as a device error would."""

    def __init__(self, slot: snapshot.MappedSlot | None = None, *, fail: bool = False) -> None:
        self.slot = slot
        self.fail = fail
        self.log: list[str] = []
        self.seq_at_wait: list[int] = []

    def start(self, device: torch.device,
              pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> device_copy.PendingCopy:
        self.log.append(f"start {device.type}")
        engine = self

        class Pending:
            def wait(self) -> None:
                engine.log.append(f"wait {device.type}")
                if engine.slot is not None:
                    engine.seq_at_wait.append(snapshot_layout.read_seq(engine.slot.memory))
                if engine.fail:
                    raise RuntimeError("CUDA error: an illegal memory access was encountered")
                for target, source in pairs:
                    if source.device.type == "cpu":
                        target.copy_(source)

        return Pending()


def _slot(path: Path, nbytes: int, *, engines: dict[str, device_copy.DeviceCopies],
          register_with_cuda: bool = False) -> snapshot.MappedSlot:
    with path.open("wb") as stream:
        stream.truncate(nbytes)
    return snapshot.MappedSlot(str(path), engines=engines, register_with_cuda=register_with_cuda)


def test_a_snapshot_is_committed_only_once_its_asynchronous_copies_are_done(
        tmp_path: Path) -> None:
    tree = {"weight": torch.arange(1000, dtype=torch.float32), "step": 7}
    prepared = snapshot.prepare(tree)
    engine = _Deferred()
    slot = _slot(tmp_path / "slot", prepared.nbytes, engines={"cpu": engine})
    engine.slot = slot
    try:
        seq = slot.write(prepared, step=7, generation=0, rank=0, world_size=1)
    finally:
        slot.close()
    assert engine.log == ["start cpu", "wait cpu"]
    assert engine.seq_at_wait == [seq - 1]  # still odd (being written) while the copy ran
    header, restored = snapshot.read_snapshot(str(tmp_path / "slot"))
    assert header.seq == seq
    assert seq % 2 == 0
    assert torch.equal(restored["weight"], torch.arange(1000, dtype=torch.float32))
    assert restored["step"] == 7


def test_a_copy_that_fails_leaves_the_slot_uncommitted(tmp_path: Path) -> None:
    prepared = snapshot.prepare({"weight": torch.ones(64)})
    engine = _Deferred()
    slot = _slot(tmp_path / "slot", prepared.nbytes, engines={"cpu": engine})
    try:
        committed = slot.write(prepared, step=1, generation=0, rank=0, world_size=1)
        engine.fail = True
        with pytest.raises(RuntimeError, match="illegal memory access"):
            slot.write(prepared, step=2, generation=0, rank=0, world_size=1)
    finally:
        slot.close()
    with pytest.raises(snapshot.SnapshotError,
                       match=rf"holds no complete snapshot \(seq {committed + 1}\)"):
        snapshot.read_snapshot(str(tmp_path / "slot"))


def test_every_device_is_started_before_any_is_waited_on() -> None:
    cpu, meta = _Deferred(), _Deferred()
    shared: list[str] = []
    cpu.log = meta.log = shared
    targets = [torch.empty(4), torch.empty(4)]
    device_copy.copy_to_host([(targets[0], torch.ones(4)), (targets[1], torch.empty(4,
                                                                                 device="meta"))],
                             engines={"cpu": cpu, "meta": meta})
    assert shared == ["start cpu", "start meta", "wait cpu", "wait meta"]
    assert torch.equal(targets[0], torch.ones(4))


def test_a_device_without_an_engine_is_copied_at_once() -> None:
    target = torch.zeros(8)
    device_copy.copy_to_host([(target, torch.full((8,), 3.0))], engines={})
    assert torch.equal(target, torch.full((8,), 3.0))


class _Runtime:
    """torch.cuda.cudart()'s registration calls, answering ``code``."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.calls: list[tuple[object, ...]] = []

    def cudaHostRegister(self, pointer: int, size: int, flags: int) -> int:  # noqa: N802
        self.calls.append(("register", pointer, size, flags))
        return self.code

    def cudaHostUnregister(self, pointer: int) -> int:  # noqa: N802
        self.calls.append(("unregister", pointer))
        return 0

    def cudaGetErrorString(self, code: int) -> str:  # noqa: N802
        return "operation not supported"


def test_a_buffer_is_registered_once_and_unregistered_on_release() -> None:
    buffer = torch.zeros(4096, dtype=torch.uint8)
    runtime = _Runtime(0)
    registration = device_copy.HostRegistration(buffer, name="slot 0", runtime=lambda: runtime)
    assert registration.ensure()
    assert registration.ensure()
    registration.release()
    registration.release()
    assert runtime.calls == [("register", buffer.data_ptr(), 4096, 1),
                             ("unregister", buffer.data_ptr())]


def test_a_refused_registration_is_logged_once_drained_and_not_retried(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    drained: list[bool] = []
    monkeypatch.setattr(device_copy, "_drain_last_error", lambda: drained.append(True))
    runtime = _Runtime(801)
    registration = device_copy.HostRegistration(torch.zeros(64, dtype=torch.uint8),
                                                name="/dev/shm/slot-0", runtime=lambda: runtime)
    with caplog.at_level(logging.WARNING):
        assert not registration.ensure()
        assert not registration.ensure()
    registration.release()
    assert [call[0] for call in runtime.calls] == ["register"]
    assert drained == [True]  # else the next kernel of training fails with this error
    assert [r.getMessage() for r in caplog.records] == [
        "cudaHostRegister of /dev/shm/slot-0 refused (operation not supported): snapshots of "
        "CUDA tensors into it are synchronous copies through pageable memory"]


def test_a_slot_of_cpu_tensors_never_calls_cuda(tmp_path: Path) -> None:
    # On this CPU-only torch any CUDA runtime call raises: the write must not make one.
    prepared = snapshot.prepare({"weight": torch.ones(16)})
    with (tmp_path / "slot").open("wb") as stream:
        stream.truncate(prepared.nbytes)
    slot = snapshot.MappedSlot(str(tmp_path / "slot"), register_with_cuda=True)
    try:
        slot.write(prepared, step=1, generation=0, rank=0, world_size=1)
    finally:
        slot.close()
    assert torch.equal(snapshot.read_snapshot(str(tmp_path / "slot"))[1]["weight"],
                       torch.ones(16))


def test_the_table_names_a_device_only_for_tensors_off_the_cpu() -> None:
    entries = [snapshot_layout.TensorEntry("float32", (2,), 0, 8),
               snapshot_layout.TensorEntry("float32", (2,), 64, 8, "cuda:1")]
    table = snapshot_layout.encode_table(entries)
    assert table.count(b'"device"') == 1
    assert snapshot_layout.decode_table(table) == entries


def test_a_tensor_saved_on_a_device_this_process_lacks_is_refused_by_name(
        tmp_path: Path) -> None:
    prepared = snapshot.prepare({"weight": torch.ones(4)})
    entries = [dataclasses.replace(prepared.entries[0], device="cuda:0")]
    table = snapshot_layout.encode_table(entries)
    # The payload starts on a page boundary, so the longer table still fits before it.
    moved = snapshot.Prepared(prepared.skeleton, prepared.tensors, entries, table,
                              prepared.payload_offset, prepared.payload_len)
    assert moved.skeleton_offset + len(moved.skeleton) <= moved.payload_offset
    with (tmp_path / "slot").open("wb") as stream:
        stream.truncate(moved.nbytes)
    slot = snapshot.MappedSlot(str(tmp_path / "slot"))
    try:
        slot.write(moved, step=1, generation=0, rank=0, world_size=1)
    finally:
        slot.close()
    with pytest.raises(snapshot.SnapshotError,
                       match=r"saved on cuda:0, but this process sees 0 cuda device"):
        snapshot.read_snapshot(str(tmp_path / "slot"))


class _CudaCalls:
    """torch.cuda's streams and events, recording what the copy does with them (the sources
    stay CPU tensors, so the copies themselves run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[str] = []
        calls = self

        class Stream:
            def __init__(self, device: torch.device) -> None:
                calls.log.append(f"new stream on {device}")

            def wait_stream(self, other: object) -> None:
                calls.log.append(f"side waits for {other}")

        class Event:
            def record(self, stream: object) -> None:
                calls.log.append("record")

            def synchronize(self) -> None:
                calls.log.append("host waits")

            def wait(self, stream: object = None) -> None:
                raise AssertionError("a stream wait: the host would not wait for the copy")

        @contextlib.contextmanager
        def on(stream: object) -> Iterator[None]:
            calls.log.append("enter side")
            yield
            calls.log.append("leave side")

        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "stream", on)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device: "the compute stream")


def test_cuda_copies_follow_the_step_on_a_side_stream_and_the_host_waits_for_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _CudaCalls(monkeypatch)
    engine = device_copy.CudaCopies()
    device = torch.device("cuda", 0)
    targets = [torch.zeros(3), torch.zeros(3)]
    for _ in range(2):
        pending = engine.start(device, [(targets[0], torch.ones(3)), (targets[1],
                                                                       torch.full((3,), 2.0))])
        pending.wait()
    assert calls.log == ["new stream on cuda:0"] + [
        "side waits for the compute stream", "enter side", "record", "leave side",
        "host waits"] * 2  # one side stream, reused
    assert torch.equal(targets[1], torch.full((3,), 2.0))
