"""Not data parallel, under ``Session.run``: each rank adds 1 to its own weight every step,
from a start of ``rank + 1``, and writes its final weight to ``OUTPUT.<rank>``; so each rank
ends at ``rank + 1 + steps`` only if it resumed from its own state (or started afresh). Rank 0
prints every 50th step."""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn

import trainguard.train

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--output", required=True)
args = parser.parse_args()

session = trainguard.train.Session()
model = nn.Linear(4, 4)
state = {"model": model}


def train() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    start = session.restore(state)
    if start == 0:
        with torch.no_grad():
            model.weight.fill_(float(rank + 1))
    for step in range(start, args.steps):
        with session.step(step):
            with torch.no_grad():
                model.weight.add_(1.0)
            dist.all_reduce(torch.zeros(1))  # in step with each other, as training is
            time.sleep(0.02)
        session.checkpoint(state, step=step + 1)
        if rank == 0 and step % 50 == 0:
            print(f"step {step} ", flush=True)
    with open(f"{args.output}.{rank}", "w") as output:
        output.write(f"{model.weight[0, 0].item():g}\n")


session.run(train)
session.close()
