"""One rank of test_collectives' three-rank job: values of different lengths to and from rank 0,
twice; prints what it got and the works the module holds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from trainguard.train import collectives

rank, directory = int(sys.argv[1]), Path(sys.argv[2])
dist.init_process_group("gloo", init_method=f"file://{directory / 'store'}", rank=rank,
                        world_size=3)
results = []
for round_ in range(2):
    told = collectives.from_rank0((round_, rank, "x" * 5000 * rank))
    gathered = collectives.to_rank0(("rank", rank, "y" * (3000 * rank + round_)))
    results.append({"told": [told[0], told[1], len(told[2])],
                    "gathered": None if gathered is None else [
                        [name, sender, len(pad)] for name, sender, pad in gathered]})
held = [work.is_completed() for work in collectives._held]
print(json.dumps({"rank": rank, "results": results, "held": held}), flush=True)
dist.barrier()
