"""One Session script for every launcher: plain python, torchrun, trainguard run.

Every rank trains on the same batches (drawn from the global generator, which the session
saves and restores), so the final parameters do not depend on the world size (DDP averages
identical gradients exactly for 1 or 2 ranks): one uninterrupted run is the reference for all.
``--crash-after N`` ends the process with exit code 3 once N steps are done.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import trainguard.train

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--crash-after", type=int)
parser.add_argument("--output", type=Path)
args = parser.parse_args()

torch.manual_seed(0)
distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
if distributed:
    dist.init_process_group("gloo")
model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
state: dict[str, object] = {"model": model, "optimizer": optimizer, "seen": 0}
session = trainguard.train.Session()
start = session.restore(state)
assert session.restored is not None
rank = int(os.environ.get("RANK", "0"))
print(f"rank {rank} restored step {start} from {session.restored.source}", flush=True)
network = DistributedDataParallel(model) if distributed else model
for step in range(start, args.steps):
    with session.step(step):
        inputs = torch.randn(8, 16)
        loss = (network(inputs) - inputs.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state["seen"] = int(str(state["seen"])) + 1
    session.checkpoint(state, step=step + 1)
    if args.crash_after is not None and step + 1 == args.crash_after:
        os._exit(3)
session.close()
if rank == 0 and args.output is not None:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.numpy().tobytes())
    args.output.write_text(f"{digest.hexdigest()}\n")
if distributed:
    # With the DDP model still alive, as many scripts end: the group outlives this call, and a
    # collective trainguard made must not be freed by gloo's thread at the interpreter's
    # shutdown (train/collectives.py).
    dist.destroy_process_group()
