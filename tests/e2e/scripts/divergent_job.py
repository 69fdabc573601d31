"""Not data parallel: every rank trains its own model, yet asks for snapshot shares."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

import trainguard.train

session = trainguard.train.Session(share_replicas=True)
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())  # a different model on every rank
model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32))
state = {"model": model}
start = session.restore(state)
for step in range(start, 5):
    with session.step(step):
        model(torch.randn(4, 32)).sum().backward()
    session.checkpoint(state, step=step + 1)
session.close()
dist.destroy_process_group()
