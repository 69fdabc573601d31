"""A small deterministic DDP job under Session.run, with hooks that make a recovery go wrong.

Every process prints ``pid RANK PID started with N on device D`` when it starts (N: the
processes its agent started with it; D: its ``TRAINGUARD_DEVICE``), so a test can tell which
processes a recovery kept, and where it put the others. A process started
after generation 0 (a replacement) can be made to stall (``--stall-replacement``, to miss the
recovery deadline) or die (``--crash-replacement``) before it restores. Rank 1 can be made to
sleep between steps (``--stuck-after``) or inside one (``--stuck-in``), so that it does not
leave its generation when told.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import trainguard.train

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--output", type=Path)
parser.add_argument("--stall-replacement", type=float, default=0.0)
parser.add_argument("--step-sleep", type=float, default=0.02,
                    help="seconds between steps: a longer run of the same steps, same result")
parser.add_argument("--crash-replacement", action="store_true")
parser.add_argument("--stuck-after", type=int, default=None,
                    help="rank 1 sleeps 60 s after this step of generation 0, between steps, "
                         "where no abort reaches it")
parser.add_argument("--stuck-in", type=int, default=None,
                    help="rank 1 sleeps 60 s inside this step of generation 0, as in a wait "
                         "that cutting its connections does not end")
parser.add_argument("--step-work", type=float, default=0.0,
                    help="seconds each step sleeps inside its step mark (steadier step times)")
parser.add_argument("--slow-steps", default=None, metavar="FIRST:END:SECONDS",
                    help="steps FIRST..END-1 sleep SECONDS more inside their step mark")
parser.add_argument("--profile", action="store_true",
                    help="hand the forward passes, the batches and the all-reduces to the "
                         "session's lightweight profiling")
args = parser.parse_args()
slow_first, slow_end, slow_by = (float(part) for part in args.slow_steps.split(":")) \
    if args.slow_steps else (0.0, 0.0, 0.0)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
state = {"model": model, "optimizer": optimizer}
session = trainguard.train.Session()
starting = os.environ.get("TRAINGUARD_STARTING_PROCESSES", "-")  # "-": no agent
device = os.environ.get("TRAINGUARD_DEVICE", "-")
print(f"pid {session.rank} {os.getpid()} started with {starting} on device {device}", flush=True)
hooks = {"armed": session.generation == 1}  # it replaces a failed one in the first recovery


def train() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if hooks.pop("armed", False):
        if args.crash_replacement:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(args.stall_replacement)
    start = session.restore(state)
    assert session.restored is not None
    print(f"rank {rank} restored step {start} from {session.restored.source}", flush=True)
    ddp = DistributedDataParallel(model)
    (ddp(torch.zeros(1, 32)).sum() * 0).backward()  # settle DDP's buckets (see the demo)
    optimizer.zero_grad()
    steps: Iterable[int] = range(start, args.steps)
    if args.profile:
        session.profiling.watch_forward(ddp)
        session.profiling.watch_communication(ddp)
        steps = session.profiling.loader(steps)  # the stand-in for a data loader
    for step in steps:
        with session.step(step):
            if step == args.stuck_in and rank == 1 and session.generation == 0:
                time.sleep(60)
            time.sleep(args.step_work + (slow_by if slow_first <= step < slow_end else 0.0))
            generator = torch.Generator().manual_seed(step * 1009 + rank)
            inputs = torch.randn(16, 32, generator=generator)
            loss = nn.functional.mse_loss(ddp(inputs), inputs.flip(1))
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        session.checkpoint(state, step=step + 1)
        if step == args.stuck_after and rank == 1 and session.generation == 0:
            time.sleep(60)
        time.sleep(args.step_sleep)


session.run(train)
session.close()
if dist.get_rank() == 0 and args.output is not None:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.numpy().tobytes())
    args.output.write_text(digest.hexdigest() + "\n")
dist.destroy_process_group()
