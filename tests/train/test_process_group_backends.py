"""Leaving a generation and moving state by the group's backend: NCCL is aborted through
torch, gloo unregistered; CPU state goes over a gloo pair group when the job's group cannot
carry it. NCCL itself cannot run here: its backend is faked through the same lookup."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from tests.train.worker_ranks import run_ranks
from trainguard.train import collectives, communicator, process_group

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
    assert collectives.carries_cpu_tensors()
    assert collectives.device() == torch.device("cpu")
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
    outputs = run_ranks(_WORKER, 2, tmp_path)
    for result in outputs:
        assert result["trees"] == [{"step": 3, "weight": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}] * 2
        assert result["pair_groups"] == [[0, 1]]  # formed once, reused by the second exchange
