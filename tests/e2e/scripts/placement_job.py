"""A small DDP job that records, in each process, the environment it was started with
(``env-GENERATION-RANK.json`` in the directory given), to check where ranks were placed.

``--in-process`` trains under Session.run (so a rank can move to a spare without a restart of
the others).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import trainguard.train

parser = argparse.ArgumentParser()
parser.add_argument("record", type=Path)
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--in-process", action="store_true")
args = parser.parse_args()

NAMES = ("RANK", "LOCAL_RANK", "TRAINGUARD_DEVICE", "TRAINGUARD_GENERATION",
         "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")
session = trainguard.train.Session()
record = args.record / f"env-{os.environ['TRAINGUARD_GENERATION']}-{os.environ['RANK']}.json"
record.write_text(json.dumps({name: os.environ.get(name) for name in NAMES}))
torch.manual_seed(0)
model = nn.Linear(8, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
state = {"model": model, "optimizer": optimizer}


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


if args.in_process:
    session.run(train)
else:
    train()
session.close()
dist.destroy_process_group()
