"""One rank of test_process_group_backends' two-rank exchange: the job's group is taken to be
unable to carry CPU tensors (as an NCCL-only group is), so the state must go over the gloo
pair group; exchanged twice, as two restores in one generation would. Prints the result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from trainguard.ipc import messages
from trainguard.train import collectives, process_group, snapshot

rank, directory = int(sys.argv[1]), Path(sys.argv[2])
dist.init_process_group("gloo", init_method=f"file://{directory / 'store'}", rank=rank,
                        world_size=2)
collectives.carries_cpu_tensors = lambda: False
path = directory / "slot"
if rank == 0:
    prepared = snapshot.prepare({"weight": torch.arange(6.0), "step": 3})
    path.write_bytes(b"\0" * prepared.nbytes)
    slot = snapshot.MappedSlot(str(path))
    slot.write(prepared, step=3, generation=0, rank=0, world_size=2)
    slot.close()
    plan = messages.RestorePlan(1, messages.RestoreSource.MEMORY, 3, str(path), 0,
                                ["", ""], "", send_to=[1])
else:
    plan = messages.RestorePlan(1, messages.RestoreSource.PEER, 3, "", 0, ["", ""], "",
                                peer=0)
trees = []
for _ in range(2):
    received = process_group.exchange_state(plan)
    assert received is not None
    trees.append({"step": received[1]["step"], "weight": received[1]["weight"].tolist()})
pairs = [dist.get_process_group_ranks(group) for group in process_group._groups()
         if dist.get_backend(group) == "gloo" and group is not dist.group.WORLD]
print(json.dumps({"rank": rank, "trees": trees, "pair_groups": pairs}), flush=True)
dist.barrier()
