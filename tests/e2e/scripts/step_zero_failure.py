"""Rank 1 raises in step 0 on every start: no restart can help."""

from __future__ import annotations

import torch.distributed as dist

import trainguard.train

dist.init_process_group("gloo")
session = trainguard.train.Session()
for step in range(session.restore({}), 5):
    with session.step(step):
        if dist.get_rank() == 1:
            raise ValueError(f"bad batch shape at step {step}")
        dist.barrier()
session.close()
dist.destroy_process_group()
