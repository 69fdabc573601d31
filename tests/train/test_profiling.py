"""A rank's lightweight-profiling records: the original's marker format, one file per rank
and start second, a new one past the size limit, the oldest fifth deleted past the disk limit;
and the marks a script hands to it (forward passes, data-loader fetches, all-reduces), taken
only while their switch is on."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainguard.job.profiling_switch import PRESETS, ProfilingSwitch
from trainguard.train import profiling


class Clock:
    def __init__(self) -> None:
        self.ns = 1_745_567_190_000_000_000

    def __call__(self) -> int:
        self.ns += 1_000
        return self.ns


def _records(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(directory.iterdir(), key=lambda p: int(p.name))
            for line in path.read_text().splitlines()]


def test_a_mark_is_a_start_and_an_end_record_with_one_id(tmp_path: Path) -> None:
    recorder = profiling.ProfilingRecorder(tmp_path, task="job7", rank=3, clock_ns=Clock())
    with recorder.mark("step 17"):
        pass
    recorder.flush()

    (name,) = os.listdir(tmp_path / "job7" / "3")
    assert name == "1745567190", "named by the second the file starts"
    start, end = _records(tmp_path / "job7" / "3")
    thread = {"ProcessId": os.getpid(), "ThreadId": threading.get_native_id()}
    assert start == {"Kind": 1, "Flag": 2, "SourceKind": 0, "Timestamp": start["Timestamp"],
                     "Id": 1, "MsptiObjectId": {"Pt": thread}, "Name": "step 17",
                     "Domain": "default"}
    assert (end["Flag"], end["Id"], end["Name"], end["Domain"]) == (4, 1, "", "")
    assert end["Timestamp"] > start["Timestamp"]


def test_records_wait_for_the_flush_interval(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = profiling.ProfilingRecorder(tmp_path, task="t", rank=0)
    with recorder.mark("forward"):
        pass
    assert not (tmp_path / "t").exists(), "not written at once"
    monkeypatch.setattr(profiling, "FLUSH_SECONDS", 0.0)
    with recorder.mark("forward"):
        pass
    assert [r["Id"] for r in _records(tmp_path / "t" / "0")] == [1, 1, 2, 2]


def test_a_new_file_once_the_current_one_passes_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profiling, "FILE_LIMIT", 500)  # a mark's two records: about 340
    recorder = profiling.ProfilingRecorder(tmp_path, task="t", rank=0, clock_ns=Clock())
    for _ in range(3):
        with recorder.mark("dataloader"):
            pass
        recorder.flush()
    names = sorted(os.listdir(tmp_path / "t" / "0"))
    assert names == ["1745567190", "1745567191"], "the same second taken: the next one"
    assert len(_records(tmp_path / "t" / "0")) == 6


def test_past_the_disk_limit_the_oldest_fifth_of_the_ranks_files_go(tmp_path: Path) -> None:
    rank_dir = tmp_path / "t" / "0"
    rank_dir.mkdir(parents=True)
    for second in range(100, 110):
        (rank_dir / str(second)).write_bytes(b"x" * 100)
    (rank_dir / "parallel_group.json").write_text("{}")
    (tmp_path / "t" / "1").mkdir()
    (tmp_path / "t" / "1" / "100").write_bytes(b"x" * 100)
    recorder = profiling.ProfilingRecorder(tmp_path, task="t", rank=0, disk_limit=500)
    with recorder.mark("step 1"):
        pass
    recorder.flush()

    left = sorted(os.listdir(rank_dir))
    assert [name for name in left if name.isdigit()][:2] == ["102", "103"]
    assert "parallel_group.json" in left, "what is not named by a number stays"
    assert os.listdir(tmp_path / "t" / "1") == ["100"], "another rank's files are its own"


def test_at_least_three_files_are_kept(tmp_path: Path) -> None:
    rank_dir = tmp_path / "t" / "0"
    rank_dir.mkdir(parents=True)
    for second in (100, 101, 102):
        (rank_dir / str(second)).write_bytes(b"x" * 100)
    recorder = profiling.ProfilingRecorder(tmp_path, task="t", rank=0, disk_limit=10)
    with recorder.mark("step 1"):
        pass
    recorder.flush()
    assert len(os.listdir(rank_dir)) == 4


def test_the_task_is_the_jobs_own_else_named_by_the_time() -> None:
    assert profiling.task_id({"MINDX_TASK_ID": "pt-job-1"}) == "pt-job-1"
    assert profiling.task_id({}).startswith("default_task_id_")


def test_forward_passes_and_fetches_are_marked_only_while_switched_on(tmp_path: Path) -> None:
    recorder = profiling.ProfilingRecorder(tmp_path, task="t", rank=0)
    model = nn.Linear(4, 4)
    recorder.watch_forward(model)
    batches = list(recorder.loader([torch.ones(1, 4), torch.ones(1, 4)]))
    model(batches[0])
    recorder.switch = PRESETS["light"]
    for batch in recorder.loader([torch.ones(1, 4)]):
        model(batch)
    with pytest.raises(RuntimeError):
        model(torch.ones(1, 3))  # a failed pass still ends its mark
    recorder.flush()

    records = _records(tmp_path / "t" / "0")
    assert [r["Name"] for r in records if r["Flag"] == 2] == [
        "dataloader", "forward", "dataloader", "forward"], "the fetch that ends is one too"
    ids = [r["Id"] for r in records]
    assert all(ids.count(mark) == 2 for mark in ids), "every mark ended"


def test_all_reduces_are_marked_with_the_operators_fields(tmp_path: Path) -> None:
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        recorder = profiling.ProfilingRecorder(tmp_path, task="t", rank=0)
        model = DistributedDataParallel(nn.Linear(4, 4))
        recorder.watch_communication(model)
        model(torch.ones(2, 4)).sum().backward()
        recorder.switch = ProfilingSwitch(communication_operator=True)
        model(torch.ones(2, 4)).sum().backward()
        recorder.flush()
        assert model.module.weight.grad is not None
    finally:
        dist.destroy_process_group()

    starts = [r for r in _records(tmp_path / "t" / "0") if r["Flag"] == 2]
    assert [r["Domain"] for r in starts] == ["communication"]
    operator = json.loads(starts[0]["Name"])
    assert (operator["opName"], operator["count"], operator["dataType"]) == (
        "allreduce", "20", "float32")
