"""A torchrun-style script that knows nothing of trainguard: rank 1 fails on the first attempt."""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = dist.get_rank()
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
         "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
         "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS",
         "THP_MEM_ALLOC_ENABLE", "TRAINGUARD_STARTING_PROCESSES")
record = Path(sys.argv[1]) / f"env-{attempt}-{rank}.json"
record.write_text(json.dumps({name: os.environ.get(name) for name in names}))
total = torch.ones(1)
dist.all_reduce(total)
if attempt == 0 and rank == 1:
    sys.exit(3)
dist.barrier()
dist.destroy_process_group()
