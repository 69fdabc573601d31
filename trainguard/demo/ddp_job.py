"""A 4-rank DDP job on CPU: a small MLP learns a fixed random linear map from synthetic data.

Deterministic by construction: every step's batch is drawn from a generator seeded by (seed,
step, rank), gloo reduces in a fixed order (once DDP's bucket layout is settled, see below), and
trainguard restores model, optimizer and random states exactly. So after any number of faults,
the final parameters must be bitwise identical to those of an uninterrupted run; ``--output``
writes their SHA-256 so the demonstration can check.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import trainguard.train

__all__ = ["main", "parameters_digest"]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=1)
    parser.add_argument("--output", type=Path, help="write the final parameters' SHA-256 here")
    return parser.parse_args()


def parameters_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main() -> None:
    args = _arguments()
    # First: a process started in a recovery reads its state meanwhile (docs/session.md).
    session = trainguard.train.Session()
    torch.manual_seed(args.seed)
    width = args.width
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, width))
    target = torch.randn(width, width, generator=torch.Generator().manual_seed(args.seed + 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    state = {"model": model, "optimizer": optimizer}

    def train() -> None:
        """One generation: a new process group, the newest state, training until done."""
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        start = session.restore(state)
        ddp = DistributedDataParallel(model)
        # DDP lays its gradient buckets out anew after the first backward of every process.
        # With more than two ranks the layout decides the order in which gloo sums each
        # gradient, so the first step after a restart would round differently from the same
        # step of a run that never stopped. One backward of a zero loss settles the layout
        # before the first real step.
        (ddp(torch.zeros(1, width)).sum() * 0).backward()
        optimizer.zero_grad()
        loss = torch.zeros(())
        for step in range(start, args.steps):
            with session.step(step):
                generator = torch.Generator().manual_seed(
                    (args.seed * 1_000_003 + step) * 1009 + rank)
                inputs = torch.randn(args.batch, width, generator=generator)
                loss = nn.functional.mse_loss(ddp(inputs), inputs @ target)
                optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
            if (step + 1) % args.checkpoint_every == 0 or step + 1 == args.steps:
                session.checkpoint(state, step=step + 1)
            if rank == 0 and step % 50 == 0:
                print(f"step {step} loss {loss.item():.5f}", flush=True)

    # Faults inside a step do not end this process: the session leaves the generation and
    # calls train() again in the next one (retry, recover-in-place), or the agent replaces it.
    session.run(train)
    session.close()  # the work is done: a hang in the teardown below no longer matters
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        digest = parameters_digest(model)
        print(f"final parameters sha256 {digest} after {args.steps} steps on {world} ranks")
        if args.output is not None:
            args.output.write_text(digest + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
