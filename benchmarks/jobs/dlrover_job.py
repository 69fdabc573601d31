"""The recovery benchmark's job under dlrover-run: recovery_job.py with DLRover's flash checkpoint.

Same training as recovery_job.py (4-rank DDP MLP of 3 x 768x768 Linear on CPU with gloo, Adam
at lr 1e-3, batch 128, data seeded by ``step * 1009 + rank``, about 0.1 s per step) and the
same timeline marks (jobs/timeline.py: start, restored, begin, end), so that the benchmark reads
it the way it reads the others. Started through jobs/dlrover_launch.py; runs under the DLRover
virtual environment (see benchmarks/dlrover_recovery.py).

Checkpointing is DLRover's ``DdpCheckpointer``: after every step the state goes to shared
memory, which the elastic agent keeps while it restarts the workers, and every
``--checkpoint-every`` steps the agent also writes it to ``--checkpoint-dir``. At start the job
loads what the checkpointer has, memory first, then disk.

The step saved is the number of steps done, which is also the next step to run, so it is never
0. That matters: DLRover takes step 0 to mean "nothing saved". Loading from memory returns
nothing when the buffer's step is 0, and the agent's saver skips a shard at step 0 when it
writes to disk, then waits for that shard's completion file, which never comes. Numbering from
0 would lose the first checkpoint and could stall the saver.
"""

from __future__ import annotations

import time

START = time.monotonic()

import argparse  # noqa: E402 - the start mark is taken before the imports it measures
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from timeline import Timeline  # noqa: E402

timeline = Timeline()
timeline.mark("start", mono_start=START)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from dlrover.trainer.torch.flash_checkpoint.ddp import (  # noqa: E402
    DdpCheckpointer,
    StorageType,
)
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--width", type=int, default=768)
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--checkpoint-every", type=int, default=25,
                    help="steps between the saves to disk; every step is saved to memory")
parser.add_argument("--checkpoint-dir", type=Path, required=True)
args = parser.parse_args()

torch.manual_seed(0)
dist.init_process_group("gloo")
rank = dist.get_rank()
width = args.width
model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, width))
target = torch.randn(width, width, generator=torch.Generator().manual_seed(1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
checkpointer = DdpCheckpointer(str(args.checkpoint_dir))
saved: dict[str, Any] = checkpointer.load_checkpoint() or {}
if "step" not in saved and "model_states" in saved:
    saved = saved["model_states"]  # a file written by the agent may keep DLRover's wrapper
if "step" in saved:
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    start = int(saved["step"])
else:
    start = 0
timeline.mark("restored", start)
ddp = DistributedDataParallel(model)
(ddp(torch.zeros(1, width)).sum() * 0).backward()  # settle DDP's buckets, as recovery_job does
optimizer.zero_grad()
for step in range(start, args.steps):
    timeline.mark("begin", step)
    generator = torch.Generator().manual_seed(step * 1009 + rank)
    inputs = torch.randn(args.batch, width, generator=generator)
    loss = nn.functional.mse_loss(ddp(inputs), inputs @ target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    timeline.mark("end", step)
    done = step + 1  # never 0, see the module docstring
    storage = StorageType.DISK if done % args.checkpoint_every == 0 else StorageType.MEMORY
    checkpointer.save_checkpoint(
        done, {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": done},
        storage_type=storage)
dist.destroy_process_group()
