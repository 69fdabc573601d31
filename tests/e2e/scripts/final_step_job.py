"""A DDP job under Session.run whose rank 1 loses its device after the last step (in the first
process only), while the others wait in a final barrier: it is moved to a spare and refilled
from a peer at the final step, with no step left to train."""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch import nn

import trainguard.train
from trainguard.train.session import DeviceError

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Linear(8, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
state = {"model": model, "optimizer": optimizer}
session = trainguard.train.Session()


def train() -> None:
    dist.init_process_group("gloo")
    for step in range(session.restore(state), args.steps):
        with session.step(step):
            loss = model(torch.ones(1, 8)).sum()
            optimizer.zero_grad()
            loss.backward()
            for parameter in model.parameters():
                assert parameter.grad is not None
                dist.all_reduce(parameter.grad)
            optimizer.step()
        session.checkpoint(state, step=step + 1)
    if session.generation == 0 and dist.get_rank() == 1:
        raise DeviceError("80E3A201", "the device failed after the last step")
    dist.barrier()


session.run(train)
session.close()
dist.destroy_process_group()
