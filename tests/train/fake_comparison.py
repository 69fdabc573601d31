"""The replicas' comparison (ReplicaShares) run as in a process group, without one."""

from __future__ import annotations

import types

import pytest
import torch

from trainguard.train import collectives


def compare_as(monkeypatch: pytest.MonkeyPatch, *, identical: bool) -> list[int]:
    """The ranks' digests are all alike (``identical``) or all different; returns the size of
    each all-gather made."""
    gathered: list[int] = []

    def all_gather(every: list[torch.Tensor], mine: torch.Tensor, *,
                   async_op: bool = False) -> types.SimpleNamespace:
        gathered.append(len(every))
        for rank, digest in enumerate(every):
            digest.copy_(mine if identical else mine + rank)
        return types.SimpleNamespace(wait=lambda: True)  # a work already done

    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(collectives, "device", lambda: torch.device("cpu"))
    monkeypatch.setattr(torch.distributed, "all_gather", all_gather)
    return gathered
