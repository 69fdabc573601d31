"""Leaving a generation and moving state by the group's backend: NCCL is aborted through
torch, gloo unregistered; CPU state goes over a gloo pair group when the job's group cannot
carry it. NCCL itself cannot run here: its backend is faked through the same lookup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist
from torch.distributed import distributed_c10d

from trainguard import testing
from trainguard.train import communicator, process_group

_WORKER = Path(__file__).with_name("exchange_worker.py")


def test_nccl_errors_leave_the_generation_unless_the_user_chose_otherwise() -> None:
    environ: dict[str, str] = {}
    process_group.keep_process_on_nccl_errors(environ)
    assert environ == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}
    chosen = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    process_group.keep_process_on_nccl_errors(chosen)
    assert chosen == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[None]:
    """A one-rank gloo job, dropped (and its groups abandoned) afterwards."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        yield
    finally:
        communicator.abandon(*process_group.drop())


class _FakeNccl:
    def __init__(self) -> None:
        self.aborts = 0

    def abort(self) -> None:
        self.aborts += 1


@pytest.mark.usefixtures("world")
def test_a_gloo_generation_is_unregistered_without_an_abort(
        monkeypatch: pytest.MonkeyPatch) -> None:
    aborted: list[object] = []
    monkeypatch.setattr(distributed_c10d, "_abort_process_group", aborted.append)
    assert process_group.abort_nccl() == 0
    assert process_group._carries_cpu_tensors()
    groups = process_group.drop()
    communicator.abandon(*groups)
    assert len(groups) == 1
    assert aborted == []
    assert not dist.is_initialized()


@pytest.mark.usefixtures("world")
def test_an_nccl_generation_is_aborted_from_any_thread_then_unregistered_through_torch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    nccl = _FakeNccl()
    monkeypatch.setattr(process_group, "_nccl", lambda group: nccl)
    generation = communicator.Communicator()
    assert generation.cut() == 1  # the communicator; no socket of this generation is open
    assert nccl.aborts == 1
    real_abort = distributed_c10d._abort_process_group
    through_torch: list[object] = []

    def abort(group: object = None) -> None:
        through_torch.append(group)
        real_abort()

    monkeypatch.setattr(distributed_c10d, "_abort_process_group", abort)
    groups = process_group.drop()
    communicator.abandon(*groups)
    assert through_torch == [None]  # every group, the default one included
    assert len(groups) == 1
    assert not dist.is_initialized()


def test_state_goes_over_a_gloo_pair_group_when_the_job_group_carries_no_cpu_tensors(
        tmp_path: Path) -> None:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    ranks = [subprocess.Popen([sys.executable, str(_WORKER), str(rank), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment,
                              start_new_session=True) for rank in (0, 1)]
    outputs = []
    try:
        for process in ranks:
            output, _ = process.communicate(timeout=120)
            assert process.returncode == 0, output.decode()
            outputs.append(json.loads(output.decode().strip().splitlines()[-1]))
    finally:
        for process in ranks:
            if process.poll() is None:
                testing.end_process_tree(process.pid)
                process.wait(30)
    for result in outputs:
        assert result["trees"] == [{"step": 3, "weight": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}] * 2
        assert result["pair_groups"] == [[0, 1]]  # formed once, reused by the second exchange
