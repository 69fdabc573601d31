"""The overhead benchmark's job: a 4-rank DDP MLP on CPU that times its own steps.

The same script for every launcher. ``--mode plain`` is an unmodified torchrun script;
``session`` puts each step in ``Session.step`` (the step guard, heartbeats); ``run`` does the
same under ``Session.run``. Snapshots only with ``--snapshot-every N`` (a session mode): then
``Session.checkpoint`` after every N-th step, inside the timed step; or with
``--snapshot-blocks K``, after every step of every second run of K steps (steps K to 2K - 1,
3K to 4K - 1, ...), so that one run holds steps with a snapshot every step and steps without
any; both flags together: after every N-th step of those runs only. With
``--state-dicts-only``, those steps build only the tree a snapshot starts from (each state's
``state_dict()`` and the random generators' states) and drop it: what any checkpoint made of
state dicts pays, whoever then copies it. With ``--per-rank-only``, those steps call
``Session.checkpoint`` with no state: the snapshot holds only the step and the random
generators' states, the parts that stay per rank in any scheme, and costs what every snapshot
pays whatever the model's size. Each rank writes the seconds from each step's start
to the next's to ``$BENCH_OUTPUT_DIR/steps-<rank>.json`` and, with snapshots, the CPU seconds
of each ``Session.checkpoint`` on the training thread to ``checkpoint-cpu-<rank>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=500)
parser.add_argument("--width", type=int, default=768)
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--mode", choices=("plain", "session", "run"), default="plain")
parser.add_argument("--snapshot-every", type=int, default=0,
                    help="Session.checkpoint after every N-th step (0: never; with "
                         "--snapshot-blocks, of those runs)")
parser.add_argument("--snapshot-blocks", type=int, default=0, metavar="K",
                    help="Session.checkpoint after every step of every second run of K steps "
                         "(0: not)")
floors = parser.add_mutually_exclusive_group()
floors.add_argument("--state-dicts-only", action="store_true",
                    help="on the snapshot steps, build the saved tree (state dicts, random "
                         "states) and drop it instead of Session.checkpoint")
floors.add_argument("--per-rank-only", action="store_true",
                    help="on the snapshot steps, Session.checkpoint with no state: a snapshot "
                         "of the step and the random states alone")
args = parser.parse_args()
if (args.state_dicts_only or args.per_rank_only) and not (args.snapshot_every
                                                          or args.snapshot_blocks):
    parser.error("--state-dicts-only and --per-rank-only need --snapshot-every or "
                 "--snapshot-blocks")
if (args.snapshot_every or args.snapshot_blocks) and args.mode == "plain":
    parser.error("--snapshot-every and --snapshot-blocks need --mode session or run")
if args.snapshot_every < 0 or args.snapshot_blocks < 0:
    parser.error("--snapshot-every and --snapshot-blocks must not be negative")


def snapshot_after(step: int) -> bool:
    if args.snapshot_blocks and (step // args.snapshot_blocks) % 2 == 0:
        return False
    every = args.snapshot_every or int(bool(args.snapshot_blocks))
    return bool(every) and (step + 1) % every == 0

torch.manual_seed(0)
width = args.width
model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, width))
target = torch.randn(width, width, generator=torch.Generator().manual_seed(1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
state = {"model": model, "optimizer": optimizer}
session = None
if args.mode != "plain":
    import trainguard.train
    from trainguard.train import state_backend

    session = trainguard.train.Session()


def train() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    start = session.restore(state) if session is not None else 0
    ddp = DistributedDataParallel(model)
    starts = []
    checkpoint_cpu = []
    for step in range(start, args.steps):
        starts.append(time.perf_counter())
        with session.step(step) if session is not None else contextlib.nullcontext():
            generator = torch.Generator().manual_seed(step * 1009 + rank)
            inputs = torch.randn(args.batch, width, generator=generator)
            loss = nn.functional.mse_loss(ddp(inputs), inputs @ target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if session is not None and snapshot_after(step):
            began = time.thread_time()
            if args.state_dicts_only:
                state_backend.saved_tree(state, step=step + 1)
            else:
                session.checkpoint({} if args.per_rank_only else state, step=step + 1)
            checkpoint_cpu.append(time.thread_time() - began)
    starts.append(time.perf_counter())
    seconds = [after - before for before, after in itertools.pairwise(starts)]
    output = Path(os.environ["BENCH_OUTPUT_DIR"])
    (output / f"steps-{rank}.json").write_text(json.dumps(seconds))
    if checkpoint_cpu:
        (output / f"checkpoint-cpu-{rank}.json").write_text(json.dumps(checkpoint_cpu))


if session is not None and args.mode == "run":
    session.run(train)
else:
    train()
if session is not None:
    session.close()
dist.destroy_process_group()
