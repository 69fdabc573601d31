"""The recovery benchmark's job: 4-rank DDP MLP on CPU, about 0.1 s per step.

Under ``trainguard run`` it snapshots its state into memory after every step and restores from
there (with ``--in-process``, it trains under ``Session.run``, so that ranks can survive a
fault); under torchrun it does what a torchrun user does: ``torch.save`` every
``--checkpoint-every`` steps and ``torch.load`` at start. Either way it writes a timeline
(jobs/timeline.py) that the benchmark reads.
"""

from __future__ import annotations

import time

START = time.monotonic()

import argparse  # noqa: E402 - the start mark is taken before the imports it measures
import contextlib  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from timeline import Timeline  # noqa: E402

timeline = Timeline()
timeline.mark("start", mono_start=START)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--width", type=int, default=768)
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--checkpoint-every", type=int, default=25)
parser.add_argument("--checkpoint", type=Path, help="torch.save file (torchrun only)")
parser.add_argument("--in-process", action="store_true",
                    help="train under Session.run (trainguard's process-level strategies)")
parser.add_argument("--stop-in-snapshot", metavar="RANK:STEP",
                    help="that rank stops itself (SIGSTOP) inside its snapshot of that step, "
                         "in the first attempt, after a 'stopping' mark")
args = parser.parse_args()

session = None
if "TRAINGUARD_AGENT_SOCKET" in os.environ:
    import trainguard.train

    # First: a process of a recovery then reads its state while it builds its model.
    session = trainguard.train.Session()
torch.manual_seed(0)
width = args.width
model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, width))
target = torch.randn(width, width, generator=torch.Generator().manual_seed(1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
state: dict[str, object] = {"model": model, "optimizer": optimizer}


class StopInSnapshot:
    """A piece of state whose state_dict() runs inside the snapshot: a place to stop in."""

    def __init__(self, rank: int, step: int) -> None:
        self.rank, self.step, self.saving = rank, step, 0

    def state_dict(self) -> dict[str, int]:
        if (self.saving == self.step and timeline.rank == self.rank
                and timeline.attempt == 0):
            timeline.mark("stopping", self.saving)
            os.kill(os.getpid(), signal.SIGSTOP)
        return {}

    def load_state_dict(self, saved: dict[str, int]) -> None:
        """Nothing to restore: it only marks a place."""


stopper = None
if args.stop_in_snapshot:
    stopper = StopInSnapshot(*(int(part) for part in args.stop_in_snapshot.split(":")))
    state["stopper"] = stopper


def train() -> None:
    joining = time.monotonic()
    dist.init_process_group("gloo")
    timeline.mark("grouped", seconds=time.monotonic() - joining)
    rank = dist.get_rank()
    if session is not None:
        start = session.restore(state)
    elif args.checkpoint is not None and args.checkpoint.exists():
        saved = torch.load(args.checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start = int(saved["step"])
    else:
        start = 0
    timeline.mark("restored", start)
    ddp = DistributedDataParallel(model)
    (ddp(torch.zeros(1, width)).sum() * 0).backward()  # settle DDP's buckets (see the demo)
    optimizer.zero_grad()
    for step in range(start, args.steps):
        timeline.mark("begin", step)
        with session.step(step) if session is not None else contextlib.nullcontext():
            generator = torch.Generator().manual_seed(step * 1009 + rank)
            inputs = torch.randn(args.batch, width, generator=generator)
            loss = nn.functional.mse_loss(ddp(inputs), inputs @ target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        timeline.mark("end", step)
        if session is not None:
            if stopper is not None:
                stopper.saving = step + 1
            session.checkpoint(state, step=step + 1)
        elif (step + 1) % args.checkpoint_every == 0 and rank == 0 and args.checkpoint:
            draft = args.checkpoint.with_suffix(".draft")
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step + 1}, draft)
            draft.replace(args.checkpoint)


if session is not None and args.in_process:
    session.run(train)
else:
    train()
if session is not None:
    session.close()
dist.destroy_process_group()
