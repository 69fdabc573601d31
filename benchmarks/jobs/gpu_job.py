"""The GPU check's job: a DDP MLP on the rank's device under ``Session.run``, a snapshot after
every step; writes a timeline (jobs/timeline.py) that benchmarks/gpu_check.py reads.

Both ranks may share one GPU (``cuda:LOCAL_RANK % device_count``). ``--device cpu`` runs the
same job on CPU, to check the check itself where there is no GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import trainguard.train

sys.path.insert(0, str(Path(__file__).parent))
from timeline import Timeline

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--width", type=int, default=1024)
parser.add_argument("--batch", type=int, default=256)
parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
parser.add_argument("--backend", default="nccl", help="init_process_group's backend")
args = parser.parse_args()

timeline = Timeline()
local_rank = int(os.environ["LOCAL_RANK"])
device = (torch.device("cuda", local_rank % torch.cuda.device_count())
          if args.device == "cuda" else torch.device("cpu"))
if device.type == "cuda":
    torch.cuda.set_device(device)
torch.manual_seed(0)
width = args.width
model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, width)).to(device)
target = torch.randn(width, width, generator=torch.Generator().manual_seed(1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
state = {"model": model, "optimizer": optimizer}
session = trainguard.train.Session()


def train() -> None:
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    start = session.restore(state)
    timeline.mark("restored", start, source=session.restored.source if session.restored else "")
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                  else None)
    for step in range(start, args.steps):
        timeline.mark("begin", step)
        with session.step(step):
            generator = torch.Generator().manual_seed(step * 1009 + rank)
            inputs = torch.randn(args.batch, width, generator=generator).to(device)
            loss = nn.functional.mse_loss(ddp(inputs), inputs @ target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss.item()  # the step's work is done on the device before its end is marked
        timeline.mark("end", step)
        session.checkpoint(state, step=step + 1)
        timeline.mark("snapshot", step, seconds=session.last_snapshot_seconds)


session.run(train)
session.close()
dist.destroy_process_group()
