"""Objects to and from rank 0 over gloo, each collective's work held until the next."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.train.worker_ranks import run_ranks
from trainguard.train import collectives

_WORKER = Path(__file__).with_name("collectives_worker.py")


def test_without_a_process_group_values_stay_where_they_are() -> None:
    assert collectives.from_rank0("mine") == "mine"
    assert collectives.to_rank0("mine") == ["mine"]


def test_an_nccl_only_group_gets_tensors_on_this_ranks_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # What get_backend_config() says after init_process_group("nccl"); no GPU here.
    monkeypatch.setattr(dist, "get_backend_config", lambda: "cuda:nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert not collectives.carries_cpu_tensors()
    assert collectives.device() == torch.device("cuda", 3)
    monkeypatch.setattr(dist, "get_backend_config", lambda: "cpu:gloo,cuda:nccl")
    assert collectives.device() == torch.device("cpu")


def test_values_of_every_length_reach_every_rank_and_rank_0_and_the_works_are_held(
        tmp_path: Path) -> None:
    outputs = run_ranks(_WORKER, 3, tmp_path)
    for result in outputs:
        rank = result["rank"]
        for round_, got in enumerate(result["results"]):
            assert got["told"] == [round_, 0, 0], "rank 0's value, not this rank's"
            assert got["gathered"] == ([["rank", sender, 3000 * sender + round_]
                                        for sender in range(3)] if rank == 0 else None)
        # The last call's two works (the sizes, then the values), done, and still held here.
        assert result["held"] == [True, True]
