"""The checkpoint-stall benchmark's job: one rank under trainguard, a big model with Adam state.

Generation 0 measures how long training is blocked: trainguard's snapshot, a raw copy of the
same bytes into memory reserved beforehand (the physical bound), torch.save to disk and
torch.load; then it kills itself. Generation 1 measures trainguard's restore from memory and
exits; a later run with the same run id measures the restore from disk. Results are appended
as JSON lines to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import torch
from torch import nn

import trainguard.train

parser = argparse.ArgumentParser()
parser.add_argument("--params-millions", type=int, default=100)
parser.add_argument("--repeats", type=int, default=5)
parser.add_argument("--interval", type=float, default=1.0,
                    help="seconds between snapshots, standing for the training step")
parser.add_argument("--scratch", type=Path, required=True, help="where torch.save writes")
parser.add_argument("--out", type=Path, required=True)
args = parser.parse_args()

WIDTH = 4096  # one Linear(4096, 4096) is 16.8M parameters
torch.manual_seed(0)
model = nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(
    max(1, round(args.params_millions * 1e6 / (WIDTH * WIDTH + WIDTH))))))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
state = {"model": model, "optimizer": optimizer}
session = trainguard.train.Session()


def report(**values: object) -> None:
    with args.out.open("a") as stream:
        stream.write(json.dumps(values) + "\n")


def timed(action: object) -> float:
    started = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - started


start = session.restore(state)
assert session.restored is not None
parameters = sum(p.numel() for p in model.parameters())
if session.restored.source != "none":
    report(phase=f"restore-{session.restored.source}", seconds=session.restored.seconds,
           step=start, parameters=parameters)
    raise SystemExit(0)

for parameter in model.parameters():  # one optimizer step creates Adam's state
    parameter.grad = torch.full_like(parameter, 1e-3)
optimizer.step()
optimizer.zero_grad(set_to_none=True)  # gradients are not part of the state
tensors = [*model.state_dict().values(),
           *(t for s in optimizer.state.values() for t in s.values() if t.dim() > 0)]
nbytes = sum(t.numel() * t.element_size() for t in tensors)
report(phase="state", parameters=parameters, bytes=nbytes)

def raw_copy(target: torch.Tensor) -> None:
    offset = 0
    for tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        target[offset : offset + size].view(tensor.dtype).view(tensor.shape).copy_(tensor)
        offset += size


def measure_raw_copy() -> list[float]:
    """The physical bound: the same bytes copied into memory reserved and touched beforehand."""
    reserved = torch.empty(nbytes, dtype=torch.uint8)
    reserved.fill_(0)
    return [timed(lambda: raw_copy(reserved)) for _ in range(args.repeats)]


report(phase="raw-copy", seconds=measure_raw_copy())

saved = args.scratch / "torch-save.pt"


def save() -> None:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, saved)


def load() -> None:
    torch.load(saved)


report(phase="torch-save", seconds=[timed(save) for _ in range(args.repeats)])
report(phase="torch-load", seconds=[timed(load) for _ in range(min(2, args.repeats))])
saved.unlink()

session.checkpoint(state, step=1)  # the first one also reserves the shared memory
report(phase="first-snapshot", seconds=session.last_snapshot_seconds)
stalls = []
for step in range(2, 2 + args.repeats + 1):
    time.sleep(args.interval)  # the step: the agent's background work runs meanwhile
    session.checkpoint(state, step=step)
    stalls.append(session.last_snapshot_seconds)
stalls = stalls[1:]  # the first into the second slot also reserved and mapped its memory
report(phase="snapshot", seconds=stalls)
session.close()
os.kill(os.getpid(), signal.SIGKILL)  # a crash: the next generation restores from memory
