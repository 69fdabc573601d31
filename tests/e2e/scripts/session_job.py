"""A small DDP job for the end-to-end tests, with knobs for step time and snapshot size."""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import trainguard.train

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds added to each step")
parser.add_argument("--ballast-mb", type=int, default=0, help="extra state to make snapshots big")
parser.add_argument("--output", type=Path)
parser.add_argument("--slow-snapshot", metavar="RANK:STEP", help="that rank's snapshot of "
                    "that step takes a second, and writes its pid to --slow-snapshot-file in it")
parser.add_argument("--slow-snapshot-file", type=Path)
args = parser.parse_args()


class SlowSnapshot:
    """State whose snapshot of one step is slow: a test can act while a rank is inside it."""

    def __init__(self, rank: int, step: int) -> None:
        self.rank, self.slow_step, self.step = rank, step, 0

    def state_dict(self) -> dict[str, int]:
        if (self.step, dist.get_rank()) == (self.slow_step, self.rank) and (
                args.slow_snapshot_file is not None):
            args.slow_snapshot_file.write_text(str(os.getpid()))
            time.sleep(1.0)
        return {"step": self.step}

    def load_state_dict(self, saved: dict[str, int]) -> None:
        self.step = saved["step"]


torch.manual_seed(0)
dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.Sequential(nn.Linear(args.width, args.width), nn.Tanh(), nn.Linear(args.width, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
state: dict[str, object] = {"model": model, "optimizer": optimizer, "extra": {"seen": 0}}
slow = SlowSnapshot(*(int(part) for part in (args.slow_snapshot or "-1:-1").split(":")))
if args.slow_snapshot is not None:
    state["slow"] = slow
if args.ballast_mb:
    state["ballast"] = torch.zeros(args.ballast_mb * 2**20 // 4)
session = trainguard.train.Session()
start = session.restore(state)
assert session.restored is not None
print(f"rank {rank} restored step {start} from {session.restored.source}", flush=True)
ddp = DistributedDataParallel(model)
for step in range(start, args.steps):
    with session.step(step):
        generator = torch.Generator().manual_seed(step * 100 + rank)
        inputs = torch.randn(16, args.width, generator=generator)
        loss = (ddp(inputs) - inputs.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        extra = state["extra"]
        assert isinstance(extra, dict)
        extra["seen"] += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
    slow.step = step + 1
    session.checkpoint(state, step=step + 1)
session.close()
if rank == 0 and args.output is not None:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.numpy().tobytes())
    args.output.write_text(f"{digest.hexdigest()} {state['extra']}\n")
dist.destroy_process_group()
